"""PyTorch's CPU flash SDPA kernel with is_causal=True and a negative `scale` returns NaN
(or, for some sizes, wrong finite values); the math kernel and the flash kernel without
is_causal are right. The causal -inf apparently meets the scale after masking
(-inf * negative = +inf), as the math path did before pytorch PR #105202.
Found by attnfuzz (target:torch/sdpa_flash, negative case scale with a causal mask);
torch 2.15.0 CPU, f32/f16/bf16.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import sys
import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, 4, 8)).astype(np.float32)) for _ in range(3))


def reference(q, k, v, scale):       # float64 numpy, causal top-left
    s = scale * (q[0, 0].double().numpy() @ k[0, 0].double().numpy().T)
    s[np.triu(np.ones(s.shape, bool), 1)] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v[0, 0].double().numpy()


bug = False
for scale in (0.3, -0.3):
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)[0, 0].numpy()
    err = np.abs(out - reference(q, k, v, scale))
    print(f"scale {scale:+}: NaN {int(np.isnan(out).sum())} of {out.size}, max err {np.nanmax(err) if np.isfinite(err).any() else float('nan'):.3g}")
    bug |= not err.max() < 1e-4

if bug:
    print("BUG: the CPU flash kernel with is_causal=True is wrong (NaN) for a negative scale")
    sys.exit(1)
print("FIXED: the CPU flash kernel with is_causal=True is right for both scales")
sys.exit(0)
