"""OpenVINO Python API: an ml_dtypes.bfloat16 numpy array given to infer() for a bf16
parameter is silently misread (no error, wrong values); the same bits wrapped as
ov.Tensor(array.view(np.uint16), shape, ov.Type.bf16) give the right answer. The output of
a bf16 model comes back as a float16 numpy array holding bf16 bits.

Run: python repro_bf16_numpy_input.py   (openvino 2026.4, ml_dtypes, numpy)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import sys
import ml_dtypes
import numpy as np
import openvino as ov
import openvino.opset13 as ops

p = ops.parameter([2, 3], ov.Type.bf16)
model = ov.Model([ops.multiply(p, ops.convert(ops.constant(np.float32(2)), "bf16"))], [p])
compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
x = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)

r = compiled.create_infer_request()
direct = r.infer([x])[0]
print("infer([bf16 array]) ->", direct.dtype, np.asarray(direct).view(np.uint16).view(ml_dtypes.bfloat16).ravel())

r.set_input_tensor(0, ov.Tensor(x.view(np.uint16), ov.Shape([2, 3]), ov.Type.bf16))
r.infer()
bits = r.get_output_tensor(0).data.view(np.uint16).view(ml_dtypes.bfloat16)
print("ov.Tensor(bf16 bits)  ->", bits.ravel())
print("expected              ->", (x.astype(np.float32) * 2).ravel())
ok = np.array_equal(np.asarray(direct).view(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32), x.astype(np.float32) * 2)
if not ok:
    print("BUG: the ml_dtypes.bfloat16 input was misread")
    sys.exit(1)
print("FIXED: infer() reads an ml_dtypes.bfloat16 array right")
sys.exit(0)
