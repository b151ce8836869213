"""JAX: jax.jit(jax.nn.dot_product_attention) on float16 inputs fails to compile on a CPU:
"The precision 'F16_F16_F32' is not supported by dot_general on CPU". The eager call works:
_dot_product_attention_core asks for the F16_F16_F32 dot algorithm inside a try/except that
falls back to the default precision, but under jit the refusal comes at lowering, after the
except has been passed. (Known as "nn.dot_product_attention does not support float16 on
the CPU": keras-team/keras-hub#2354 works around it.)

Run: python repro_dpa_f16_jit_cpu.py   (jax 0.10.2 on a CPU, numpy)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import os
os.environ["JAX_PLATFORMS"] = "cpu"  # an XLA:CPU bug: on a GPU machine jax would run on the GPU
import sys
import jax
import jax.numpy as jnp
import numpy as np

q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 4, 2, 8)), dtype=jnp.float16)  # [B, T, N, H]
print("eager:", jax.nn.dot_product_attention(q, q, q).dtype)
try:
    out = jax.jit(lambda a: jax.nn.dot_product_attention(a, a, a, implementation="xla"))(q)
    print("jit:", out.dtype, "ok")
    print("FIXED: jit of dot_product_attention compiles for float16")
    sys.exit(0)
except Exception as e:  # noqa: BLE001
    print("BUG: jit fails:", str(e).strip().splitlines()[-1])
    sys.exit(1)
