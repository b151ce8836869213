"""JAX pallas decode_attention.gqa and paged_attention on float16: each key partition's
output is stored unnormalized (sum_j exp(s_j - m) v_j) in the output dtype and only divided
by the softmax denominator after the partitions are combined. With V values whose mean fits
f16 but whose weighted sum over a partition does not (8 keys of equal weight, V = 20000:
the answer is 20000, the partial sum 160000 > 65504), the output is Inf.
jax.nn.dot_product_attention gives 20000.

Run: python repro_pallas_split_kv_f16_partial_overflow.py   (jax, numpy; the Triton kernels
on a CUDA GPU, else the kernels' program in pallas's interpret mode on the CPU)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (the pallas GPU ops missing from this jax).
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

try:
    from jax.experimental.pallas.ops.gpu import decode_attention, paged_attention
except Exception as e:  # noqa: BLE001 - not in this jax
    print("SKIP: the pallas GPU attention ops do not import: %s" % e)
    sys.exit(77)

try:
    gpu = bool(jax.devices("gpu"))
except Exception:  # noqa: BLE001 - no CUDA backend
    gpu = False

B, H, D, S, n = 1, 1, 16, 16, 8
q = jnp.zeros((B, H, D), jnp.float16)                  # every score 0: equal weights
k = jnp.zeros((B, S, H, D), jnp.float16)
v = jnp.full((B, S, H, D), 20000.0, jnp.float16)       # the mean is 20000, an f16 value
lengths = jnp.array([n], jnp.int32)

decode = decode_attention.gqa(q, k, v, kv_seq_len=lengths, k_splits=1, block_k=16, interpret=not gpu)
pages = lambda x: jnp.transpose(x[0].reshape(1, S, H, D), (2, 0, 1, 3))  # noqa: E731 - [H, 1 page, S, D]
paged = paged_attention.paged_attention(q, pages(k), pages(v), jnp.zeros((B, 1), jnp.int32), lengths,
                                        k_splits=1, pages_per_compute_block=1, interpret=not gpu)
ref = jax.nn.dot_product_attention(q[:, None], k[:, :n], v[:, :n], implementation="xla")[:, 0]
print("mode:", "Triton on the GPU" if gpu else "pallas interpret mode on the CPU")
print("dot_product_attention: %s, decode_attention.gqa: %s, paged_attention: %s"
      % (float(ref[0, 0, 0]), float(decode[0, 0, 0]), float(paged[0, 0, 0])))
bad = [name for name, o in (("decode_attention.gqa", decode), ("paged_attention", paged))
       if not np.isfinite(np.asarray(o, dtype=np.float32)).all()]
if bad:
    print("BUG: %s give Inf where the attention output is 20000 (the unnormalized f16 partial overflows)"
          % " and ".join(bad))
    sys.exit(1)
print("FIXED: both kernels give a finite output")
sys.exit(0)
