"""PyTorch's fused SDPA backward (flash, memory-efficient) recomputes the attention weights
as P = exp(s * scale - LSE) from the forward's log-sum-exp, in float32. At large logits the
roundings of s * scale and of the stored LSE differ by several units of the exponent, so P
comes out off by exp(delta): with one query and one key P is 1 and dV must equal dO, but the
recomputed weight drifts from 1 as the logit grows. The math kernel keeps P and stays exact.
A precision property of the log-sum-exp recompute (FlashAttention-2's backward), classified
as precision in docs/findings.md, not a bug of one kernel.

Found by attnfuzz (target:torch/cuda_sdpa_flash, cuda_sdpa_efficient, cuda_sdpa_cudnn:
backward cases with Q and K of magnitude 10^3-10^4, of the stock H100 campaigns of
2026-11-28; dV exactly 16x dO in diverge-cb997e1f13fdfab0). The same loop ran as a probe on an
H200 (torch 2.11.0+cu130): flash f16 D128 dV/dO 1.022 at a logit of 2e5; memory-efficient f32 D8 1.001
at 1.5e4 and 0.368 (e^-1) at -1.2e7; math 1 throughout.

Exit status: 1 with a BUG line while a fused kernel's dV/dO leaves [0.99, 1.01] (the
precision loss this documents), 0 with a FIXED line otherwise, 77 with a SKIP line where it
cannot run (no CUDA GPU).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)
torch.manual_seed(0)
drift = False
for be, dt, D in ((SDPBackend.FLASH_ATTENTION, torch.float16, 128), (SDPBackend.EFFICIENT_ATTENTION, torch.float32, 8),
                  (SDPBackend.MATH, torch.float16, 128)):
    for mag in (1.0, 1e2, 1e3, 3e3, 1e4):
        q = (torch.randn(1, 1, 1, D) * mag).to(dt).cuda()
        k = (torch.randn(1, 1, 1, D) * mag).to(dt).cuda()
        v = torch.randn(1, 1, 1, D).to(dt).cuda().requires_grad_()
        do = torch.randn(1, 1, 1, D).to(dt).cuda()
        with sdpa_kernel([be]):
            o = F.scaled_dot_product_attention(q, k, v)
        o.backward(do)
        logit = float((q.double() @ k.double().transpose(-1, -2)).item() / D ** 0.5)
        ratio = (v.grad.double() / do.double()).flatten()
        off = not (0.99 <= float(ratio.min()) and float(ratio.max()) <= 1.01)
        drift |= off and be != SDPBackend.MATH
        print("%s %s D%d: logit %.3g, dV/dO %.4g .. %.4g%s" % (be.name, dt, D, logit, ratio.min(), ratio.max(),
                                                              "  <- off" if off else ""))
print("torch", torch.__version__)
if drift:
    print("BUG: the fused backward's recomputed weights are off at large logits (precision)")
    sys.exit(1)
print("FIXED: the fused backward's weights stay within 1% at these logits")
sys.exit(0)
