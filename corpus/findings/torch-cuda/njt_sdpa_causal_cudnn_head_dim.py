"""PyTorch's SDPA on nested jagged tensors (CUDA, f16/bf16) raises `cuDNN Frontend error:
hidden_dim should be multiple of 8` for `is_causal=True` when the head dim is not a multiple
of 8 (1 and 4 here): the dispatcher sends the causal call to the cuDNN kernel without the
head-dim check it makes for dense inputs, and raises where it should fall back or decline
cleanly. The same call without `is_causal`, or with head dim 8, runs. Found by attnfuzz
(target:torch/cuda_sdpa_jagged, minimized to one sequence of one token, one head, head dim 1).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU).
"""
import sys

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)

torch.manual_seed(0)
offsets = torch.tensor([0, 1, 3], device="cuda")   # two sequences: 1 and 2 tokens
bad = 0
for dtype in (torch.float16, torch.bfloat16):
    for d in (1, 4, 8):
        for causal in (False, True):
            x = torch.nested.nested_tensor_from_jagged(torch.randn(3, 1, d, device="cuda", dtype=dtype),
                                                       offsets).transpose(1, 2)   # [B, H, j, D]
            try:
                F.scaled_dot_product_attention(x, x, x, is_causal=causal)
                torch.cuda.synchronize()
                print(f"{dtype} head_dim {d} is_causal {causal}: ok")
            except RuntimeError as e:
                bad += 1
                print(f"{dtype} head_dim {d} is_causal {causal}: {str(e).splitlines()[0][:120]}")
print(f"torch {torch.__version__}: {bad} calls raised")
if bad:
    print(f"BUG: {bad} nested-tensor SDPA calls raise a cuDNN error instead of running or declining")
    sys.exit(1)
print("FIXED: causal SDPA on nested tensors runs for head dims that are not multiples of 8")
sys.exit(0)
