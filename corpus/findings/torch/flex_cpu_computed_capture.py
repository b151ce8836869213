"""torch.compile(flex_attention) on CPU fails when score_mod indexes a tensor computed inside
the compiled region (here an additive mask cast to Q's dtype, then expanded):
InductorError LoweringException AssertionError: All the buffers in the score and mask
subgraph should be in kernel_group.args.input_buffers. Eager flex_attention runs.
Found by attnfuzz (target:torch/flex, an additive mask whose dtype differs from Q's);
torch 2.15.0 CPU.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import sys
import numpy as np
import torch
from torch.nn.attention.flex_attention import flex_attention

B, H, S, D = 2, 2, 5, 8
rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal((B, H, S, D)).astype(np.float32)) for _ in range(3))
mask = torch.from_numpy(rng.standard_normal((S, S)).astype(np.float16))   # a mask in another dtype


def attention(q, k, v, mask):
    bias = mask.to(q.dtype).expand(B, H, S, S)                 # computed in the graph

    def score_mod(score, b, h, i, j):
        return score + bias[b, h, i, j]

    return flex_attention(q, k, v, score_mod=score_mod)


eager = attention(q, k, v, mask)
try:
    out = torch.compile(attention, fullgraph=True)(q, k, v, mask)
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
