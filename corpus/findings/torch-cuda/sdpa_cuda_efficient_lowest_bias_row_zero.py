"""PyTorch's CUDA memory-efficient SDPA kernel returns 0 for a row whose every score is
below -FLT_MAX / log2(e) (about -2.36e38), e.g. every key of the row given an additive mask
of float32's lowest (or bfloat16's, -3.39e38): the kernel rescales scores by log2(e) for
exp2, the finite scores overflow to -inf and the row is taken as fully masked (0). The
softmax of those finite scores is defined, and the math kernel and float64 give it; with a
fill of -2.3e38 the efficient kernel is right too. Found by attnfuzz
(target:torch/cuda_sdpa_efficient, f32 with a bf16 mask of its lowest value).

Exit status: 1 with a BUG line while the behaviour is present, 0 with a FIXED line once it
is gone, 77 with a SKIP line where it cannot run (no CUDA GPU).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)

torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 2, 16, device="cuda") for _ in range(3))
bad = 0
for fill in (-1e38, -2.3e38, -2.4e38, torch.finfo(torch.float32).min):
    mask = torch.full((1, 1, 2, 2), float(fill), device="cuda")   # every key of every row
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask.double())
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    err = (out.double() - ref).abs().max().item()
    print(f"fill {fill:.3g}: max |efficient - float64| {err:.3g}, rows all zero {bool((out == 0).all())}")
    bad += not err < 1e-4
print(f"torch {torch.__version__}: {bad} of 4 fills wrong")
if bad:
    print(f"BUG: {bad} mask fills below -FLT_MAX/log2(e) give 0 rows")
    sys.exit(1)
print("FIXED: the efficient kernel keeps finite scores below -FLT_MAX/log2(e)")
sys.exit(0)
