"""JAX cuDNN attention: local_window_size=(left, 0) without is_causal is accepted by
implementation="cudnn" (jax maps it to cuDNN's sliding_window_length = left + 1) but the
right bound 0 is not applied: keys after the query position still take part, and the output
differs from implementation="xla" (which masks j > i). With is_causal=True the two agree.

Run: python repro_cudnn_window_right0.py   (jax with CUDA, numpy)

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
B, T, N, H = 1, 10, 2, 16
q, k, v = (jnp.asarray(r.standard_normal((B, T, N, H)), jnp.float16) for _ in range(3))
bug = False
for kw in ({"local_window_size": (3, 0)},
           {"local_window_size": (3, 0), "is_causal": True},
           {"local_window_size": (3, 0), "key_value_seq_lengths": jnp.array([6], jnp.int32)}):
    ref = jax.nn.dot_product_attention(q, k, v, implementation="xla", **kw)
    try:
        out = jax.nn.dot_product_attention(q, k, v, implementation="cudnn", **kw)
        err = float(jnp.nanmax(jnp.abs(out.astype(jnp.float32) - ref.astype(jnp.float32))))
        print({k_: (v_.tolist() if hasattr(v_, "tolist") else v_) for k_, v_ in kw.items()},
              "max |cudnn - xla| = %.3g" % err, "wrong" if err > 1e-2 else "ok")
        bug |= err > 1e-2
    except Exception as e:  # noqa: BLE001
        print(kw, "error:", str(e).splitlines()[0][:120])

if bug:
    print("BUG: cudnn ignores the right window bound 0 without is_causal")
    sys.exit(1)
print("FIXED: cudnn applies local_window_size=(3, 0) like xla")
sys.exit(0)
