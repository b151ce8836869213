"""PyTorch's CUDA memory-efficient SDPA kernel faults with "CUDA error: misaligned address"
(a sticky error: the process's CUDA context is lost) when V's rows are padded so their
stride is not a multiple of 4 floats (here V = buf[..., :8] of a [..., 11] buffer); it should
decline the input (it does raise "key is not correctly aligned (strideM)" for a misaligned K)
or copy it. Found by attnfuzz (target:torch/cuda_sdpa_efficient, padded V rows); torch
2.11.0+cu130 on an H100.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU).
"""
import sys
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)

rng = np.random.default_rng(0)
B, H, S, D, PAD = 2, 2, 5, 8, 3
q = torch.from_numpy(rng.standard_normal((B, H, S, D)).astype(np.float32)).cuda()
k = torch.from_numpy(rng.standard_normal((B, H, S, D)).astype(np.float32)).cuda()
vbuf = torch.from_numpy(rng.standard_normal((B, H, S, D + PAD)).astype(np.float32)).cuda()
v = vbuf[..., :D]                          # row stride 11 floats: 44 bytes
ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
try:
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        out = F.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    err = (out.double() - ref).abs().max().item()
    print("ran; max err", err)
    if not err < 1e-4:
        print("BUG: the memory-efficient kernel is wrong for a padded V")
        sys.exit(1)
    print("FIXED: the memory-efficient kernel runs right on a padded V")
    sys.exit(0)
except Exception as e:  # noqa: BLE001
    print("BUG:", type(e).__name__, str(e).splitlines()[0])
    sys.exit(1)
