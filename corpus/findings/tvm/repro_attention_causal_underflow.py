"""TVM Relax: causal attention imported from PyTorch (is_causal=True -> R.nn.attention with
causal_mask="TopLeft"), built for llvm, gives NaN for every row that has masked keys when
its live scores are all below about -103.

The TOPI legalization of R.nn.attention (relax/transform/legalize_ops/nn.py, _te_attention)
zeroes the masked scores with trilu *before* taking the row max, so the max includes those
zeros: exp(s - max) of live scores below about -103 underflows to 0 in float32, the row
sum is 0 and the output is 0/0 = NaN (and between about -88 and -103 the weights are
subnormal and lose precision). Masked scores should be -inf, or left out of the max.

Here Sq = Sk = 4 and q . k = -200 for every pair: row i attends to keys 0..i with equal
scores, so the exact output is the mean of V's first i+1 rows: [0, 0.5, 1, 1.5].
Run: python repro_attention_causal_underflow.py   (torch, apache-tvm 0.27, numpy)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import sys
import numpy as np
import torch
import torch.nn.functional as F
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program


class M(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


B, H, S, D = 1, 1, 4, 1
q = torch.full((B, H, S, D), 20.0)
k = torch.full((B, H, S, D), -10.0)          # every score q . k / sqrt(D) = -200
v = torch.arange(S, dtype=torch.float32).reshape(B, H, S, D)

mod = from_exported_program(torch.export.export(M(), (q, k, v)), run_ep_decomposition=False)
vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
out = vm["main"](*(tvm.runtime.tensor(x.numpy()) for x in (q, k, v)))[0].numpy()
want = M()(q, k, v).numpy()
print("tvm  ", out.ravel())
print("torch", want.ravel())
if not np.allclose(out, want, equal_nan=False):
    print("BUG: wrong rows")
    sys.exit(1)
print("FIXED: the causal rows match torch")
sys.exit(0)
