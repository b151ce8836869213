"""TVM Relax PyTorch frontend: F.scaled_dot_product_attention(..., scale=s) imported with
from_exported_program(run_ep_decomposition=False) ignores `scale`: the importer
(relax/frontend/torch/base_fx_graph_translator.py, _scaled_dot_product_attention) builds
R.nn.attention without it, so the default 1/sqrt(D) is used. The output is silently wrong.

Run: python repro_sdpa_scale_dropped.py   (torch, apache-tvm 0.27, numpy)

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
        return F.scaled_dot_product_attention(q, k, v, scale=0.3)


torch.manual_seed(0)
q, k, v = (torch.randn(1, 2, 5, 16) for _ in range(3))
mod = from_exported_program(torch.export.export(M(), (q, k, v)), run_ep_decomposition=False)
vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
out = vm["main"](*(tvm.runtime.tensor(x.numpy()) for x in (q, k, v)))[0].numpy()
want = M()(q, k, v).numpy()
default = F.scaled_dot_product_attention(q, k, v).numpy()
print("max |tvm - torch(scale=0.3)|  =", np.abs(out - want).max())
print("max |tvm - torch(default scale)| =", np.abs(out - default).max())
if not np.allclose(out, want, atol=1e-5):
    print("BUG: scale ignored")
    sys.exit(1)
print("FIXED: the scale is honoured")
sys.exit(0)
