"""JAX / XLA:CPU: under jax.jit, exp of a NaN that comes from a select(-inf) minus itself
returns 0 or a subnormal instead of NaN; eager gives NaN. It shows in attention as a
fully masked row with a single key: the row's softmax is exp((x - max) - log(sum)) with
max = x and x = -inf (jnp.where(mask, s, -inf)), which is NaN in IEEE arithmetic, and the
jitted explicit attention returns a finite row of garbage (0, 4e-41, or a fraction of V)
instead of the NaN the same code gives eagerly. A row with two or more keys is NaN under
jit too (the reduction over one key is what gets folded).

Run: python repro_jit_exp_nan_select_cpu.py   (jax 0.10.2 on a CPU)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import os
os.environ["JAX_PLATFORMS"] = "cpu"  # an XLA:CPU bug: on a GPU machine jax would run on the GPU
import sys

import jax
import jax.numpy as jnp
import numpy as np


def f(s, allowed):
    x = jnp.where(allowed, s, -jnp.inf)   # row 1 fully masked: x = -inf
    d = x - x                             # NaN there (inf - inf)
    return jnp.exp(d - d)                 # NaN there


def attention(s, allowed, v):
    """Explicit attention over one key per row: softmax over the last axis, then P V."""
    p = jax.nn.softmax(jnp.where(allowed, s, -jnp.inf), axis=-1)   # [H, Sq, 1]
    return jnp.einsum("hqk,hkd->hqd", p, v)


s = jnp.zeros((2, 3, 1), jnp.float32)
allowed = jnp.array([True, False]).reshape(2, 1, 1)
v = jnp.array([[[1.0, 2.0]], [[3.0, 4.0]]], jnp.float32)
eager, jitted = np.asarray(f(s, allowed)), np.asarray(jax.jit(f)(s, allowed))
print("exp(d - d), masked head: eager", eager[1].ravel(), "jit", jitted[1].ravel())
ae, aj = np.asarray(attention(s, allowed, v)), np.asarray(jax.jit(attention)(s, allowed, v))
print("attention, fully masked head: eager", ae[1].ravel(), "jit", aj[1].ravel())
bug = bool(np.isnan(eager[1]).all() and not np.isnan(jitted[1]).all()) or bool(
    np.isnan(ae[1]).all() and not np.isnan(aj[1]).all())
if bug:
    print("BUG: jax.jit gives finite values where the same code gives NaN eagerly (exp of NaN)")
    sys.exit(1)
print("FIXED: jit and eager agree (NaN)")
sys.exit(0)
