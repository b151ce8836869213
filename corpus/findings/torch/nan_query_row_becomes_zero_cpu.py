"""PyTorch on CPU: a NaN in one query row comes out as a row of zeros from the CPU flash
SDPA kernel (the default kernel for these inputs) and from torch.compile(flex_attention),
while the math kernel and eager flex_attention give NaN. The online-softmax kernels take a
NaN row for a fully masked one (its running max never rises above -inf) and zero it: a
silent NaN -> 0 that hides a poisoned input, and a disagreement between kernels that are
meant to be interchangeable.

Exits 1 while the kernels disagree (any of them 0 where the math kernel is NaN), 0 when
they agree. Needs torch. Found by attnfuzz (target:torch/flex, hunt campaign; bundle
corpus/findings/torch/bundles/nan_mismatch-7dd2785966e6655a).
"""
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import flex_attention

warnings.filterwarnings("ignore")
torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 4, 8) for _ in range(3))
q[0, 0, 2, 3] = float("nan")                     # one NaN in query row 2

with sdpa_kernel(SDPBackend.MATH):
    math = F.scaled_dot_product_attention(q, k, v)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    flash = F.scaled_dot_product_attention(q, k, v)
flex_eager = flex_attention(q, k, v)
flex_compiled = torch.compile(flex_attention, fullgraph=True, dynamic=False)(q, k, v)
bad = False
print(f"torch {torch.__version__}, query row 2 (contains a NaN):")
for name, out in (("sdpa math", math), ("sdpa flash (CPU)", flash), ("flex_attention eager", flex_eager),
                  ("flex_attention compiled", flex_compiled)):
    row = out[0, 0, 2]
    print(f"  {name:24s} {row[:4].tolist()}")
    bad |= bool(torch.isnan(math[0, 0, 2]).all()) and not bool(torch.isnan(row).all())
if bad:
    print("BUG: a NaN query row became zeros in a kernel where the math kernel gives NaN")
    sys.exit(1)
print("fixed")
