"""JAX cuDNN attention: a row whose every score is below -FLT_MAX/log2(e) (about -2.36e38)
comes out 0. One query, one key, a bias of bfloat16's or float32's lowest value on that key:
softmax over a single key is 1 whatever its score, so the output is V (implementation="xla"
gives V); implementation="cudnn" gives 0, as cuDNN rescales the scores by log2(e) for exp2
and the finite scores overflow to -inf (the row is then taken as fully masked; torch's
cuDNN and memory-efficient SDPA do the same). A bias of -2.3e38, or float16's lowest, is
right.

Run: python repro_cudnn_lowest_bias_row_zero.py   (jax with CUDA, numpy)

Exit status: 1 with a BUG line while the behaviour is present, 0 with a FIXED line once it
is gone, 77 with a SKIP line where it cannot run (no CUDA GPU).
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

try:
    jax.devices("gpu")
except Exception:  # noqa: BLE001 - no CUDA backend
    print("SKIP: needs jax with a CUDA GPU")
    sys.exit(77)

r = np.random.default_rng(0)
D = 64
bug = False
# (case dtype, bias dtype, bias value): measured on an H200 (jax 0.11.2): the first two
# give 0 under cudnn, the others V
for dt, bdt, val in (("bfloat16", "bfloat16", None), ("bfloat16", "float32", None),
                     ("bfloat16", "bfloat16", -2.3e38), ("float16", "float16", None)):
    q, k, v = (jnp.asarray(r.standard_normal((1, 1, 1, D)), dt) for _ in range(3))
    lowest = float(jnp.finfo(bdt).min) if val is None else val
    bias = jnp.full((1, 1, 1, 1), lowest, bdt)
    out = {impl: np.asarray(jax.nn.dot_product_attention(q, k, v, bias=bias, implementation=impl), np.float32)[0, 0, 0]
           for impl in ("xla", "cudnn")}
    want = np.asarray(v, np.float32)[0, 0, 0]
    wrong = not np.allclose(out["cudnn"], want, atol=1e-2)
    print("%s, bias %s %.4g on the only key: V %s, xla %s, cudnn %s %s"
          % (dt, bdt, lowest, want[:3].round(3).tolist(), out["xla"][:3].round(3).tolist(),
             out["cudnn"][:3].round(3).tolist(), "<- wrong" if wrong else "ok"))
    bug |= wrong
print("jax", jax.__version__)
if bug:
    print("BUG: implementation=cudnn gives 0 for a row whose every score is below -FLT_MAX/log2(e)")
    sys.exit(1)
print("FIXED: implementation=cudnn gives V for a single key at a bias of the dtype's lowest value")
sys.exit(0)
