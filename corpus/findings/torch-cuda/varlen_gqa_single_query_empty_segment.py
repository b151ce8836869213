"""torch.nn.attention.varlen.varlen_attn with GQA (more query heads than key/value heads),
at most one query per sequence and a sequence with no query raises "shape '[B, 1, Hkv, D]'
is invalid for input of size ..." instead of attending: the FlashAttention-2 varlen kernel
it calls swaps the query heads into the sequence dimension when max_seqlen_q is 1
(seqlenq_ngroups_swapped) and reshapes Q to [batch, groups, Hkv, D], which needs exactly one
query per sequence. Known upstream in FlashAttention: Dao-AILab/flash-attention#1537 ("bug in
flash_attn_varlen_func when max_seqlen == 1", open) and #1619 (total length below the batch
size with GQA, open).

Found by attnfuzz (target:torch/cuda_varlen, 3 error bundles of the stock H100 campaign of
2026-11-28, torch 2.11.0+cu130: query lengths [1, 0], [0, 1, 1, 0], [1, 1, 0]). Run on an H100
(torch 2.11.0+cu130): both GQA configurations raise the reshape error, both controls run
(max error 6e-4); exit 1.

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU, or no varlen_attn).
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
import torch.nn.functional as F

torch.manual_seed(0)
CONFIGS = [  # (query lengths, key lengths, Hq, Hkv, the bug expected)
    ([1, 0], [5, 3], 4, 2, True),
    ([1, 1, 0], [1, 1, 2], 2, 1, True),
    ([1, 1], [5, 3], 4, 2, False),      # one query each: runs
    ([1, 0], [5, 3], 2, 2, False),      # no GQA: runs
]
bad = wrong = 0
for lq, lk, hq, hkv, expect in CONFIGS:
    cu = lambda ls: torch.tensor([0] + list(torch.tensor(ls).cumsum(0).tolist()), device="cuda", dtype=torch.int32)
    q = torch.randn(sum(lq), hq, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(sum(lk), hkv, 64, device="cuda", dtype=torch.float16)
    v = torch.randn(sum(lk), hkv, 64, device="cuda", dtype=torch.float16)
    try:
        # GQA from the head counts; a torch whose varlen_attn has enable_gqa gets it
        gqa = {"enable_gqa": True} if hq != hkv and "enable_gqa" in inspect.signature(varlen_attn).parameters else {}
        out = varlen_attn(q, k, v, cu(lq), cu(lk), max(lq), max(lk), **gqa)
        torch.cuda.synchronize()
    except RuntimeError as e:
        print(f"queries {lq} keys {lk} Hq {hq} Hkv {hkv}: raised {str(e).splitlines()[0][:160]}")
        bad += expect
        wrong += not expect
        continue
    err, pos, kpos = 0.0, 0, 0
    for a, b in zip(lq, lk):
        if a:
            ref = F.scaled_dot_product_attention(q[pos:pos + a].transpose(0, 1).double(),
                                                 k[kpos:kpos + b].transpose(0, 1).double(),
                                                 v[kpos:kpos + b].transpose(0, 1).double(), enable_gqa=True)
            err = max(err, (out[pos:pos + a].transpose(0, 1).double() - ref).abs().max().item())
        pos, kpos = pos + a, kpos + b
    print(f"queries {lq} keys {lk} Hq {hq} Hkv {hkv}: ran, max error {err:.3g}")
    wrong += not err < 1e-2
print(f"torch {torch.__version__}: {bad} configurations raised, {wrong} controls wrong")
if bad:
    print(f"BUG: {bad} GQA calls with one query per sequence at most and an empty one raise")
    sys.exit(1)
print("FIXED: every configuration runs")
sys.exit(0)
