"""FlashAttention-4 (flash-attn-4, flash_attn.cute) returns 0, Inf or NaN for a row whose
scores are large in magnitude yet finite in float32, where softmax is well defined: with one
key the output must equal V whatever the score. Its online softmax computes each weight as
exp2(s * scale_log2 - row_max_scaled) with row_max_scaled = row_max * scale_log2 rounded to
float32 (flash_attn/cute/softmax.py, `fastmath=True`): contracted into one FMA, the row
maximum's own term is not exp2(0) but exp2 of the rounding error of s * scale_log2, about
|s * scale_log2| * 2^-24, which underflows to 0 (or overflows to Inf) once |s * scale_log2|
passes a few billion. PyTorch's CUDA flash, memory-efficient and math SDPA give V on the same
inputs. Found by attnfuzz's H200 campaign of target:fa4/func (bundle
corpus/findings/fa4-cuda/bundles/diverge-0212ebf7da6beca8: bf16, one query, one key, K near
bf16's largest value, score -2.5e35, output 0 where V is expected).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU, no flash_attn.cute, or a GPU
it does not support).
"""
import sys

import torch

try:
    from flash_attn.cute import flash_attn_func
except ImportError:
    print("SKIP: needs flash-attn-4 (from flash_attn.cute import flash_attn_func)")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)
if torch.cuda.get_device_capability()[0] < 9:
    print("SKIP: flash_attn.cute runs on compute capability 9.x and up")
    sys.exit(77)

torch.manual_seed(0)
D = 64
bad = []
for dtype in (torch.bfloat16, torch.float16):
    for target in (1e1, 1e4, 1e6, 1e8, 1e9, 3e9, 1e10, 1e12, 1e20, 1e30):
        if dtype == torch.float16 and target > 1e8:
            continue   # f16 cannot hold such a product of two inputs
        # one query, one key: q = (a, 0, ...), k = (b, ...), so the score is a * b * scale
        q = torch.zeros(1, 1, 1, D, device="cuda", dtype=dtype)
        k = torch.randn(1, 1, 1, D, device="cuda", dtype=dtype)
        k[..., 0] = 1.0
        a = (target / 0.125) ** 0.5
        q[..., 0] = a
        k[..., 0] = a
        v = torch.randn(1, 1, 1, D, device="cuda", dtype=dtype)
        r = flash_attn_func(q, k, v, softmax_scale=0.125)
        out = r[0] if isinstance(r, tuple) else r
        torch.cuda.synchronize()
        score = float(q[0, 0, 0, 0].float() * k[0, 0, 0, 0].float() * 0.125)
        # one key: softmax weight 1, the output is V (up to the rounding of e / e)
        ok = bool(torch.isfinite(out).all()) and torch.allclose(out.float(), v.float(), rtol=1e-2, atol=1e-3)
        print(f"{str(dtype)[6:]:9s} score {score:10.3g}: output {'V' if ok else 'WRONG'} "
              f"(first element {float(out[0, 0, 0, 1]):.4g}, V {float(v[0, 0, 0, 1]):.4g})")
        if not ok:
            bad.append(score)
print(f"torch {torch.__version__}: {len(bad)} of the single-key cases wrong")
if bad:
    print(f"BUG: one key with score {min(abs(s) for s in bad):.3g} or more in magnitude does not give V")
    sys.exit(1)
print("FIXED: one key gives V for every score tried")
sys.exit(0)
