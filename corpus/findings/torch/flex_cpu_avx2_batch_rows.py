"""torch.compile(flex_attention) on CPU, Inductor's AVX2 code path: with a block mask and a
batch of 2, batch row 1 of the output comes out wrong (0, NaN or stale values) while row 0
is right; how many elements are wrong changes from call to call (an uninitialized or
mis-strided read inside the generated C++ kernel). Plain contiguous [B, H, S, D] float32
tensors and a causal mask_mod are enough; eager flex_attention is right.

Which code path: Inductor picks its vector ISA as ATen does (ATEN_CPU_CAPABILITY, else the
CPU): AVX2 on a CPU without AVX-512, or anywhere under ATEN_CPU_CAPABILITY=avx2 (or
torch._inductor.config.cpp.simdlen = 256). This script sets ATEN_CPU_CAPABILITY=avx2
unless the caller set it, so it shows the bug on an AVX-512 host as well. Measured: torch
2.15.0 on an AVX2-only 2-core VM (wrong in batch row 1 in 4 of 6 processes of 20 calls);
torch 2.11.0 on a Xeon with AVX-512 and AMX: right under its own AVX512 path (16 and 2
threads) and under avx2 with 1 or 16 threads, wrong (320 elements over 20 calls, all in
row 1) under avx2 with 2 threads.
Found by attnfuzz (target:torch/flex self-test on an AVX2 host, every packed layout and
the batch check failing in row 1).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed.
"""
import os
import sys

os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")   # before torch is imported

import torch  # noqa: E402
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

B, H, S, D = 2, 4, 8, 16
CALLS = 40
torch.set_num_threads(2)
torch.manual_seed(0)


def causal(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx


block_mask = create_block_mask(causal, B, None, S, S, device="cpu")
compiled = torch.compile(flex_attention)
wrong = [0] * B
for call in range(CALLS):
    q, k, v = (torch.randn(B, H, S, D) for _ in range(3))
    want = flex_attention(q, k, v, block_mask=block_mask)       # eager
    got = compiled(q, k, v, block_mask=block_mask)
    bad = ~((got - want).abs() <= 1e-4)                          # NaN counts as wrong
    for b in range(B):
        wrong[b] += int(bad[b].sum())
print("torch %s, ATen CPU capability %s, %d threads: wrong elements by batch row over %d calls: %s"
      % (torch.__version__, torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(), CALLS, wrong))
if any(wrong):
    print("BUG: compiled flex_attention (Inductor CPU, AVX2 path) gives wrong values in batch row(s) %s"
          % [b for b in range(B) if wrong[b]])
    sys.exit(1)
print("FIXED: compiled flex_attention matches eager in every batch row")
sys.exit(0)
