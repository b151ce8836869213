"""OpenVINO CPU (f32): a softmax weight below f32's smallest normal (2^-126) comes out 0,
so a live key of such a weight whose value is -inf gives 0 * -inf = NaN where the weight
computed in IEEE f32 (a subnormal, e^-100 = 3.7e-44) gives -inf.

The plugin's vectorized exp (oneDNN's jit eltwise injector and the plugin's own exp_ps_*:
"logf(FLT_MIN) - min normal value ... get mask of values lower than log(FLT_MIN) to zero
them in the output") returns 0 below ln(FLT_MIN) = -87.3. It is not the FTZ/DAZ mode
(CPU_DENORMALS_OPTIMIZATION, off by default and here): a subnormal V passes through
unchanged. A precision choice of the kernel, not of the model: a finite V never sees it
(the weight is below 1e-38). Every variant shows it: opset13 ScaledDotProductAttention
(Snippets MHA and, with SNIPPETS_MODE=DISABLE, the plain nodes) and the explicit
MatMul/Softmax/MatMul graph.

Found by a stock attnfuzz CPU campaign (18 nan_mismatch bundles over openvino/sdpa,
sdpa_nosnippets and explicit, each a planted -inf or +inf in V at a live key of
subnormal weight; bundle corpus/findings/openvino/bundles/nan_mismatch-92b935cd5b1341c8).

Run: python repro_softmax_subnormal_weight_zero.py   (openvino 2026.4, numpy)

Exit status: 1 with a BUG line while a subnormal weight is 0, 0 with a FIXED line once it
is kept.
"""
import sys

import numpy as np
import openvino as ov
import openvino.opset13 as ops

core = ov.Core()


def sdpa(q, k, v, cfg=None):
    params = [ops.parameter(x.shape, ov.Type.f32) for x in (q, k, v)]
    model = ov.Model([ops.scaled_dot_product_attention(*params, causal=False)], params)
    compiled = core.compile_model(model, "CPU", dict({"INFERENCE_PRECISION_HINT": "f32"}, **(cfg or {})))
    return compiled([q, k, v])[0]


def explicit(q, k, v):
    params = [ops.parameter(x.shape, ov.Type.f32) for x in (q, k, v)]
    s = ops.multiply(ops.matmul(params[0], params[1], False, True), ops.constant(np.float32(0.5)))
    model = ov.Model([ops.matmul(ops.softmax(s, -1), params[2], False, False)], params)
    return core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})([q, k, v])[0]


# one query, two keys, D = 4 (scale 1/2): scores 0 (key 0) and 100 (key 1), so key 0's
# weight is e^-100 = 3.7e-44, an f32 subnormal; V of key 0 is -inf
q = np.array([[[[10.0, 0.0, 0.0, 0.0]]]], np.float32)
k = np.array([[[[0.0, 0.0, 0.0, 0.0], [20.0, 0.0, 0.0, 0.0]]]], np.float32)
v = np.array([[[[-np.inf], [1.0]]]], np.float32)
print("openvino", ov.__version__, "denormals optimization:", core.get_property("CPU", "CPU_DENORMALS_OPTIMIZATION"))
w = np.float32(np.exp(np.float32(-100.0)))
print("numpy: e^-100 in f32 = %g (subnormal), times -inf = %g" % (w, w * np.float32(-np.inf)))
got = {"sdpa (Snippets)": sdpa(q, k, v).ravel()[0],
       "sdpa (SNIPPETS_MODE=DISABLE)": sdpa(q, k, v, {"SNIPPETS_MODE": "DISABLE"}).ravel()[0],
       "explicit MatMul/Softmax/MatMul": explicit(q, k, v).ravel()[0]}
for name, x in got.items():
    print("%-32s weight e^-100 on V = -inf: got %g, want -inf" % (name, x))
# the same with e^-80 (a normal f32) is right, and a subnormal V passes through unchanged
q8 = q.copy()
q8[0, 0, 0, 0] = 8.0
print("%-32s weight e^-80 on V = -inf: got %g" % ("sdpa", sdpa(q8, k, v).ravel()[0]))
print("%-32s subnormal V of 1e-39: got %g" % ("sdpa", sdpa(q, k, np.full((1, 1, 2, 1), 1e-39, np.float32)).ravel()[0]))
if any(np.isnan(x) for x in got.values()):
    print("BUG: a subnormal softmax weight is 0 (0 * -inf = NaN)")
    sys.exit(1)
print("FIXED: subnormal softmax weights are kept")
sys.exit(0)
