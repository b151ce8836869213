"""FlashAttention-4 (flash-attn-4, flash_attn.cute) returns NaN for a zero or negative
`softmax_scale`: its online softmax keeps an *unscaled* running row maximum (the row max of
Q K^T, with -inf filling masked and out-of-range keys) and scales afterwards,
exp2(s * scale_log2 - row_max * scale_log2) (flash_attn/cute/softmax.py). With a negative
scale the largest raw score gives the smallest term, the -inf fill of a partial key tile
becomes +inf, and with a zero scale 0 * -inf is NaN. Softmax is defined for any real scale
(a negative one is a softmax over -Q K^T; scale 0 is the mean of V), and the API takes the
value without a check. The same mechanism as FlashInfer's prefill
(corpus/findings/flashinfer/prefill_negative_scale_nan.py). Found by attnfuzz's H200
campaign of target:fa4/func and fa4/varlen (bundle
corpus/findings/fa4/bundles/nan_mismatch-c2985313fe254655: bf16 [1, 1, 2, 64], scale 0,
every output NaN).

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
bad = 0
for causal in (False, True):
    B, n, H, D = 1, 24, 2, 64   # 24 keys: the last key tile is partly out of range
    q, k, v = (torch.randn(B, n, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for scale in (-0.125, 0.0, 0.125):   # 0.125: the control, honoured
        s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) * scale
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
        ref = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v.double())
        r = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
        out = r[0] if isinstance(r, tuple) else r
        torch.cuda.synchronize()
        err = (out.double() - ref).abs().max().item()
        if not err < 3e-2:
            bad += 1 if scale <= 0 else 0
            print(f"causal={causal} softmax_scale={scale}: max error {err} "
                  f"(NaN: {int(out.isnan().sum())} of {out.numel()})")
print(f"torch {torch.__version__}: {bad} mismatches with a zero or negative softmax_scale")
if bad:
    print("BUG: a zero or negative softmax_scale gives NaN")
    sys.exit(1)
print("FIXED: a zero or negative softmax_scale is honoured")
sys.exit(0)
