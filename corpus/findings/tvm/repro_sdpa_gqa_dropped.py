"""TVM Relax PyTorch frontend: F.scaled_dot_product_attention(..., enable_gqa=True) with fewer
key/value heads than query heads, imported with from_exported_program(
run_ep_decomposition=False), is silently wrong: the importer drops enable_gqa and emits
R.nn.attention with K/V of Hkv heads; the struct-info check does not compare head counts,
and the TOPI legalization (_te_attention) reshapes K and V to [B*Hq, S, D] as if they had
Hq heads, reading past the end of their buffers for Hkv < Hq.

Run: python repro_sdpa_gqa_dropped.py   (torch, apache-tvm 0.27, numpy)

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
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


torch.manual_seed(0)
q = torch.randn(2, 4, 7, 16)        # Hq = 4
k = torch.randn(2, 2, 7, 16)        # Hkv = 2
v = torch.randn(2, 2, 7, 16)
mod = from_exported_program(torch.export.export(M(), (q, k, v)), run_ep_decomposition=False)
vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
out = vm["main"](*(tvm.runtime.tensor(x.numpy()) for x in (q, k, v)))[0].numpy()
want = M()(q, k, v).numpy()
print("max |tvm - torch| =", np.abs(out - want).max())
if not np.allclose(out, want, atol=1e-5):
    print("BUG: GQA output wrong")
    sys.exit(1)
print("FIXED: the GQA output matches torch")
sys.exit(0)
