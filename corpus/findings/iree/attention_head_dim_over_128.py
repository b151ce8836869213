"""IREE 3.13 (llvm-cpu): iree_linalg_ext.attention is wrong for a head dim of Q and K above
128 (129, 130, 136, 256, 257 ...; 64, 65, 127 and 128 are right): in f32, without a mask,
one query and two keys, the output is off by up to the whole range of V. The threshold is
the one of iree-org/iree PR #23304 (reapplied as #23544), from which the CPU pipeline tiles
the K1 dimension (the head dim, the reduction of Q K^T) when it is above 128; a softmax over
a tile of K1 would see partial dot products, which fits what comes out (not confirmed in
IREE's source).

Found by attnfuzz (target:iree/attention_op; the main job on an AVX2 host stored 21
signatures of one f16 structure with head dim 174, minimized to
corpus/findings/iree/bundles/diverge-b766496cfec4fde3: f32, 1 query, 2 keys, D 129, Dv 1).
Only iree.compiler, iree.runtime and numpy.

Exit 1 and a BUG line while the bug is present, 0 and FIXED once fixed, 77 where IREE does
not import.
"""
import sys

import numpy as np

try:
    import iree.compiler as ic
    import iree.runtime as rt
except ImportError:
    print("SKIP: iree.compiler / iree.runtime do not import")
    sys.exit(77)

SK = 2


def attention(d):
    mlir = """
func.func @main(%q: tensor<1x1x{d}xf32>, %k: tensor<1x{sk}x{d}xf32>, %v: tensor<1x{sk}x{d}xf32>)
    -> tensor<1x1x{d}xf32> {{
  %scale = arith.constant {scale:.9e} : f32
  %empty = tensor.empty() : tensor<1x1x{d}xf32>
  %out = iree_linalg_ext.attention <indexing_maps = [
      affine_map<(b, m, n, k1, k2) -> (b, m, k1)>, affine_map<(b, m, n, k1, k2) -> (b, k2, k1)>,
      affine_map<(b, m, n, k1, k2) -> (b, k2, n)>, affine_map<(b, m, n, k1, k2) -> ()>,
      affine_map<(b, m, n, k1, k2) -> (b, m, n)>]>
      ins(%q, %k, %v, %scale : tensor<1x1x{d}xf32>, tensor<1x{sk}x{d}xf32>, tensor<1x{sk}x{d}xf32>, f32)
      outs(%empty : tensor<1x1x{d}xf32>) {{
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
  }} -> tensor<1x1x{d}xf32>
  return %out : tensor<1x1x{d}xf32>
}}
""".format(d=d, sk=SK, scale=1.0 / np.sqrt(d))
    vmfb = ic.compile_str(mlir, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"])
    ctx = rt.SystemContext(config=rt.Config("local-task"))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    return ctx.modules.module["main"]


rs = np.random.RandomState(0)
bad = []
for d in (64, 128, 129, 256):
    q = rs.randn(1, 1, d).astype(np.float32)
    k = rs.randn(1, SK, d).astype(np.float32)
    v = rs.randn(1, SK, d).astype(np.float32)
    s = (q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1)) / np.sqrt(d)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    got = np.array(attention(d)(q, k, v).to_host())
    err = float(np.abs(got - want).max())
    ok = err < 1e-5
    print("head dim %3d: max |err| %.3g%s" % (d, err, "" if ok else "  <- wrong"))
    if not ok:
        bad.append(d)

if bad:
    print("BUG: iree_linalg_ext.attention on llvm-cpu is wrong for head dims %s (above 128)" % bad)
    sys.exit(1)
print("FIXED: every head dim gives the softmax of the whole dot products")
sys.exit(0)
