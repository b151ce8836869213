"""torch.onnx.export(dynamo=False) of F.scaled_dot_product_attention with a boolean
attn_mask writes Softmax -> Where(IsNaN(p), 0, p) (the guard that makes a fully masked row
0, as aten does). The guard cannot tell a fully masked row from a NaN that comes from a
live input: a NaN in Q (or a +inf/-inf score pair, or a NaN in a *masked* key's K that
the additive Where(m, 0, -inf) mask turns into a NaN score) makes the exported model return
0 where eager PyTorch returns NaN. (For the masked key the answer attnfuzz's reference
wants is the live key's value, -0.9383: eager's NaN is the pytorch#101967 class, the
exporter's 0 is wrong either way.)

Exits 1 while the exported model (run by onnxruntime) disagrees with eager PyTorch, 0 when
they agree. Needs torch, onnx, onnxruntime, numpy. Found by attnfuzz
(target:ort/exported_sdpa; bundles corpus/findings/torch/bundles/nan_mismatch-c6d19ad806388c56,
diverge-fc4de400e5876326).
"""
import io
import sys
import warnings

import numpy as np
import onnxruntime as ort
import torch

warnings.filterwarnings("ignore")


class SDPA(torch.nn.Module):
    def forward(self, q, k, v, m):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32).reshape(1, 1, -1, 1)      # [B, H, S, D=1]


cases = {
    "NaN in the (live) query": (t(float("nan")), t(-1.128), t(-1.3566), torch.ones(1, 1, 1, 1, dtype=torch.bool)),
    "NaN in a masked key's K": (t(-0.7516), t(-0.6436, float("nan")), t(-0.9383, -1.7761),
                                torch.tensor([True, False]).reshape(1, 1, 1, 2)),
}
bad = False
for name, (q, k, v, m) in cases.items():
    f = io.BytesIO()
    torch.onnx.export(SDPA(), (q, k, v, m), f, dynamo=False, input_names=["q", "k", "v", "m"], opset_version=18)
    sess = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    eager = SDPA()(q, k, v, m).numpy().ravel()
    got = sess.run(None, {"q": q.numpy(), "k": k.numpy(), "v": v.numpy(), "m": m.numpy()})[0].ravel()
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}: {name}: eager {eager}, exported {got}")
    bad |= not np.allclose(eager, got, equal_nan=True)
if bad:
    print("BUG: the exported model's IsNaN guard turns these rows into 0")
    sys.exit(1)
print("fixed")
