"""JAX cuDNN attention: jax.nn.dot_product_attention(..., scale=s, implementation="cudnn")
with a negative scale returns NaN everywhere; implementation="xla" gives the right answer.
(A negative softmax scale is unusual but legal: the scores are just negated.)

Run: python repro_cudnn_negative_scale.py   (jax with CUDA, numpy)
"""
import jax
import jax.numpy as jnp
import numpy as np

r = np.random.default_rng(0)
q, k, v = (jnp.asarray(r.standard_normal((1, 8, 2, 16)), jnp.float16) for _ in range(3))  # [B, T, N, H]
for scale in (0.2, -0.2):
    ref = jax.nn.dot_product_attention(q, k, v, scale=scale, implementation="xla")
    out = jax.nn.dot_product_attention(q, k, v, scale=scale, implementation="cudnn")
    err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref.astype(jnp.float32))))
    print("scale %+.1f: cudnn NaN count %d, max |cudnn - xla| %.3g" % (scale, int(jnp.isnan(out).sum()), err))
