"""JAX / XLA:CPU: under jax.jit, softmax of finite scores past about 2^31 in magnitude is
NaN when the scores are a product (the scale times Q K^T, or q * k with a head dim of 1).

XLA recomputes the product inside both fusions the softmax lowers to, the row max's and
the subtract-exp's, and LLVM contracts `x * c - max` in the second into one FMA: at the
row's argmax the difference is then the product's rounding error (up to half an ulp of
|x c|, 128 at 2^31) instead of exactly 0, exp of it underflows (or overflows) for every
key and the row is 0/0 = NaN. Eager jax, and jit with the fusion pass disabled
(XLA_FLAGS=--xla_disable_hlo_passes=fusion), give the right answer.

Found by a stock attnfuzz CPU campaign: 9 jax/xla bundles (jax.nn.dot_product_attention,
implementation="xla": the scale 1/sqrt(D) times Q K^T) and 6 jax/explicit ones (a jnp
softmax over einsum scores), all with a near-overflow Q or K, NaN rows where float64 is
finite; minimized to corpus/findings/jax/bundles/nan_mismatch-f1dd277a2ebc8e69 (Q of
-1.5e38 to 3.3e38, D 21) and nan_mismatch-e4c5f0d372ebc98b (D 1). All 15 are clean with the
fusion pass disabled.

Run: python repro_jit_softmax_recompute_fma_nan_cpu.py   (jax 0.10.2 on a CPU)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import os
os.environ["JAX_PLATFORMS"] = "cpu"  # an XLA:CPU bug: on a GPU machine jax would run on the GPU
import sys

import jax
import jax.numpy as jnp
import numpy as np

# one query, two keys, head dim 1: scores q * k of -8.3e37 and -3.7e37; key 1 wins
q = np.array([-1.534694e38], np.float32).reshape(1, 1, 1, 1)          # [B, T, N, H]
k = np.array([0.542624, 0.241746], np.float32).reshape(1, 2, 1, 1)
v = np.array([0.4897, -0.015323], np.float32).reshape(1, 2, 1, 1)


def explicit(q, k, v):
    p = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def dpa(q, k, v):
    return jax.nn.dot_product_attention(q, k, v, scale=1.0, implementation="xla")


want = v[0, 1, 0, 0]
bad = False
for name, f in (("jnp softmax(einsum)", explicit), ("dot_product_attention(xla)", dpa)):
    eager = float(np.asarray(f(q, k, v)).ravel()[0])
    jitted = float(np.asarray(jax.jit(f)(q, k, v)).ravel()[0])
    print("jax %s %-28s eager %.6g, jit %.6g, want %.6g (key 1's value)" % (jax.__version__, name, eager, jitted, want))
    bad |= not np.isclose(jitted, want)
# the same in one fusion-free program: the max's and the exponent's product agree
s = np.float32(q.ravel()[0]) * k.ravel()
print("numpy: scores %s, s - max(s) = %s" % (s, s - s.max()))
if bad:
    print("BUG: jit softmax of finite scores is NaN (the product recomputed and FMA-contracted)")
    sys.exit(1)
print("FIXED: jit softmax of large finite scores is right")
sys.exit(0)
