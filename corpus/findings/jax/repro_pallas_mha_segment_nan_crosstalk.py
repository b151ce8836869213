"""JAX pallas attention.mha with segment_ids: a NaN in one segment's V makes the output of
every other segment packed into the same sequence NaN. Segment ids pack independent
sequences (requests) into one; segment 0's rows never attend to segment 1's keys, yet the
kernel multiplies the masked keys' weights (exactly 0 after the -0.7 * f32-max mask) by
their V, and 0 * NaN is NaN: one request's non-finite value poisons the requests batched
with it. Segment 0 alone, or the same rows with segment 1's V finite, is finite.

Run: python repro_pallas_mha_segment_nan_crosstalk.py   (jax, numpy; the Triton kernel on a
CUDA GPU, else the kernel's program in pallas's interpret mode on the CPU)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (the pallas GPU ops missing from this jax).
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

try:
    from jax.experimental.pallas.ops.gpu import attention
except Exception as e:  # noqa: BLE001 - not in this jax
    print("SKIP: jax.experimental.pallas.ops.gpu.attention does not import: %s" % e)
    sys.exit(77)

try:
    gpu = bool(jax.devices("gpu"))
except Exception:  # noqa: BLE001 - no CUDA backend
    gpu = False

r = np.random.default_rng(0)
T, H, D = 16, 1, 16
q, k, v = (r.standard_normal((1, T, H, D)).astype(np.float32) for _ in range(3))  # [B, T, N, H]
seg = np.array([[0] * 8 + [1] * 8], dtype=np.int32)      # segment 0: tokens 0-7, segment 1: 8-15 (Triton wants powers of 2)


def mha(v):
    return np.asarray(attention.mha(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(seg),
                                    sm_scale=0.25, causal=False, interpret=not gpu))


with jax.default_matmul_precision("highest"):
    clean = mha(v)
    v_nan = v.copy()
    v_nan[0, 12, 0, 3] = np.nan                               # a value of segment 1 only
    poisoned = mha(v_nan)
    alone = np.asarray(attention.mha(jnp.asarray(q[:, :8]), jnp.asarray(k[:, :8]), jnp.asarray(v[:, :8]), None,
                                     sm_scale=0.25, causal=False, interpret=not gpu))
print("mode:", "Triton on the GPU" if gpu else "pallas interpret mode on the CPU")
print("segment 0 rows, clean V: max |packed - alone| %.3g" % np.abs(clean[0, :8] - alone[0]).max())
print("segment 0 rows, a NaN in segment 1's V: %d NaN of %d" % (np.isnan(poisoned[0, :8]).sum(), poisoned[0, :8].size))
if np.isnan(poisoned[0, :8]).any():
    print("BUG: a NaN in segment 1's V makes segment 0's output NaN")
    sys.exit(1)
print("FIXED: segment 0's output does not depend on segment 1's values")
sys.exit(0)
