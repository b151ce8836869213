"""JAX cuDNN attention, float16: a boolean `mask` does not hold back a key whose score is
large. implementation="cudnn" turns the mask into a bias that it adds to the scores,
get_large_negative_number(float16) = -2 << 14 = -32768 (jax/_src/cudnn/
fused_attention_stablehlo.py; a workaround for cuDNN's arithmetic on two large negative
numbers, jax-ml/jax PR #22078), so a masked key whose score exceeds the live keys' by more
than 32768 keeps its weight; implementation="xla" replaces the masked scores and stays
right. In bfloat16 the bias (-2 << 40) swamps every score, so this needs float16.

Query 0 may attend to key 0 only; key 1 (masked) scores 80000 against key 0's 0 (float32
scores from float16 inputs: 8 x 100 x 100), V is one-hot per key, so the output row is
the weights: [1, 0] is right.

Run: python repro_cudnn_f16_mask_bias_leak.py   (jax with CUDA, numpy)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU).
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

D = 8
bug = False
for score_scale in (1.0, 0.5, 0.01):      # key 1's score: 80000, 40000, 800 (measured on an H100: the first two leak)
    q = np.full((1, 1, 1, D), 100.0, np.float32)
    k = np.zeros((1, 2, 1, D), np.float32)
    k[0, 1, 0, :] = 100.0 * score_scale
    v = np.zeros((1, 2, 1, D), np.float32)
    v[0, 0, 0, 0] = v[0, 1, 0, 1] = 1.0
    mask = jnp.asarray([[[[True, False]]]])
    args = [jnp.asarray(x, jnp.float16) for x in (q, k, v)]
    out = {impl: np.asarray(jax.nn.dot_product_attention(*args, mask=mask, scale=1.0, implementation=impl),
                            np.float32)[0, 0, 0, :2] for impl in ("xla", "cudnn")}
    wrong = abs(out["cudnn"][0] - 1.0) > 1e-2
    print("masked key scored %g: weights xla %s, cudnn %s %s"
          % (D * 100.0 * 100.0 * score_scale, out["xla"].round(3).tolist(), out["cudnn"].round(3).tolist(),
             "<- wrong" if wrong else "ok"))
    bug |= wrong
print("jax", jax.__version__)
if bug:
    print("BUG: with float16 a masked key whose score exceeds the live one by more than 32768 keeps its weight under implementation=cudnn")
    sys.exit(1)
print("FIXED: the masked key stays masked under implementation=cudnn")
sys.exit(0)
