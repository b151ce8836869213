"""SDPA on nested jagged tensors (CUDA, f16/bf16) with is_causal=True never returns when a
sequence of no tokens sits beside one of a single token (lengths [0, 1] or [1, 0]): the GPU
stays busy until the process is killed. Lengths [0, 2] and [1, 1] run, and so do [0, 1]
without is_causal. NJT's causal calls go to cuDNN (the same route raises "hidden_dim should
be multiple of 8", torch-njt-sdpa-cuda-causal-cudnn-head-dim); cuDNN takes zero-length
sequences from 9.25 only (NVIDIA/cudnn-frontend#943: NaN rows on 9.22), and FlashAttention's
sm100 kernels hung on a zero-length K until Dao-AILab/flash-attention PR#2568. Which kernel
spins here is not established.

Found by attnfuzz (target:torch/cuda_sdpa_jagged, two timeout bundles of the stock H100
campaign of 2026-11-28, torch 2.11.0+cu130; each replayed as a timeout); these
configurations ran there (the two hanging ones killed after 25 s).

Each configuration runs in a child process under a time limit. Exit status: 1 with a BUG
line while the bug is present, 0 with a FIXED line once it is fixed, 77 with a SKIP line
where it cannot run (no CUDA GPU).
"""
import subprocess
import sys

import torch

CONFIGS = [  # (dtype, sequence lengths, is_causal, the bug expected)
    ("bfloat16", "0,1", True, True),
    ("float16", "1,0", True, True),
    ("bfloat16", "0,2", True, False),
    ("bfloat16", "1,1", True, False),
    ("bfloat16", "0,1", False, False),
]
LIMIT = 25


def one(dtype, lens, causal):
    import torch.nn.functional as F
    dt = getattr(torch, dtype)
    n = [int(x) for x in lens.split(",")]

    def nested():
        return torch.nested.nested_tensor([torch.randn(t, 1, 16, device="cuda", dtype=dt) for t in n],
                                          layout=torch.jagged).transpose(1, 2)
    out = F.scaled_dot_product_attention(nested(), nested(), nested(), is_causal=causal)
    torch.cuda.synchronize()
    print("returned", [tuple(t.shape) for t in out.unbind()])


if __name__ == "__main__":
    if len(sys.argv) == 4:
        one(sys.argv[1], sys.argv[2], sys.argv[3] == "1")
        sys.exit(0)
    if not torch.cuda.is_available():
        print("SKIP: needs a CUDA GPU")
        sys.exit(77)
    hung = wrong = 0
    for dtype, lens, causal, expect in CONFIGS:
        try:
            p = subprocess.run([sys.executable, __file__, dtype, lens, "1" if causal else "0"],
                               capture_output=True, text=True, timeout=LIMIT)
            what = (p.stdout.strip().splitlines() or ["exit %d: %s" % (p.returncode, p.stderr.strip()[-200:])])[-1]
            hang = False
        except subprocess.TimeoutExpired:
            what, hang = f"no answer within {LIMIT} s (killed)", True
        print(f"{dtype} lengths [{lens}] is_causal={causal}: {what}")
        hung += hang and expect
        wrong += hang and not expect
    print(f"torch {torch.__version__}: {hung} configurations hung, {wrong} controls hung")
    if hung:
        print(f"BUG: {hung} causal calls with an empty sequence beside a one-token one never return")
        sys.exit(1)
    print("FIXED: every configuration returns")
    sys.exit(0)
