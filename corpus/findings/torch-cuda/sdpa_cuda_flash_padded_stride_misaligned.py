"""PyTorch's CUDA flash SDPA kernel faults with "CUDA error: misaligned address" (a sticky
error: the process's CUDA context is lost) when Q, K or V rows are padded so their stride is
not a multiple of 8 half-precision elements (here V = buf[..., :8] of a [..., 15] buffer). The
dispatcher accepts the view (the last dimension is contiguous); the kernel should decline it
or copy it, as the memory-efficient kernel does for K ("not correctly aligned"). Found by
attnfuzz (target:torch/cuda_sdpa_flash, padded rows, f16 and bf16, 17 crash bundles).
The same class as the memory-efficient kernel's fault (sdpa_cuda_efficient_padded_value_misaligned.py).

Runs the kernel in a child process: the fault kills the CUDA context.
Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU).
"""
import subprocess
import sys

import torch

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)

CHILD = r'''
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
torch.manual_seed(0)
B, H, S, D, PAD = 1, 1, 9, 8, 7
q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, H, S, D + PAD, device="cuda", dtype=torch.bfloat16)[..., :D]  # row stride 15
ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
    out = F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
print("max error", (out.double() - ref).abs().max().item())
'''
p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
if p.returncode != 0:
    lines = ([l for l in p.stderr.splitlines() if "Error:" in l]
             or [l for l in p.stderr.splitlines() if "error" in l.lower()])
    print("BUG:", lines[-1] if lines else p.stderr[-400:])
    sys.exit(1)
print(p.stdout.strip())
err = float(p.stdout.split()[-1])
if not err < 5e-2:
    print("BUG: the flash kernel is wrong for padded rows")
    sys.exit(1)
print("FIXED: the flash kernel runs right on padded rows")
sys.exit(0)
