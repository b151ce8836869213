"""ONNX Runtime CPU Attention (opset 24), no mask: a query row whose every score is -inf
(here q = -inf, k > 0) comes out NaN; onnx.reference gives 0, as it does for a fully masked
row, and ORT itself gives 0 when the same row is fully masked through attn_mask.

ORT's fully-masked-row guard (added by onnxruntime PR #28958 for the ONNX errata
onnx#8068) looks at the mask only, as this script shows, so -inf scores reach a plain
softmax (exp(-inf - (-inf)) = NaN).

Exits 1 while ORT returns NaN, 0 when fixed. Needs onnx, onnxruntime, numpy. Found by
attnfuzz (target:ort/attention; bundle corpus/findings/ort/bundles/masked_row_nan-eaa22098e7a3765e).
"""
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

node = helper.make_node("Attention", ["q", "k", "v"], ["y"])
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "qkv"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)], ir_version=10)  # IR 10: older ORT loads it
feeds = {"q": np.array(-np.inf, np.float32).reshape(1, 1, 1, 1), "k": np.array(0.0705, np.float32).reshape(1, 1, 1, 1),
         "v": np.array(1.4712, np.float32).reshape(1, 1, 1, 1)}
got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
with np.errstate(all="ignore"):
    spec = ReferenceEvaluator(model).run(None, feeds)[0]
print(f"onnxruntime {ort.__version__}: got {got.ravel()}, onnx.reference {spec.ravel()}, want [0.]")
if np.isnan(got).any():
    print("BUG: a row of -inf scores gives NaN (the spec's reference gives 0)")
    sys.exit(1)
print("fixed")
