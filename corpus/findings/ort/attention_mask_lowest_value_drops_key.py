"""ONNX Runtime CPU Attention (opset 24): a *finite* additive attn_mask value equal to the
dtype's lowest (float16 -65504, float32 -3.4028235e38) is treated as "masked": a row whose
keys all carry that value comes out as 0, although the spec adds the mask to the scores
(one key with score -1.41 - 65504 still has softmax weight 1). onnx.reference returns V.

The fully-masked-row guard (onnxruntime PR #28958) behaves as if it compared mask entries
with ORT's mask_filter_value sentinel (lowest()): a user mask that happens to use finfo.min
-- the Hugging Face convention -- is taken for ORT's own sentinel. (Inferred from the
behaviour; the PR's text does not describe the comparison.)

Exits 1 while ORT returns 0, 0 when fixed. Needs onnx, onnxruntime, numpy. Found by
attnfuzz (target:ort/attention; bundle corpus/findings/ort/bundles/diverge-4e91112d4929395a).
"""
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

bad = False
for np_dt, onnx_dt in ((np.float16, TensorProto.FLOAT16), (np.float32, TensorProto.FLOAT)):
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, onnx_dt, None) for n in "qkvm"],
                              [helper.make_tensor_value_info("y", onnx_dt, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)], ir_version=10)  # IR 10: older ORT loads it
    feeds = {"q": np.array(2.75, np_dt).reshape(1, 1, 1, 1), "k": np.array(-0.5127, np_dt).reshape(1, 1, 1, 1),
             "v": np.array(-1.9316, np_dt).reshape(1, 1, 1, 1),
             "m": np.array(np.finfo(np_dt).min, np_dt).reshape(1, 1, 1, 1)}   # a finite mask value
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    spec = ReferenceEvaluator(model).run(None, feeds)[0]
    want = feeds["v"]                      # one key: its weight is 1 whatever finite value is added
    print(f"onnxruntime {ort.__version__} {np.dtype(np_dt).name} mask {feeds['m'].item()}: got {got.ravel()}, "
          f"want {want.ravel()} (onnx.reference {spec.ravel()})")
    bad |= not np.allclose(got.astype(np.float32), want.astype(np.float32))
if bad:
    print("BUG: a key with a finite (lowest) additive mask value was dropped")
    sys.exit(1)
print("fixed")
