"""PyTorch's cuDNN SDPA (sdpa_kernel(CUDNN_ATTENTION)), float16: a boolean attn_mask does not
hold back a key whose score is large. For the cuDNN backend aten converts the boolean mask
into a finite additive bias, where(mask, 0, -65504) (convert_boolean_attn_mask_cudnn in
aten/src/ATen/native/transformers/attention.cpp, "workaround -inf issue with cuDNN"), so a
masked key whose score exceeds the live keys' by more than 65504 keeps its weight. The same
case with a float mask holding -inf is right, and the math kernel (the control) is right.
Possibly related (not verified): pytorch#177842 ("When using the cuDNN backend, custom masks
become ineffective").

Query 0 may attend to key 0 only; key 1 (masked) scores 80000 (or 40000) against key 0's 0
(scale 1, f16 inputs 100 x 100 x 8), V is one-hot per key, so the output row is the
weights: [1, 0] is right. 80000 leaks (output V[1]), 40000 does not.

Found by attnfuzz (target:torch/cuda_sdpa_cudnn, 8 diverge bundles of a GPU campaign,
2026-11-28, torch 2.11.0+cu130, NVIDIA H100). Run on an H200 (torch 2.11.0+cu130): 80000 gives
[0, 1], 40000 and the -inf float mask [1, 0]; exit 1.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU), 2 if the control is wrong.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)

D = 8
v = torch.zeros(1, 1, 2, D, device="cuda")
v[0, 0, 0, 0] = v[0, 0, 1, 1] = 1.0                    # output[:2] = the two weights
bool_mask = torch.tensor([True, False], device="cuda").view(1, 1, 1, 2)
inf_mask = torch.tensor([0.0, float("-inf")], device="cuda").view(1, 1, 1, 2)
bug = False
for kval, leaks_now in ((100.0, True), (50.0, False)):  # masked score 80000 / 40000, live 0
    q = torch.full((1, 1, 1, D), 100.0, device="cuda")
    k = torch.zeros(1, 1, 2, D, device="cuda")
    k[0, 0, 1] = kval
    # control: the math kernel in float64 with the boolean mask
    ctl = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bool_mask,
                                         scale=1.0)[0, 0, 0, :2]
    if not torch.allclose(ctl, torch.tensor([1.0, 0.0], device="cuda", dtype=torch.float64)):
        print(f"control (math kernel, float64) gives {ctl.tolist()} instead of [1, 0]: broken setup")
        sys.exit(2)
    h = [x.half() for x in (q, k, v)]
    for name, mask in (("bool mask", bool_mask), ("float -inf mask", inf_mask.half())):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = F.scaled_dot_product_attention(*h, attn_mask=mask, scale=1.0)[0, 0, 0, :2].float()
        wrong = not abs(out[0].item() - 1.0) < 1e-2
        print(f"masked key scored {D * 100 * kval:g} vs live 0, cuDNN, {name}: expected [1, 0], "
              f"got {out.tolist()}{'  <- wrong' if wrong else ''}")
        bug |= wrong
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
if bug:
    print("BUG: with the cuDNN backend a masked key whose score exceeds the live one by more than 65504 keeps its weight")
    sys.exit(1)
print("FIXED: the masked key stays masked under the cuDNN backend")
sys.exit(0)
