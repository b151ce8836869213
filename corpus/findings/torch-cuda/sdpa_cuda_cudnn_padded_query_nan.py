"""PyTorch's cuDNN SDPA kernel returns NaN (no error) when Q's rows are padded so their
stride is not a multiple of 8 elements (here Q = buf[..., :8] of a [..., 10] bf16 buffer):
the other kernels give the right answer, and cuDNN itself is right on a contiguous copy.
Found by attnfuzz (target:torch/cuda_sdpa_cudnn, padded rows, minimized to B1 H1 S2 D8).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU).
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
for dtype in (torch.bfloat16, torch.float16):
    q = torch.randn(1, 1, 2, 10, device="cuda", dtype=dtype)[..., :8]   # row stride 10
    k = torch.randn(1, 1, 2, 8, device="cuda", dtype=dtype)
    v = torch.randn(1, 1, 2, 8, device="cuda", dtype=dtype)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    try:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = F.scaled_dot_product_attention(q, k, v)
            same = F.scaled_dot_product_attention(q.contiguous(), k, v)
    except RuntimeError as e:
        print(f"{dtype}: cuDNN declines: {str(e).splitlines()[0]}")
        continue
    err = (out.double() - ref).abs().max().item()
    errc = (same.double() - ref).abs().max().item()
    if not err < 5e-2:
        bad += 1
        print(f"cudnn {dtype} padded Q rows: max error {err} (contiguous copy: {errc})")
print(f"torch {torch.__version__}: {bad} mismatches")
if bad:
    print(f"BUG: {bad} configurations mismatch")
    sys.exit(1)
print("FIXED: cuDNN gives the right answer on padded Q rows")
sys.exit(0)
