"""JAX cuDNN attention, bfloat16: a boolean `mask` does not hold back a key whose score is
very large. implementation="cudnn" turns the mask into a bias that it adds to the scores,
get_large_negative_number(bfloat16) = -2 << 40 = -2.2e12 (jax/_src/cudnn/
fused_attention_stablehlo.py, combine_bias_and_mask; a workaround for cuDNN's arithmetic on
two large negative numbers, jax-ml/jax PR #22078), so a masked key whose score exceeds the
live keys' by more than 2.2e12 keeps its weight; implementation="xla" (the control) stays
right. The bfloat16 face of repro_cudnn_f16_mask_bias_leak.py (float16: -32768).

Query 0 may attend to key 0 only; key 1 (masked) scores about 8e12 (or 8e11) against key 0's
0 (scale 1, bfloat16 inputs 1e6 x 1e6 x 8), V is one-hot per key, so the output row is the
weights: [1, 0] is right. 8e12 leaks (output V[1]), 8e11 does not.

Found by attnfuzz (target:jax/cudnn, diverge bundle of a GPU campaign, 2026-11-28, jax 0.11.2,
NVIDIA H100; near-overflow K, live scores ~ -3e35). Run on an H200 (jax 0.11.2): 8e12 gives
[0, 1] under cudnn, 8e11 [1, 0], xla [1, 0]; exit 1.

Run: python repro_cudnn_bf16_mask_bias_leak.py   (jax with CUDA, numpy)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU or no cuDNN attention),
2 if the control (implementation="xla") is wrong.
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
mask = jnp.asarray([[[[True, False]]]])
v = np.zeros((1, 2, 1, D), np.float32)
v[0, 0, 0, 0] = v[0, 1, 0, 1] = 1.0                    # output[:2] = the two weights
bug = False
for kk in (1e6, 1e5):                                   # masked score ~8e12 / ~8e11, live 0
    q = np.full((1, 1, 1, D), 1e6, np.float32)
    k = np.zeros((1, 2, 1, D), np.float32)
    k[0, 1, 0, :] = kk
    args = [jnp.asarray(x, jnp.bfloat16) for x in (q, k, v)]
    score = D * float(args[0][0, 0, 0, 0]) * float(args[1][0, 1, 0, 0])
    out = {}
    for impl in ("xla", "cudnn"):
        try:
            o = jax.nn.dot_product_attention(*args, mask=mask, scale=1.0, implementation=impl)
        except Exception as e:  # noqa: BLE001 - e.g. no cuDNN attention in this build
            if impl == "xla":
                raise
            print("SKIP: implementation=cudnn is not available here:", str(e).splitlines()[0][:160])
            sys.exit(77)
        out[impl] = np.asarray(o, np.float32)[0, 0, 0, :2]
    if abs(out["xla"][0] - 1.0) > 1e-2:
        print("control (implementation=xla) gives %s instead of [1, 0]: broken setup" % out["xla"].tolist())
        sys.exit(2)
    wrong = abs(out["cudnn"][0] - 1.0) > 1e-2
    print("masked key scored %.3g vs live 0: expected [1, 0], xla %s, cudnn %s %s"
          % (score, out["xla"].round(3).tolist(), out["cudnn"].round(3).tolist(), "<- wrong" if wrong else "ok"))
    bug |= wrong
print("jax", jax.__version__, jax.devices("gpu")[0].device_kind)
if bug:
    print("BUG: with bfloat16 a masked key whose score exceeds the live one by more than 2.2e12 keeps its weight under implementation=cudnn")
    sys.exit(1)
print("FIXED: the masked key stays masked under implementation=cudnn")
sys.exit(0)
