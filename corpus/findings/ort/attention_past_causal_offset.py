"""ONNX Runtime's CPU Attention op with past_key/past_value and is_causal=1 puts the causal
diagonal at total_kv_len - q_len instead of at the past length when the new key block is
longer than the query block (q_len < new kv_len). The ONNX Attention spec (errata
onnx/onnx#8068; onnx.reference in onnx 1.23) says: query i attends key j iff
j <= i + past_sequence_length. The two agree when new kv_len == q_len (ordinary decoding).
Found by attnfuzz (target:ort/attention, an explicit causal diagonal given as the past
length); onnxruntime 1.32.0. Related: onnxruntime#29020 / #29050 (the no-past case, fixed).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import sys
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

SQ, PAST, NEW = 1, 2, 6          # 1 query, 2 cached keys, 6 new keys: total 8
ins = [helper.make_tensor_value_info("Q", TensorProto.FLOAT, [1, 1, SQ, 4]),
       helper.make_tensor_value_info("K", TensorProto.FLOAT, [1, 1, NEW, 4]),
       helper.make_tensor_value_info("V", TensorProto.FLOAT, [1, 1, NEW, 4]),
       helper.make_tensor_value_info("PK", TensorProto.FLOAT, [1, 1, PAST, 4]),
       helper.make_tensor_value_info("PV", TensorProto.FLOAT, [1, 1, PAST, 4])]
node = helper.make_node("Attention", ["Q", "K", "V", "", "PK", "PV"], ["Y", "PKo", "PVo"], is_causal=1)
g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
m.ir_version = 10

rng = np.random.default_rng(0)
q = rng.standard_normal((SQ, 4)).astype(np.float32)
k = rng.standard_normal((PAST + NEW, 4)).astype(np.float32)
v = rng.standard_normal((PAST + NEW, 4)).astype(np.float32)
feeds = {"Q": q[None, None], "K": k[PAST:][None, None], "V": v[PAST:][None, None],
         "PK": k[:PAST][None, None], "PV": v[:PAST][None, None]}
out = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(["Y"], feeds)[0][0, 0]
spec = ReferenceEvaluator(m).run(["Y"], feeds)[0][0, 0]


def attend(offset):             # float64 attention with the causal diagonal at `offset`
    s = (q.astype(np.float64) @ k.T.astype(np.float64)) / 2.0
    s[np.arange(PAST + NEW)[None, :] > np.arange(SQ)[:, None] + offset] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


print("max |ort - onnx.reference|           =", float(np.abs(out - spec).max()))
print("max |ort - diagonal at past length|  =", float(np.abs(out - attend(PAST)).max()))
print("max |ort - diagonal at total - q_len| =", float(np.abs(out - attend(PAST + NEW - SQ)).max()))

if not np.allclose(out, spec, atol=1e-5):
    print("BUG: with past_key and is_causal=1 ORT puts the diagonal at total_kv - q_len, not at the past length")
    sys.exit(1)
print("FIXED: ORT follows the spec (diagonal at the past length)")
sys.exit(0)
