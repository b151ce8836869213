"""PyTorch on a CPU with AMX: a bfloat16 matmul A @ B with at least 17 rows in A and an
inner dimension K that is not a multiple of 32 puts NaN into an output row whose A row has
no NaN when a neighbouring A row holds NaN. In attention this is P @ V with a fully masked
row (its softmax is NaN): the rows beside it, which attend to live keys, come out NaN too.
oneDNN's AMX brgemm reads the K tail of A past the row's end, into the next row, and relies
on B's zero padding to cancel it, which NaN * 0 does not: known upstream as
uxlfoundation/oneDNN#5717 (closed), fixed by oneDNN PR #5723 (2026-07-31), not yet in the
oneDNN that torch 2.15.0 ships. With torch.backends.mkldnn disabled the output is right.

Found by attnfuzz (target:torch/explicit, 13 nan_mismatch bundles of a 120 s stock CPU
campaign of 2026-11-28: bf16, 17 to 455 queries, 15 to 257 keys; this VM: Xeon with
amx_bf16, torch 2.15.0+cu132).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line on a CPU without AMX or with oneDNN capped below it
(ONEDNN_MAX_CPU_ISA; the kernel is not used there).
"""
import os
import sys

import torch

try:
    amx = "amx_bf16" in open("/proc/cpuinfo").read()
except OSError:
    amx = False
if not amx:
    print("SKIP: needs a CPU with AMX (amx_bf16), where oneDNN takes its AMX brgemm")
    sys.exit(77)
# oneDNN capped below AMX (ONEDNN_MAX_CPU_ISA, as on a CPU without it) takes another kernel
cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
if cap != "ALL" and "AMX" not in cap:
    print("SKIP: ONEDNN_MAX_CPU_ISA=%s keeps oneDNN off its AMX brgemm" % cap)
    sys.exit(77)

torch.manual_seed(0)
torch.set_num_threads(1)


def leaks(M, K, N):
    """Row 0 of P one-hot (its output is V's row 0), every other row NaN: is row 0 NaN?"""
    P = torch.zeros(M, K, dtype=torch.bfloat16)
    P[0, 0] = 1.0
    P[1:] = float("nan")
    V = torch.randn(K, N).to(torch.bfloat16)
    return bool((P @ V)[0].isnan().any())


bug = False
for M, K, N in ((17, 79, 4), (32, 79, 64), (2, 79, 4), (17, 64, 4)):
    got = leaks(M, K, N)
    with torch.backends.mkldnn.flags(enabled=False):
        ctl = leaks(M, K, N)
    print("P %dx%d @ V %dx%d (bf16): row 0 NaN %s; with mkldnn disabled %s" % (M, K, K, N, got, ctl))
    bug |= got and not ctl
print("torch", torch.__version__, "cpu capability", torch.backends.cpu.get_cpu_capability())
if bug:
    print("BUG: a NaN row of A leaks into another output row of a bf16 CPU matmul")
    sys.exit(1)
print("FIXED: no NaN row leaks into another on this AMX CPU")
sys.exit(0)
