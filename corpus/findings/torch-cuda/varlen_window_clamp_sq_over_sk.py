"""torch.nn.attention.varlen.varlen_attn with a sliding window whose right bound is at least
the longest key sequence, on a sequence with more queries than keys: FlashAttention-2's
varlen entry point sets a window bound >= max_seqlen_k to -1 (unbounded), which is the same
mask only while every query's bottom-right-aligned bound already reaches the last key. With
13 queries, 3 keys and window (34, 8), query i sees keys up to i + 3 - 13 + 8 = i - 2: the
first two queries see none (output 0, as FlashAttention documents for an empty row), but the
kernel, its right bound dropped, lets them attend to every key. Known upstream:
Dao-AILab/flash-attention#895 ("Bug when window_size_right > max_seq_k and seq_q > seq_k",
open; the maintainer agreed it is a bug).

Found by attnfuzz (target:torch/cuda_varlen, about 25 diverge bundles of the stock H100
campaign of 2026-11-28, torch 2.11.0+cu130). Run on an H200 (torch 2.11.0+cu130): 13 queries,
3 keys, window (34, 8) max error 3.28, the two controls 5e-4; exit 1.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU, or no varlen_attn window_size).
"""
import inspect
import sys

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

torch.manual_seed(0)


def reference(q, k, v, left, right):
    """float64 attention with FlashAttention's bottom-right window; an empty row is 0."""
    sq, sk = q.shape[0], k.shape[0]
    s = torch.einsum("qhd,khd->hqk", q.double(), k.double()) / q.shape[-1] ** 0.5
    i = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    keep = (j >= i - left) & (j <= i + right)
    s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, v.double())


bad = 0
for sq, sk, window, expect in ((13, 3, (34, 8), True), (13, 13, (34, 8), False), (13, 3, (2, 1), False)):
    q = torch.randn(sq, 2, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(sk, 2, 64, device="cuda", dtype=torch.float16)
    v = torch.randn(sk, 2, 64, device="cuda", dtype=torch.float16)
    cu_q = torch.tensor([0, sq], device="cuda", dtype=torch.int32)
    cu_k = torch.tensor([0, sk], device="cuda", dtype=torch.int32)
    out = varlen_attn(q, k, v, cu_q, cu_k, sq, sk, window_size=window)
    ref = reference(q.cpu(), k.cpu(), v.cpu(), *window)
    err = (out.double().cpu() - ref).abs().max().item()
    wrong = not err < 1e-2
    bad += wrong and expect
    print(f"Sq {sq} Sk {sk} window {window}: max error {err:.3g}{'  <- wrong' if wrong else ''}"
          f"{'' if expect or not wrong else ' (a control)'}")
print(f"torch {torch.__version__}: {bad} configurations wrong")
if bad:
    print("BUG: a window bound >= max_seqlen_k is dropped where a sequence has more queries than keys")
    sys.exit(1)
print("FIXED: the window is honoured")
sys.exit(0)
