"""IREE (iree-base-compiler 3.13.0), CUDA target (sm_80): iree_linalg_ext.attention on small
shapes does not compile, where llvm-cpu compiles the same modules. One query over a key
length that is not a multiple of 4 (3, 5, 129) fails with "'func.func' op failed to
distribute" (4, 16, 64 keys compile); a GQA group of 3 query heads with 2 queries over one
key makes iree-compile die with a segmentation fault (exit -11, "Please report issues ...
Stack dump"; a group of 2 compiles). The head dim does not matter (1, 4, 16).

Found by attnfuzz's H200 campaign of target:iree/cuda of 2026-12-02 (11 error bundles: 5
crashes and 6 failures to distribute; minimized to
corpus/findings/iree-cuda/bundles/error-4edce0f374634652, Q [1,1,1,1] over K [1,1,3,1], and
error-b8d98beae03057c7, Q [1,3,2,1] over K [1,1,1,1]). Compiling needs no GPU: this script
runs on any x86-64 host with iree-base-compiler. The ROCm side of the family is open
upstream: iree-org/iree#24221 (SDPA fails to distribute on gfx942) and #24319 (SDPA with
head_dim=1: no tile size); no CUDA report found.

Exit 1 with a BUG line while a failing module still fails for CUDA, 0 with FIXED once all
compile, 77 where iree.compiler does not import.
"""
import sys

try:
    import iree.compiler as ic
except ImportError:
    print("SKIP: iree-base-compiler is not installed (import iree.compiler)")
    sys.exit(77)


def attention(b, hkv, g, sq, sk, d):
    """@main(q, k, v) -> out: iree_linalg_ext.attention on [B, Hkv, G, S, D], f32, scale 1."""
    def t(*shape):
        return "tensor<%sxf32>" % "x".join(str(n) for n in shape)
    qt, kt, vt, ot = t(b, hkv, g, sq, d), t(b, hkv, sk, d), t(b, hkv, sk, d), t(b, hkv, g, sq, d)
    a = "affine_map<(b, h, g, m, n, k1, k2) -> %s>"
    maps = ", ".join(a % m for m in ("(b, h, g, m, k1)", "(b, h, k2, k1)", "(b, h, k2, n)", "()", "(b, h, g, m, n)"))
    return """func.func @main(%%q: %s, %%k: %s, %%v: %s) -> %s {
  %%scale = arith.constant 1.0 : f32
  %%empty = tensor.empty() : %s
  %%out = iree_linalg_ext.attention <indexing_maps = [%s]>
      ins(%%q, %%k, %%v, %%scale : %s, %s, %s, f32) outs(%%empty : %s) {
    ^bb0(%%score: f32):
      iree_linalg_ext.yield %%score : f32
  } -> %s
  return %%out : %s
}
""" % (qt, kt, vt, ot, ot, maps, qt, kt, vt, ot, ot, ot)


def compiles(source, target):
    extra = ["--iree-cuda-target=sm_80"] if target == "cuda" else ["--iree-llvmcpu-target-cpu=generic"]
    try:
        ic.compile_str(source, target_backends=[target], extra_args=extra)
        return "compiles"
    except ic.CompilerToolError as e:  # the tool's exit status and first diagnostic
        text = str(e)
        code = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("Error code")), "?")
        diag = next((l.strip() for l in text.splitlines() if "error:" in l), "")
        return "FAILS (exit %s%s)" % (code, ", " + diag[:90] if diag else ", a crash" if code.startswith("-") else "")


cases = [("one query over 3 keys", (1, 1, 1, 1, 3, 16), False),
         ("one query over 129 keys, D 4", (1, 1, 1, 1, 129, 4), False),
         ("one query over 4 keys (compiles)", (1, 1, 1, 1, 4, 16), True),
         ("GQA group 3, 2 queries, 1 key", (1, 1, 3, 2, 1, 16), False),
         ("GQA group 2, 2 queries, 1 key (compiles)", (1, 1, 2, 2, 1, 16), True)]
bad = []
for name, shape, control in cases:
    src = attention(*shape)
    cuda, cpu = compiles(src, "cuda"), compiles(src, "llvm-cpu")
    print("%-42s cuda: %s; llvm-cpu: %s" % (name, cuda, cpu))
    if cuda != "compiles" and not control:
        bad.append(name)
if bad:
    print("BUG: iree_linalg_ext.attention does not compile for CUDA sm_80: %s" % "; ".join(bad))
    sys.exit(1)
print("FIXED: every shape compiles for CUDA")
sys.exit(0)
