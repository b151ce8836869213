"""PyTorch's CUDA flash SDPA kernel returns NaN when `scale` is 0 or negative (f16 and bf16,
any shape, here one query, one key, head_dim 1... 64); the math kernel and float64 give the
softmax-weighted values. A negative or zero scale is legal for F.scaled_dot_product_attention
(the other kernels honour it). Found by attnfuzz (target:torch/cuda_sdpa_flash, minimized to
Q, K, V of shape [1, 1, 1, 1]).

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
for dtype in (torch.float16, torch.bfloat16):
    for D in (1, 64):
        q, k, v = (torch.randn(1, 1, 3, D, device="cuda", dtype=dtype) for _ in range(3))
        for scale in (0.0, -0.5):
            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=scale)
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                out = F.scaled_dot_product_attention(q, k, v, scale=scale)
            err = (out.double() - ref).abs().max().item()
            if not err < 1e-2:
                bad += 1
                print(f"flash {dtype} D={D} scale={scale}: max error {err} "
                      f"(out {out.flatten()[:3].tolist()}, want {ref.flatten()[:3].tolist()})")
print(f"torch {torch.__version__}: {bad} mismatches")
if bad:
    print(f"BUG: {bad} configurations mismatch")
    sys.exit(1)
print("FIXED: the flash kernel honours a zero or negative scale")
sys.exit(0)
