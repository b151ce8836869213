"""TVM Relax: R.nn.attention on float16, legalized for llvm, loses far more precision than an
f16 attention with float32 accumulation: the TOPI legalization (_te_attention) runs
batch_matmul, the scaling, the softmax (max, exp, sum) and P @ V all in float16. Against a
float64 reference the output is 30 to 100 times further off than the same f16 inputs
through an f32-accumulating implementation (numpy here; torch's decomposition through
TVM's frontend and OpenVINO measure the same as numpy's f32 path).

Run: python repro_attention_f16_accumulation.py   (apache-tvm 0.27, numpy)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import sys
import numpy as np
import tvm
from tvm import relax

B, S, SK, H, D = 1, 64, 512, 2, 64


def attention_f16(q, k, v):
    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(a.shape, "float16")) for n, a in zip("qkv", (q, k, v))]
    with bb.function("main", params):
        with bb.dataflow():
            o = bb.emit_output(bb.emit(relax.op.nn.attention(*params)))   # BSHD, default scale
        bb.emit_func_output(o)
    vm = relax.VirtualMachine(relax.build(bb.get(), target="llvm"), tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(x) for x in (q, k, v))).numpy()


def attention_np(q, k, v, dtype):
    q, k, v = (x.astype(dtype).transpose(0, 2, 1, 3) for x in (q, k, v))   # BSHD -> BHSD
    s = (q @ k.swapaxes(-1, -2)) / np.sqrt(q.shape[-1]).astype(dtype)
    p = np.exp(s - s.max(-1, keepdims=True))
    return ((p / p.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3)


r = np.random.default_rng(0)
q = (r.standard_normal((B, S, H, D)) * 30).astype(np.float16)   # scores of a few tens
k = r.standard_normal((B, SK, H, D)).astype(np.float16)
v = r.standard_normal((B, SK, H, D)).astype(np.float16)
ref = attention_np(q, k, v, np.float64)
tvm_err = np.abs(attention_f16(q, k, v).astype(np.float64) - ref).max()
f32_err = np.abs(attention_np(q, k, v, np.float32).astype(np.float16).astype(np.float64) - ref).max()
print("max |tvm f16 - float64|                  = %.3g" % tvm_err)
print("max |f32-accumulated, rounded to f16 - float64| = %.3g" % f32_err)
if tvm_err > 10 * f32_err:
    print("BUG: f16 accumulation (more than 10x the f32-accumulated error)")
    sys.exit(1)
print("FIXED: the f16 attention is as accurate as an f32-accumulated one")
sys.exit(0)
