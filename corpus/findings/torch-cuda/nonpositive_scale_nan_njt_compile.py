"""A zero or negative SDPA scale gives NaN (f16 and bf16) on the CUDA routes that reach the
flash and cuDNN kernels without F.scaled_dot_product_attention's dense dispatcher choosing
them: SDPA on nested jagged tensors, and torch.compile of an explicit softmax(Q K^T * s) V
(Inductor's attention pattern rewrite turns it into SDPA: with the pattern matcher off the
same function is right) or of F.scaled_dot_product_attention. The dense flash and cuDNN
kernels do the same when forced (torch-cuda-flash-nonpositive-scale-nan,
torch-cuda-cudnn-nonpositive-scale-nan); the math and memory-efficient kernels and float64
give the softmax-weighted values. A zero or negative scale is legal for SDPA.

Found by attnfuzz on an H100 (torch 2.11.0+cu130, stock GPU campaign of 2026-11-28:
target:torch/cuda_sdpa_jagged, cuda_compile, cuda_compile_sdpa). The NJT and
compile(explicit) calls below ran there (pattern matcher on: NaN, off: right); the
compile(SDPA) call is the campaign's bundles' configuration.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU).
"""
import sys

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)
import torch._inductor.config as inductor_config

torch.manual_seed(0)
bad = 0


def check(name, out, ref):
    global bad
    err = (out.double() - ref).abs().max().item()
    ok = err < 2e-2
    bad += not ok
    print(f"{name}: max error {err:.3g}{'' if ok else '  <- wrong'}")


def nested(xs):
    return torch.nested.nested_tensor([x.transpose(0, 1) for x in xs], layout=torch.jagged).transpose(1, 2)


for dtype in (torch.float16, torch.bfloat16):
    for scale in (0.0, -0.5):
        # nested jagged tensors: two sequences of 2 and 3 tokens, one head of 64
        qs, ks, vs = ([torch.randn(1, n, 64, device="cuda", dtype=dtype) for n in (2, 3)] for _ in range(3))
        out = F.scaled_dot_product_attention(nested(qs), nested(ks), nested(vs), scale=scale)
        for i, o in enumerate(out.unbind()):
            ref = F.scaled_dot_product_attention(qs[i].double(), ks[i].double(), vs[i].double(), scale=scale)
            check(f"NJT {dtype} scale {scale} sequence {i}", o, ref)
q, k, v = (torch.randn(1, 1, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.0)


def explicit(q, k, v):
    s = (q @ k.transpose(-1, -2)) * 0.0
    return torch.softmax(s.float(), -1).to(q.dtype) @ v


for on in (True, False):
    torch._dynamo.reset()
    inductor_config.pattern_matcher = on
    out = torch.compile(explicit)(q, k, v)
    name = f"torch.compile(explicit) bf16 scale 0, pattern matcher {'on' if on else 'off (control)'}"
    if on:
        check(name, out, ref)
    else:
        err = (out.double() - ref).abs().max().item()
        print(f"{name}: max error {err:.3g}")
inductor_config.pattern_matcher = True
torch._dynamo.reset()
out = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.0))(q, k, v)
check("torch.compile(F.scaled_dot_product_attention) bf16 scale 0", out, ref)
print(f"torch {torch.__version__}: {bad} mismatches")
if bad:
    print(f"BUG: {bad} calls with a zero or negative scale are wrong (NaN)")
    sys.exit(1)
print("FIXED: every route honours a zero or negative scale")
sys.exit(0)
