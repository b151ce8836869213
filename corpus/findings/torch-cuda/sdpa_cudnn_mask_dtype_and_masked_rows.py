"""PyTorch's cuDNN SDPA kernel (sdpa_kernel(CUDNN_ATTENTION)) on an H100:
(1) an additive float32 attn_mask with f16/bf16 Q, K, V (SDPA accepts it; the math kernel
    uses it correctly) gives NaN or wrong values: the mask seems read in Q's dtype;
(2) a fully masked query row (a boolean mask with no True in the row) gives finite
    nonzero values instead of the 0 the math kernel gives.
Found by attnfuzz (target:torch/cuda_sdpa_cudnn, mask dtype != Q dtype; key padding that
masks whole rows); torch 2.11.0+cu130. Related: pytorch PR #191612 (mask bits reinterpreted).

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
B, H, S, D = 1, 2, 16, 64
q, k, v = (torch.from_numpy(rng.standard_normal((B, H, S, D))).to("cuda", torch.float16) for _ in range(3))


def run(backend, mask):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).float()


# (1) float32 additive mask, f16 inputs
m32 = torch.from_numpy(rng.standard_normal((B, 1, S, S)).astype(np.float32)).cuda()
ref = run(SDPBackend.MATH, m32)
out = run(SDPBackend.CUDNN_ATTENTION, m32)
err1 = float((out - ref).abs().nan_to_num(float("inf")).max())
print("(1) f32 mask, f16 q: NaN", int(out.isnan().sum()), " max |cudnn - math|", err1)
print("    same mask cast to f16:", float((run(SDPBackend.CUDNN_ATTENTION, m32.half()) - ref).abs().max()))

# (2) a fully masked row
bm = torch.ones(B, 1, S, S, dtype=torch.bool, device="cuda")
bm[..., 3, :] = False
row_math = run(SDPBackend.MATH, bm)[0, 0, 3]
row_cudnn = run(SDPBackend.CUDNN_ATTENTION, bm)[0, 0, 3]
print("(2) fully masked row 3: math", row_math[:4].tolist(), " cudnn", row_cudnn[:4].tolist())
bug1 = not err1 < 1e-2
bug2 = not bool((row_cudnn == row_math).all())
if bug1 or bug2:
    print("BUG:", "(1) an f32 mask with f16 q is wrong;" if bug1 else "",
          "(2) a fully masked row differs from math" if bug2 else "")
    sys.exit(1)
print("FIXED: cudnn matches math for an f32 mask and a fully masked row")
sys.exit(0)
