"""IREE 3.13 (llvm-cpu): iree_linalg_ext.attention with a float mask whose every live value in
a row is f32's lowest (-3.4028235e38) gives NaN for that row; the mask values are finite, so
the softmax is defined (the scores plus the mask in f32 are finite; their softmax in float64
is the reference). A fill of -1e38 is right; -2.4e38 and below give NaN: the
decomposition folds log2(e) into the scores for exp2 (as FlashAttention kernels do), the
shifted scores overflow to -inf, and the row's max is -inf, so exp2(-inf - -inf) is NaN.

Found by attnfuzz (target:iree/attention_op, bundle nan_mismatch-44b85da720bc0e21: an
additive mask of lowest over full rows, with a window and key padding). The same class as
PyTorch's memory-efficient CUDA kernel, which gives 0 there. Only iree.compiler, iree.runtime
and numpy.

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

B, SQ, SK, D = 1, 1, 4, 8
MLIR = """
func.func @main(%q: tensor<1x1x8xf32>, %k: tensor<1x4x8xf32>, %v: tensor<1x4x8xf32>, %mask: tensor<1x1x4xf32>)
    -> tensor<1x1x8xf32> {
  %scale = arith.constant 0.35355339 : f32
  %empty = tensor.empty() : tensor<1x1x8xf32>
  %out = iree_linalg_ext.attention <indexing_maps = [
      affine_map<(b, m, n, k1, k2) -> (b, m, k1)>, affine_map<(b, m, n, k1, k2) -> (b, k2, k1)>,
      affine_map<(b, m, n, k1, k2) -> (b, k2, n)>, affine_map<(b, m, n, k1, k2) -> ()>,
      affine_map<(b, m, n, k1, k2) -> (b, m, k2)>, affine_map<(b, m, n, k1, k2) -> (b, m, n)>]>
      ins(%q, %k, %v, %scale, %mask : tensor<1x1x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>, f32, tensor<1x1x4xf32>)
      outs(%empty : tensor<1x1x8xf32>) {
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
  } -> tensor<1x1x8xf32>
  return %out : tensor<1x1x8xf32>
}
"""
vmfb = ic.compile_str(MLIR, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"])
ctx = rt.SystemContext(config=rt.Config("local-task"))
ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
fn = ctx.modules.module["main"]

rs = np.random.RandomState(0)
q = rs.randn(B, SQ, D).astype(np.float32)
k = rs.randn(B, SK, D).astype(np.float32)
v = rs.randn(B, SK, D).astype(np.float32)
s = (q @ k.transpose(0, 2, 1)) * np.float32(0.35355339)

bad = []
for fill in (-1e38, -2.4e38, float(np.finfo(np.float32).min)):
    mask = np.full((B, SQ, SK), fill, np.float32)
    # the scores plus the mask, rounded to f32 as the op adds them (at -1e38 the scores'
    # differences are below f32's spacing, every weight equal), then the softmax in float64
    sm = (s + mask).astype(np.float64)
    p = np.exp(sm - sm.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    got = np.array(fn(q, k, v, mask).to_host())
    err = float(np.abs(got - want).max())
    ok = np.isfinite(got).all() and err < 1e-5
    print("mask fill %.4g: max |err| %s%s" % (fill, err, "" if ok else "  <- wrong"))
    if not ok:
        bad.append(fill)

if bad:
    print("BUG: iree_linalg_ext.attention gives NaN rows for a finite mask of %s" % bad)
    sys.exit(1)
print("FIXED: a mask of f32's lowest shifts the row's scores")
sys.exit(0)
