"""ONNX Runtime's CPU Attention op (opset 23) refuses an attn_mask whose query (or key)
dimension is broadcast, e.g. [1, 1, 1, S_k] for a [B, H, S_q, S_k] problem: "inconsistent
q_sequence_length (between attn_mask and Q)". The ONNX spec asks only that attn_mask be
broadcastable to (batch, q_num_heads, q_sequence_length, total_sequence_length), and the
onnx reference implementation (onnx.reference) runs these shapes.
Found by attnfuzz (target:ort/attention, masks with a broadcast query dim); onnxruntime 1.32.0.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 2 when this ORT runs no opset-23 Attention at all.
"""
import sys
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator


def model(mask_shape):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 3, 4]) for n in "QKV"]
    ins.append(helper.make_tensor_value_info("M", TensorProto.FLOAT, mask_shape))
    node = helper.make_node("Attention", ["Q", "K", "V", "M"], ["Y"])
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    return m


bug = False
rng = np.random.default_rng(0)
feeds = {c: rng.standard_normal((1, 2, 3, 4)).astype(np.float32) for c in "QKV"}
for shape in ([1, 1, 3, 3], [1, 1, 1, 3], [1, 3], [1, 1, 3, 1]):
    m = model(shape)
    f = dict(feeds, M=rng.standard_normal(shape).astype(np.float32))
    ref = ReferenceEvaluator(m).run(None, f)[0]
    try:
        out = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
        print(shape, "ok, max |ort - onnx.reference| =", float(np.abs(out - ref).max()))
    except Exception as e:  # noqa: BLE001
        print(shape, "refused:", str(e).split("was false.")[-1].strip()[:90])
        if shape == [1, 1, 3, 3]:  # a full [Sq, Sk] mask: an ORT without opset-23 Attention
            print("CANNOT TEST: this ORT does not run Attention (opset 23) at all")
            sys.exit(2)
        bug = True

if bug:
    print("BUG: ORT refuses an attn_mask that broadcasts over the query or key dim")
    sys.exit(1)
print("FIXED: ORT takes every broadcastable attn_mask")
sys.exit(0)
