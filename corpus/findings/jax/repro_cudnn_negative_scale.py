"""JAX cuDNN attention: jax.nn.dot_product_attention(..., scale=s, implementation="cudnn")
with a negative or zero scale returns NaN everywhere; implementation="xla" gives the right
answer. (A negative or zero softmax scale is unusual but legal: the scores are negated, or all
0 and the weights uniform.)

Run: python repro_cudnn_negative_scale.py   (jax with CUDA, numpy)

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

r = np.random.default_rng(0)
q, k, v = (jnp.asarray(r.standard_normal((1, 8, 2, 16)), jnp.float16) for _ in range(3))  # [B, T, N, H]
bug = False
for scale in (0.2, 0.0, -0.2):
    ref = jax.nn.dot_product_attention(q, k, v, scale=scale, implementation="xla")
    out = jax.nn.dot_product_attention(q, k, v, scale=scale, implementation="cudnn")
    err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref.astype(jnp.float32))))
    print("scale %+.1f: cudnn NaN count %d, max |cudnn - xla| %.3g" % (scale, int(jnp.isnan(out).sum()), err))
    bug |= not err < 1e-2   # NaN counts too

if bug:
    print("BUG: cudnn attention is wrong (NaN) for a zero or negative scale")
    sys.exit(1)
print("FIXED: cudnn attention matches xla for every scale")
sys.exit(0)
