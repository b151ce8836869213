"""OpenVINO CPU on a CPU with AMX: a bfloat16 MatMul A @ B with at least 17 rows in A and an
inner dimension K that is not a multiple of 32 (48, 100, 784 here) puts NaN into an output
row whose A row has no NaN when the next A row holds NaN. In attention this is P @ V with a
fully masked row (its softmax is NaN): the live row before it comes out NaN too.

oneDNN's AMX brgemm (ONEDNN_VERBOSE: brg_matmul:avx10_1_512_amx) reads the K tail of A past
the row's end and relies on B's zero padding to cancel it, which NaN * 0 does not: the same
bug as uxlfoundation/oneDNN#5717 (closed, fixed by oneDNN PR #5723), which PyTorch shows too
(attnfuzz corpus/findings/torch/cpu_bf16_gemm_nan_row_leak.py); OpenVINO 2026.4.1's oneDNN
fork still has it. With ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (no AMX) the output is right.

Found by attnfuzz (target:openvino/explicit, bf16, Sq 485, Sk 784, a random boolean mask
that masks some rows fully: rows 8, 26, 78, 150, ... NaN where the reference is finite, each
just before a fully masked row; bundle nan_mismatch-77035b3796a48c2f).

Run: python repro_bf16_matmul_amx_nan_row_leak.py   (openvino 2026.4, numpy, ml_dtypes)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line on a CPU without AMX or with oneDNN capped below it
(ONEDNN_MAX_CPU_ISA; the kernel is not used there).
"""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import openvino as ov
import openvino.opset13 as ops

try:
    amx = "amx_bf16" in open("/proc/cpuinfo").read()
except OSError:
    amx = False
if not amx:
    print("SKIP: needs a CPU with AMX (amx_bf16), where oneDNN takes its AMX brgemm")
    sys.exit(77)
# oneDNN capped below AMX (ONEDNN_MAX_CPU_ISA, as on a CPU without it) takes another kernel
cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
if cap != "ALL" and "AMX" not in cap:
    print("SKIP: ONEDNN_MAX_CPU_ISA=%s keeps oneDNN off its AMX brgemm" % cap)
    sys.exit(77)

bf16 = ml_dtypes.bfloat16
core = ov.Core()


def matmul_bf16(a, b):
    pa, pb = ops.parameter(list(a.shape), ov.Type.bf16), ops.parameter(list(b.shape), ov.Type.bf16)
    compiled = core.compile_model(ov.Model([ops.matmul(pa, pb, False, False)], [pa, pb]), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "bf16"})
    req = compiled.create_infer_request()
    req.infer([ov.Tensor(np.ascontiguousarray(x).view(np.uint16), ov.Shape(list(x.shape)), ov.Type.bf16) for x in (a, b)])
    return np.array(req.get_output_tensor(0).data.view(np.uint16).view(bf16)).astype(np.float32)


def leaks(M, K, N=8):
    """Row 1 of P NaN (a fully masked row's softmax), the others finite: is row 0 NaN?"""
    rng = np.random.default_rng(0)
    p = rng.random((M, K)).astype(bf16)
    p[1] = np.nan
    v = rng.standard_normal((K, N)).astype(bf16)
    got = matmul_bf16(p, v)
    want = p[0].astype(np.float64) @ v.astype(np.float64)
    return bool(np.isnan(got[0]).any()), got[0, :4], want[:4]


if sys.argv[1:] == ["--control"]:          # run by the parent with AMX disabled
    print(int(leaks(17, 48)[0]))
    sys.exit(0)

print("openvino", ov.__version__)
bug = False
for M, K in ((17, 48), (485, 784), (17, 64), (16, 48)):
    got, row, want = leaks(M, K)
    print("P %dx%d (row 1 NaN) @ V %dx8, bf16: row 0 NaN: %s   got %s  want %s" % (M, K, K, got, row, np.round(want, 3)))
    bug |= got
env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE_BF16")
ctl = subprocess.run([sys.executable, __file__, "--control"], env=env, capture_output=True, text=True).stdout.strip()
print("P 17x48 with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (no AMX): row 0 NaN: %s" % (ctl == "1"))
if bug:
    print("BUG: a NaN row of A leaks into the row before it in a bf16 CPU MatMul (AMX brgemm)")
    sys.exit(1)
print("FIXED: no NaN row leaks into another on this AMX CPU")
sys.exit(0)
