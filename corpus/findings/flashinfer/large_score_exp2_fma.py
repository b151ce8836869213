"""FlashInfer's prefill kernels return 0, Inf or NaN for a row whose scores are large in
magnitude yet finite in float32, where softmax is well defined: with one key the output must
equal V whatever the score. The online softmax computes each weight as
exp2(s * sm_scale_log2 - m * sm_scale_log2) (prefill.cuh, hopper/attention_updater.cuh):
contracted into one fused multiply-add, the row maximum's own term is not exp2(0) but exp2
of the rounding error of s * sm_scale_log2, about |s * sm_scale_log2| * 2^-24, which
underflows to 0 or overflows once |s * sm_scale_log2| passes a few hundred million (f16,
whose P overflows past 2^16) or a few billion (bf16). The class of FlashAttention-4's
(corpus/findings/fa4/large_score_exp2_fma.py) and of pytorch/pytorch#121558. Found by
attnfuzz's H200 campaign of target:flashinfer/* of 2026-12-02 (bundle
corpus/findings/flashinfer-cuda/bundles/diverge-7e24b474b33b44d1: bf16, one query, one key,
K near bf16's largest value, score about -5.6e35, output 0 where V is expected).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU, or no flashinfer).
"""
import sys

import torch

try:
    import flashinfer
except ImportError:
    print("SKIP: needs flashinfer-python (import flashinfer)")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)

torch.manual_seed(0)
D, scale = 64, 0.125
bad = []
for dtype in (torch.bfloat16, torch.float16):
    for target in (1e1, 1e4, 1e6, 1e8, 3e8, 1e9, 3e9, 1e10, 1e12, 1e20, 1e30):
        if dtype == torch.float16 and target > 3e9:
            continue   # f16 cannot hold such a product of two inputs
        # one query, one key (NHD: [tokens, heads, dim]): q = (a, 0, ...), k = (a, ...), score a * a * scale
        q = torch.zeros(1, 1, D, device="cuda", dtype=dtype)
        k = torch.randn(1, 1, D, device="cuda", dtype=dtype)
        a = (target / scale) ** 0.5
        q[..., 0] = a
        k[..., 0] = a
        v = torch.randn(1, 1, D, device="cuda", dtype=dtype)
        out = flashinfer.single_prefill_with_kv_cache(q, k, v, causal=False, sm_scale=scale)
        torch.cuda.synchronize()
        score = float(q[0, 0, 0].float() * k[0, 0, 0].float() * scale)
        # one key: softmax weight 1, the output is V (up to the rounding of e / e)
        ok = bool(torch.isfinite(out).all()) and torch.allclose(out.float(), v.float(), rtol=1e-2, atol=1e-3)
        print(f"{str(dtype)[6:]:9s} score {score:10.3g}: output {'V' if ok else 'WRONG'} "
              f"(element 1 {float(out[0, 0, 1]):.4g}, V {float(v[0, 0, 1]):.4g})")
        if not ok:
            bad.append(score)
print(f"flashinfer {flashinfer.__version__}: {len(bad)} of the single-key cases wrong")
if bad:
    print(f"BUG: one key with score {min(abs(s) for s in bad):.3g} or more in magnitude does not give V")
    sys.exit(1)
print("FIXED: one key gives V for every score tried")
sys.exit(0)
