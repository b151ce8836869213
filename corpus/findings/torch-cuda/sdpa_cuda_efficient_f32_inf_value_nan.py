"""PyTorch's CUDA memory-efficient SDPA kernel in f32 turns an Inf in a live V row into NaN:
the output column of that value should be +Inf for every query (each weight is positive);
the kernel gives NaN there, while the math kernel and float64 give +Inf, and the same
kernel in f16 gives +Inf. The same probe found the f32 path's precision on subnormal V
about 2^-11 relative (0.25-0.34% against the math kernel's 3e-6, and 7e-7 for the same
values scaled up): consistent with f32 computed as TF32 pieces (x = hi + lo; Inf - Inf is
NaN in lo, and a subnormal lo flushed), which the source was not read to confirm. Reported
as precision: no IEEE answer is wrong for finite inputs.

Found by attnfuzz (target:torch/cuda_sdpa_efficient, and cuda_sdpa_jagged, whose f32
nested calls take this kernel: nan_mismatch bundles with a planted Inf in V, H100, torch
2.11.0+cu130); this script's configurations ran there (H100 probe, 2026-11-28).

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
bad = 0
for dtype in (torch.float32, torch.float16):
    q, k, v = (torch.randn(1, 1, 4, 64, device="cuda", dtype=dtype) for _ in range(3))
    v[0, 0, 1, 3] = float("inf")
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())[0, 0, :, 3]
    for be in (SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION):
        with sdpa_kernel([be]):
            out = F.scaled_dot_product_attention(q, k, v)[0, 0, :, 3]
        same = bool(torch.equal(out.double(), ref))
        bad += not same
        print(f"{dtype} {be.name}: column 3 {out.tolist()} (float64: {ref.tolist()}){'' if same else '  <- wrong'}")
print(f"torch {torch.__version__}: {bad} mismatches")
if bad:
    print(f"BUG: {bad} kernels give NaN for an Inf in a live V row")
    sys.exit(1)
print("FIXED: an Inf in V gives Inf")
sys.exit(0)
