"""torch.compile(flex_attention) on CPU fails to lower when the query is a head-split view
of a 3-D [B, S, H*D] tensor (the usual projection output): InductorError LoweringException
ValueError: not enough values to unpack (expected 4, got 3). Eager flex_attention runs.
Found by attnfuzz (target:torch/flex, q layout bsd); torch 2.15.0 CPU.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import sys
import numpy as np
import torch
from torch.nn.attention.flex_attention import flex_attention

B, S, H, D = 2, 5, 2, 8
rng = np.random.default_rng(0)
q3 = torch.from_numpy(rng.standard_normal((B, S, H * D)).astype(np.float32))
k = torch.from_numpy(rng.standard_normal((B, H, S, D)).astype(np.float32))
v = torch.from_numpy(rng.standard_normal((B, H, S, D)).astype(np.float32))


def attention(q3, k, v):
    q = q3.reshape(B, S, H, D).transpose(1, 2)      # [B, S, H*D] -> [B, H, S, D]
    return flex_attention(q, k, v)


eager = attention(q3, k, v)
try:
    out = torch.compile(attention, fullgraph=True)(q3, k, v)
    err = (out - eager).abs().max().item()
    print("compiled ran; max |compiled - eager| =", err)
    if not err < 1e-4:
        print("BUG: compiled flex_attention runs but differs from eager")
        sys.exit(1)
    print("FIXED: compiled flex_attention runs and matches eager")
    sys.exit(0)
except Exception as e:  # noqa: BLE001
    print("BUG: compiled flex_attention raised", type(e).__name__, str(e).splitlines()[0][:200])
    sys.exit(1)
