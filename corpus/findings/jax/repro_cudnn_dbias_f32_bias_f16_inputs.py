"""JAX cuDNN attention backward with a float32 `bias` and float16 Q/K/V: the gradient of the
bias is wrong (the forward is right). implementation="xla" (the control) gives d(bias) = 0 at
keys past key_value_seq_lengths (their weight is 0) and the right values elsewhere;
implementation="cudnn" gives non-zero values at the padded keys and wrong ones at the valid
keys (up to 1e22..1e26 in the campaign's bundles, different from run to run; max 6e22 against
xla's 1.4e3 on their arrays). key_value_seq_lengths is not needed: without it the valid keys
are wrong alike. With the bias in Q's dtype (float16) cuDNN is right, so the suspect is the
bias dtype differing from Q's (d(bias) written in float16 into a float32 buffer?): unconfirmed.

It calls it a bug if d(bias) at a padded key exceeds 1e-3 (or is not finite), or if d(bias)
at the valid keys differs from xla's by more than 5% of xla's max, in any of: the campaign's
shape (S 396, kv length 227, head dim 8), S 256 / kv length 128 / head dim 64, the same
without key_value_seq_lengths, and (expected right) the same with a float16 bias.

Found by attnfuzz (target:jax/cudnn, 2 diverge bundles (dmask) of a GPU campaign, 2026-11-28,
jax 0.11.2, NVIDIA H100). Run on an H200 (jax 0.11.2), the same numbers twice: the three
float32-bias cases wrong (padded keys up to 0.014 / 20, valid keys off by 2.2 / 835 / 1016
where xla's max is 2.2 / 4.3 / 4.5), the float16-bias case right (0.002); exit 1.

Run: python repro_cudnn_dbias_f32_bias_f16_inputs.py   (jax with CUDA, numpy)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU or no cuDNN attention),
2 if the control (implementation="xla" against float64 numpy) is wrong.
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


def reference_dbias(q, k, v, bias, do, L):
    """float64 d(bias) = P * (dP - rowsum(dO * O)), keys >= L masked; layout [T, N=1, H] -> [T, S]."""
    q, k, v, do = (x[0, :, 0].astype(np.float64) for x in (q, k, v, do))
    s = q @ k.T / np.sqrt(q.shape[1]) + bias[0, 0]
    s[:, L:] = -np.inf
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dp = do @ v.T
    return p * (dp - (do * (p @ v)).sum(1, keepdims=True))


rng = np.random.default_rng(0)
bug = False
for S, L, D, bdt in ((396, 227, 8, jnp.float32), (256, 128, 64, jnp.float32), (256, 256, 64, jnp.float32),
                     (256, 128, 64, jnp.float16)):         # L == S: no key_value_seq_lengths
    q, k, v, do = (rng.standard_normal((1, S, 1, D)).astype(np.float16) for _ in range(4))
    bias = np.asarray(jnp.asarray(rng.standard_normal((1, 1, S, S)), bdt), np.float64)
    args = [jnp.asarray(x) for x in (q, k, v)]
    kw = {"key_value_seq_lengths": jnp.asarray([L], jnp.int32)} if L < S else {}
    b, g = jnp.asarray(bias, bdt), jnp.asarray(do)
    db = {}
    for impl in ("xla", "cudnn"):
        def dbias(b_, impl=impl):
            f = lambda bb: jax.nn.dot_product_attention(*args, bias=bb, implementation=impl, **kw)  # noqa: E731
            return jax.vjp(f, b_)[1](g)[0]
        try:
            db[impl] = np.asarray(jax.jit(dbias)(b), np.float64)[0, 0]
        except Exception as e:  # noqa: BLE001 - e.g. no cuDNN attention in this build
            if impl == "xla":
                raise
            print("SKIP: implementation=cudnn is not available here:", str(e).splitlines()[0][:160])
            sys.exit(77)
    ref = reference_dbias(q, k, v, bias, do, L)
    x, c = db["xla"], db["cudnn"]
    name = "S %d %s D %d bias %s" % (S, "kv length %d" % L if kw else "no seq lengths", D, np.dtype(bdt).name)
    if not (np.all(x[:, L:] == 0) and np.abs(x - ref).max() <= 0.05 * np.abs(ref).max()):
        print("control (xla) %s: max |dbias - float64| %.3g (float64 max %.3g), nonzero at padded keys %d: broken setup"
              % (name, np.abs(x - ref).max(), np.abs(ref).max(), int((x[:, L:] != 0).sum())))
        sys.exit(2)
    with np.errstate(invalid="ignore"):
        pad = np.nan_to_num(np.abs(c[:, L:]), nan=np.inf).max(initial=0.0)
        err = np.nan_to_num(np.abs(c[:, :L] - x[:, :L]), nan=np.inf).max()
    wrong_pad, wrong_valid = not pad <= 1e-3, not err <= 0.05 * np.abs(x).max()
    if kw:
        print("%s: padded keys: expected 0, cudnn max |dbias| %.4g (%d of %d nonzero)%s"
              % (name, pad, int((c[:, L:] != 0).sum()), c[:, L:].size, "  <- wrong" if wrong_pad else ""))
    print("%s: valid keys: xla max |dbias| %.4g, cudnn max |dbias| %.4g, max |cudnn - xla| %.4g%s"
          % (name, np.abs(x).max(), np.nan_to_num(np.abs(c[:, :L]), nan=np.inf).max(), err,
             "  <- wrong" if wrong_valid else ""))
    bug |= wrong_pad or wrong_valid
print("jax", jax.__version__, jax.devices("gpu")[0].device_kind)
if bug:
    print("BUG: cuDNN's d(bias) for a float32 bias with float16 Q is wrong (padded keys not 0, or valid keys off)")
    sys.exit(1)
print("FIXED: cuDNN's d(bias) is 0 at padded keys and matches xla at valid keys")
sys.exit(0)
