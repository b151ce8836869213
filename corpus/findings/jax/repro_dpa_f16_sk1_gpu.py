"""JAX / XLA:GPU: jax.jit(jax.nn.dot_product_attention) on float16 fails at run time when the
key/value sequence has length 1: "INVALID_ARGUMENT: Unsupported dot precision algorithm: 4"
(the F16_F16_F32 dot algorithm dot_product_attention asks for, on a degenerate dot).
bfloat16 and float32, and any key length above 1, run. Seen on an H100 with jax 0.11.2.

Run: python repro_dpa_f16_sk1_gpu.py   (jax with CUDA)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU).
"""
import sys
import jax
import jax.numpy as jnp

try:
    jax.devices("gpu")
except Exception:  # noqa: BLE001 - no CUDA backend
    print("SKIP: needs jax with a CUDA GPU")
    sys.exit(77)

bug = False
f = jax.jit(lambda q, k: jax.nn.dot_product_attention(q, k, k, implementation="xla"))
for dt in (jnp.float16, jnp.bfloat16, jnp.float32):
    for T, S in ((4, 1), (4, 2), (1, 1)):
        q = jnp.ones((2, T, 3, 16), dt)     # [B, T, N, H]
        k = jnp.ones((2, S, 3, 16), dt)
        try:
            f(q, k).block_until_ready()
            r = "ok"
        except Exception as e:  # noqa: BLE001
            r = "fails: " + str(e).splitlines()[0]
            bug = True
        print(jnp.dtype(dt).name, "T=%d S=%d" % (T, S), r)

if bug:
    print("BUG: jit(dot_product_attention) fails on the GPU for some dtype / key length")
    sys.exit(1)
print("FIXED: every dtype and key length runs")
sys.exit(0)
