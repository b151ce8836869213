"""PyTorch's CUDA flash SDPA backward (sdpa_kernel(FLASH_ATTENTION), bf16 and f16): an Inf in
one key row whose score is -inf for every query (that key's weight is 0, the forward is
finite and right) gives NaN dK and dV for that key when the query length is not a multiple of
the kernel's tile (Sq = 1); the math kernel gives 0, and so does flash with Sq = 128.
Likely cause (from FlashAttention-2's flash_bwd_kernel.h, not confirmed): the backward
zero-fills the out-of-range query rows of its tile and sets their LSE to +inf "so probs are
always 0", but their recomputed score on the Inf key is 0 x Inf = NaN, and the NaN P meets
the zero-filled rows in dV = P^T dO and dK = dS^T Q. Expected: dK[0] = dV[0] = 0.

Found by attnfuzz (target:torch/cuda_sdpa_flash, 2 nan_mismatch bundles (dk, dv) of a GPU
campaign, 2026-11-28, torch 2.11.0+cu130, NVIDIA H100); confirmed on an H200 (torch
2.11.0+cu130): Sq 1 NaN dK[0]/dV[0] in bf16 and f16, Sq 128 zero; exit 1.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU), 2 if the control (the math
kernel) is wrong.
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)


def grads(backend, dtype, q, k, v, do):
    """(forward finite?, dK[0], dV[0]) for the given backend."""
    qt, kt, vt = (torch.from_numpy(x).to("cuda", dtype).requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel([backend]):
        o = F.scaled_dot_product_attention(qt, kt, vt)
    o.backward(torch.from_numpy(do).to("cuda", dtype))
    return (bool(torch.isfinite(o).all()), kt.grad[0, 0, 0].double().cpu().numpy(),
            vt.grad[0, 0, 0].double().cpu().numpy())


def show(x):
    return np.array2string(x[:4], precision=3) + " ..."


rng = np.random.default_rng(4)
bug = False
for sq in (1, 128):
    q = rng.standard_normal((1, 1, sq, 64))
    q[..., 23] = -np.abs(q[..., 23]) - 0.5                 # every query's score on key 0: -inf
    k = rng.standard_normal((1, 1, 2, 64))
    k[0, 0, 0, 23] = np.inf
    v, do = rng.standard_normal((1, 1, 2, 64)), rng.standard_normal((1, 1, sq, 64))
    fin, dk0, dv0 = grads(SDPBackend.MATH, torch.float32, q, k, v, do)     # control
    if not (fin and np.all(dk0 == 0) and np.all(dv0 == 0)):
        print(f"control (math kernel, float32) Sq {sq}: forward finite {fin}, dK[0] {show(dk0)}, "
              f"dV[0] {show(dv0)}; expected finite and 0: broken setup")
        sys.exit(2)
    for dtype in (torch.bfloat16, torch.float16):
        fin, dk0, dv0 = grads(SDPBackend.FLASH_ATTENTION, dtype, q, k, v, do)
        wrong = not (np.all(np.abs(dk0) < 1e-3) and np.all(np.abs(dv0) < 1e-3))
        print(f"Sq {sq}, Inf in K[0] (weight 0), FLASH {str(dtype)[6:]}: forward finite {fin}; "
              f"dK[0] expected 0, got {show(dk0)}; dV[0] expected 0, got {show(dv0)}"
              f"{'  <- wrong' if wrong else ''}")
        bug |= wrong
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
if bug:
    print("BUG: flash backward gives NaN dK/dV for a zero-weight key holding Inf when Sq is not a multiple of its tile")
    sys.exit(1)
print("FIXED: flash backward gives dK = dV = 0 for a zero-weight key holding Inf")
sys.exit(0)
