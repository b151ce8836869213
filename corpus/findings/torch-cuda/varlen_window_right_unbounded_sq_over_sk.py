"""torch.nn.attention.varlen.varlen_attn with a sliding window whose right side is unbounded
(window_size=(left, -1), left >= 0) on a sequence with more queries than keys: FlashAttention's
set_params_fprop replaces an unbounded right side by seqlen_k ("if (window_size_left >= 0 &&
window_size_right < 0) window_size_right = seqlen_k"), which is no bound while Sq <= Sk but a
real one on the bottom-right-aligned diagonal when Sq > Sk (offset Sk - Sq < 0): query i then
sees keys j <= i + 2 Sk - Sq only, and the last keys drop out of the first rows. With 5 queries,
3 keys and window (2, -1), query 0 should see all 3 keys but sees keys 0 and 1. The mirror image
of varlen_window_clamp_sq_over_sk.py (a bound >= Sk turned into -1); same root,
Dao-AILab/flash-attention#895.

Found by attnfuzz (target:torch/cuda_varlen, 2 diverge bundles of a GPU campaign, 2026-11-28,
torch 2.11.0+cu130, NVIDIA H100). Run on an H200 (torch 2.11.0+cu130): Sq 5, Sk 3, window
(2, -1) max error 1.16 against the unbounded-right result and 8e-4 against right := Sk (Sq 8,
Sk 6, (5, -1): 1.33 and 5e-4); the two controls 7e-4; exit 1.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU, or no varlen_attn window_size),
2 if a control (Sq <= Sk, or no window) is wrong.
"""
import inspect
import sys

import numpy as np
import torch

if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)
try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    print("SKIP: this torch has no torch.nn.attention.varlen")
    sys.exit(77)
if "window_size" not in inspect.signature(varlen_attn).parameters:
    print("SKIP: this varlen_attn takes no window_size")
    sys.exit(77)


def reference(q, k, v, left, right):
    """float64 attention, bottom-right aligned window: key j allowed for query i iff
    i + Sk - Sq - left <= j <= i + Sk - Sq + right (a negative bound is unbounded)."""
    sq, sk = len(q), len(k)
    s = q @ k.T / np.sqrt(q.shape[1])
    d = np.arange(sq)[:, None] + sk - sq
    j = np.arange(sk)[None, :]
    keep = ((j >= d - left) if left >= 0 else True) & ((j <= d + right) if right >= 0 else True)
    s = np.where(keep, s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v


rng = np.random.default_rng(6)
bug = broken = False
for sq, sk, window, is_case in ((5, 3, (2, -1), True), (8, 6, (5, -1), True),
                                (3, 5, (2, -1), False), (5, 3, (-1, -1), False)):
    q, k, v = (rng.standard_normal((n, 64)).astype(np.float16).astype(np.float64) for n in (sq, sk, sk))
    cu_q = torch.tensor([0, sq], device="cuda", dtype=torch.int32)
    cu_k = torch.tensor([0, sk], device="cuda", dtype=torch.int32)
    t = [torch.from_numpy(x[:, None, :]).to("cuda", torch.float16) for x in (q, k, v)]
    out = varlen_attn(*t, cu_q, cu_k, sq, sk, window_size=window)[:, 0].double().cpu().numpy()
    want = reference(q, k, v, *window)
    err = np.abs(out - want).max()
    line = f"Sq {sq} Sk {sk} window {window}: max error {err:.3g}"
    if is_case:
        line += f" (vs right := Sk: {np.abs(out - reference(q, k, v, window[0], sk)).max():.3g})"
        line += f"; row 0 expected {want[0, :3].round(3).tolist()}, got {out[0, :3].round(3).tolist()}"
    wrong = not err < 1e-2
    print(line + ("  <- wrong" if wrong else "") + ("" if is_case else " (a control)"))
    bug |= wrong and is_case
    broken |= wrong and not is_case
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
if broken:
    print("a control (Sq <= Sk, or no window) is wrong: broken setup, not this bug")
    sys.exit(2)
if bug:
    print("BUG: an unbounded right window (-1) becomes a bound of seqlen_k where a sequence has more queries than keys")
    sys.exit(1)
print("FIXED: an unbounded right window stays unbounded")
sys.exit(0)
