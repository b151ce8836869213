"""ONNX Runtime CPU Attention (opset 24), is_causal=1, a boolean attn_mask or nonpad_kv_seqlen: when every key
a query may see has a score of -inf, the output is the value of a *masked* key instead of 0.

One query, two keys, D = 1, top-left causal: the query sees key 0 only. q = 0.127 and
k0 = -inf give that key a score of -inf, so the row has no finite score. onnx.reference
(the spec's reference implementation) returns 0 for such a row; ORT returns v[1] exactly,
the value of the key the causal mask hides -- which suggests the masked score is a finite
"lowest" fill (mask_filter_value) instead of -inf, so it wins the softmax against -inf.
A boolean attn_mask [True, False] and nonpad_kv_seqlen = [1] (key padding) do the same;
onnx.reference gives 0 for the first two.

The same fill shows on finite float16 scores: ORT folds the mask into the Q K^T GEMM (the
causal and boolean masks become mask_filter_value, f16's lowest -65504, preloaded into C,
then alpha * Q K^T + C in f32, rounded to f16), so a masked key's score s_m becomes
s_m - 65504 and beats a live score below that. One query, two keys, D = 2, top-left causal:
the live key's score is -45420, the masked key's 21265, which the fill leaves at -44239:
ORT returns the masked key's value; onnx.reference (f16 scores, the mask added as -inf)
returns the live key's. Found by a stock attnfuzz CPU campaign (bundle
corpus/findings/ort/bundles/diverge-6557ed4e5096a80f).

Exits 1 while ORT returns a masked key's value in either form, 0 when fixed. Needs onnx,
onnxruntime, numpy. Found by attnfuzz (target:ort/attention, hunt campaign; bundle
corpus/findings/ort/bundles/diverge-620496f218a1a307).
"""
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

def session(inputs, mask_type=None, dtype=TensorProto.FLOAT, **attrs):
    node = helper.make_node("Attention", inputs, ["y"], **attrs)
    ins = [helper.make_tensor_value_info(n, dtype, None) for n in "qkv"]
    if mask_type is not None:
        ins.append(helper.make_tensor_value_info("m", mask_type, None))
    if "nonpad" in inputs:
        ins.append(helper.make_tensor_value_info("nonpad", TensorProto.INT64, [1]))
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)], ir_version=10)  # IR 10: older ORT loads it
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


q = np.array([0.127157], np.float32).reshape(1, 1, 1, 1)        # [B, H, Sq, D]
k = np.array([-np.inf, 0.79247], np.float32).reshape(1, 1, 2, 1)
v = np.array([0.447551, 0.012724], np.float32).reshape(1, 1, 2, 1)
feeds = {"q": q, "k": k, "v": v}
# Key 1 is masked (causal: j > i; the boolean mask says False; padding: j >= 1); key 0's score is
# 0.127 * -inf = -inf: no key has a finite score, every weight is 0 and the output is 0
# (onnx.reference agrees); it must never be v[1], the masked key's value.
runs = {"is_causal=1": session(["q", "k", "v"], is_causal=1).run(None, feeds)[0].ravel(),
        "bool attn_mask [T, F]": session(["q", "k", "v", "m"], TensorProto.BOOL).run(
            None, dict(feeds, m=np.array([True, False]).reshape(1, 1, 1, 2)))[0].ravel(),
        "nonpad_kv_seqlen=[1]": session(["q", "k", "v", "", "", "", "nonpad"]).run(
            None, dict(feeds, nonpad=np.array([1], np.int64)))[0].ravel()}
want = np.zeros(1, np.float32)
bad = False
for name, got in runs.items():
    print(f"onnxruntime {ort.__version__} {name}: got {got}, want {want} (the masked key's value is {v.ravel()[1]})")
    bad |= not np.array_equal(got, want)

# float16, finite scores: q . k0 / sqrt(2) = -45420 (live), q . k1 / sqrt(2) = 21265 (masked)
q16 = np.array([-6292.0, -414.0], np.float16).reshape(1, 1, 1, 2)
k16 = np.array([[9.6171875, 8.9921875], [-5.8828125, 16.765625]], np.float16).reshape(1, 1, 2, 2)
v16 = np.array([-0.17431640625, 1.24609375], np.float16).reshape(1, 1, 2, 1)
got = session(["q", "k", "v"], dtype=TensorProto.FLOAT16, is_causal=1).run(
    None, {"q": q16, "k": k16, "v": v16})[0].ravel()
want16 = v16.ravel()[:1]        # the live key's value: its weight is 1
print(f"onnxruntime {ort.__version__} float16 is_causal=1, live score -45420, masked 21265: got {got}, "
      f"want {want16} (the masked key's value is {v16.ravel()[1]})")
bad |= not np.allclose(got.astype(np.float32), want16.astype(np.float32), atol=1e-3)
if bad:
    print("BUG: a masked key was attended")
    sys.exit(1)
print("FIXED: no masked key is attended")
