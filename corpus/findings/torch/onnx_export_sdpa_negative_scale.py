"""torch.onnx.export (dynamo=False, the TorchScript exporter) writes
F.scaled_dot_product_attention as Mul(Q, Sqrt(scale)) and Mul(K^T, Sqrt(scale)): with a
negative `scale` (legal in PyTorch: q @ k^T * scale) the exported model computes sqrt of a
negative number and returns NaN everywhere, while eager PyTorch returns finite values.
Found by attnfuzz (target:ort/exported_sdpa with a negative case scale; the graph mirrors
torch/onnx/_internal/torchscript_exporter/symbolic_opset14.py). torch 2.15.0, onnxruntime 1.32.0.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import sys
import io
import warnings

import numpy as np
import onnxruntime as ort
import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")


class Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=-0.25)


rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, 4, 8)).astype(np.float32)) for _ in range(3))
f = io.BytesIO()
torch.onnx.export(Attention(), (q, k, v), f, dynamo=False, opset_version=17)
sess = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
out = sess.run(None, {i.name: t.numpy() for i, t in zip(sess.get_inputs(), (q, k, v))})[0]
eager = Attention()(q, k, v).numpy()
print("eager finite:", bool(np.isfinite(eager).all()), " exported all NaN:", bool(np.isnan(out).all()))
if np.isnan(out).all() and np.isfinite(eager).all():
    print("BUG: the exported graph takes Sqrt of a negative scale")
    sys.exit(1)
err = float(np.abs(out - eager).max())
print("max |exported - eager| =", err)
if not err < 1e-4:
    print("BUG: the exported graph differs from eager for a negative scale")
    sys.exit(1)
print("FIXED: the exported graph matches eager for a negative scale")
sys.exit(0)
