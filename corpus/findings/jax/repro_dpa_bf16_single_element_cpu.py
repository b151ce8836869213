"""JAX / XLA:CPU: jax.jit(jax.nn.dot_product_attention) on bfloat16 fails at run time when the
attention is a single element per head (B = T = S = N = 1): "INVALID_ARGUMENT: Algorithm
not supported by the ElementalIrEmitter: ALG_DOT_BF16_BF16_F32". The degenerate dot
(1x1 output) is emitted elementally, and the elemental emitter does not implement the
BF16_BF16_F32 dot algorithm dot_product_attention asks for; any larger shape works.

Run: python repro_dpa_bf16_single_element_cpu.py   (jax 0.10.2 on a CPU)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import os
os.environ["JAX_PLATFORMS"] = "cpu"  # an XLA:CPU bug: on a GPU machine jax would run on the GPU
import sys
import jax
import jax.numpy as jnp

bug = False
f = jax.jit(lambda q, k: jax.nn.dot_product_attention(q, k, k, implementation="xla"))
for shape in [(2, 1, 1, 24), (1, 2, 1, 24), (1, 1, 1, 24)]:            # [B, T, N, H], S = T
    q = jnp.ones(shape, jnp.bfloat16)
    try:
        f(q, q).block_until_ready()
        print(shape, "ok")
    except Exception as e:  # noqa: BLE001
        print(shape, "fails:", str(e).splitlines()[0])
        bug = True
if bug:
    print("BUG: jit(dot_product_attention) fails on bf16 with one element per head")
    sys.exit(1)
print("FIXED: every shape runs")
sys.exit(0)
