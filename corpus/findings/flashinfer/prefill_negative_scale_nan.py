"""FlashInfer's prefill kernels return NaN for a negative `sm_scale`: the online softmax
takes its running maximum over the raw scores Q K^T, with masked and out-of-range keys of a
tile filled with -inf, and applies the scale afterwards (exp2(s * sm_scale * log2e -
m * sm_scale * log2e): hopper/attention_updater.cuh, prefill.cuh). A negative scale turns
the -inf fill into +inf, and the row into NaN. Softmax is defined for any real scale (a
negative one is a softmax over -Q K^T), and the API takes the value without a check. Found
by attnfuzz's H200 campaign of target:flashinfer/* (bundle
corpus/findings/flashinfer-cuda/bundles/nan_mismatch-8d5fa3e4f7fff673: f16 [1, 2, 24, 64],
no mask, sm_scale -0.029, every output NaN).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU, or no flashinfer).
"""
import sys

import torch

try:
    import flashinfer
except ImportError:
    print("SKIP: needs flashinfer-python (import flashinfer)")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)

torch.manual_seed(0)
bad = 0
for causal in (False, True):
    n, H, D = 24, 2, 64   # 24 keys: the last key tile is partly out of range
    q, k, v = (torch.randn(n, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    for scale in (-0.03, 0.125):   # 0.125: the control, honoured
        s = torch.einsum("qhd,khd->hqk", q.double(), k.double()) * scale
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
        ref = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v.double())
        out = flashinfer.single_prefill_with_kv_cache(q, k, v, causal=causal, sm_scale=scale)
        torch.cuda.synchronize()
        err = (out.double() - ref).abs().max().item()
        if not err < 1e-2:
            bad += 1 if scale < 0 else 0
            print(f"causal={causal} sm_scale={scale}: max error {err} (NaN: {int(out.isnan().sum())} of {out.numel()})")
print(f"flashinfer {flashinfer.__version__}: {bad} mismatches with a negative sm_scale")
if bad:
    print("BUG: a negative sm_scale gives NaN")
    sys.exit(1)
print("FIXED: a negative sm_scale is honoured")
sys.exit(0)
