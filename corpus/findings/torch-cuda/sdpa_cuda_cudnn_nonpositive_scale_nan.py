"""PyTorch's cuDNN SDPA kernel returns NaN when `scale` is 0 or negative (f16 and bf16; here
two queries, two keys, head_dim 8 and 64), as the flash kernel does
(sdpa_cuda_flash_nonpositive_scale_nan.py) and as jax's cuDNN path does for a negative scale
(corpus/findings/jax/repro_cudnn_negative_scale.py); the math kernel and float64 give the
softmax-weighted values. A zero or negative scale is legal for F.scaled_dot_product_attention.
Found by attnfuzz (target:torch/cuda_sdpa_cudnn, bundle
corpus/findings/torch-cuda/bundles/nan_mismatch-88965eaae0fd2811: scale 0, bf16, [1,1,2,64]).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU, or no cuDNN attention).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)

torch.manual_seed(0)
bad = ran = 0
for dtype in (torch.float16, torch.bfloat16):
    for D in (8, 64):
        q, k, v = (torch.randn(1, 1, 2, D, device="cuda", dtype=dtype) for _ in range(3))
        for scale in (0.0, -0.5, 0.125):  # 0.125: the control, honoured
            ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=scale)
            try:
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    out = F.scaled_dot_product_attention(q, k, v, scale=scale)
            except RuntimeError as e:  # the dispatcher refused cuDNN here: nothing to compare
                print(f"cudnn {dtype} D={D} scale={scale}: not run ({str(e).splitlines()[0][:100]})")
                continue
            ran += 1
            err = (out.double() - ref).abs().max().item()
            if not err < 2e-2:
                bad += 1 if scale <= 0 else 0
                print(f"cudnn {dtype} D={D} scale={scale}: max error {err} "
                      f"(out {out.flatten()[:3].tolist()}, want {ref.flatten()[:3].tolist()})")
print(f"torch {torch.__version__}: {ran} configurations run, {bad} mismatches with a scale <= 0")
if not ran:
    print("SKIP: cuDNN attention does not run here")
    sys.exit(77)
if bad:
    print(f"BUG: {bad} configurations with a zero or negative scale mismatch")
    sys.exit(1)
print("FIXED: the cuDNN kernel honours a zero or negative scale")
sys.exit(0)
