"""PyTorch's cuDNN SDPA kernel fails for a query broadcast over batch or heads (a stride-0
dimension longer than 1, e.g. `q.expand(...)`) when V's head dim differs from Q's: it raises
"cuDNN Frontend error: The stride for the last dimension corresponding to the embedding size
per head should be 1 for output_names::O", and a process that goes on may die of SIGSEGV.
The output is allocated "matching Q's layout" (alloc_with_matching_layout), which sorted a
stride-0 dimension as if its stride were 1, so the output's head dim lost its unit stride;
with Dv == D the output is empty_like(q) and runs. pytorch PR #175764 fixes the sort (merged
2026-02-28). Controls: the same shapes with a materialized Q, and a broadcast Q with Dv == D.
Found by attnfuzz (target:torch/cuda_sdpa_cudnn on an H100, torch 2.11.0+cu130: 8 findings,
errors and SIGSEGV crashes, f16 and bf16, D 32/64 with Dv 16/64, Q stride 0 over batch or
heads).

Each configuration runs in a child process (a SIGSEGV must not end the repro). Exit status: 1
with a BUG line while the bug is present, 0 with a FIXED line once it is fixed, 77 with a
SKIP line where it cannot run (no CUDA GPU, or no cuDNN attention).
"""
import subprocess
import sys

import torch

CONFIGS = [  # (label, dtype, Q's stride-0 dim or None, D, Dv, the bug expected)
    ("f16 Q broadcast over batch, D 64, Dv 16", "float16", 0, 64, 16, True),
    ("bf16 Q broadcast over heads, D 32, Dv 16", "bfloat16", 1, 32, 16, True),
    ("f16 Q materialized, D 64, Dv 16 (control)", "float16", None, 64, 16, False),
    ("f16 Q broadcast over batch, D 64, Dv 64 (control)", "float16", 0, 64, 64, False),
]


def one(dtype, bdim, D, Dv):
    """Child: runs one configuration; prints ok/refused with the error, or the max error."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    B, H, S = 2, 2, 11
    shape = [B, H, S, D]
    if bdim is None:
        q = torch.randn(shape, device="cuda", dtype=dt)
    else:
        small = list(shape)
        small[bdim] = 1
        q = torch.randn(small, device="cuda", dtype=dt).expand(shape)   # stride 0 over bdim
    k = torch.randn(B, H, S, D, device="cuda", dtype=dt)
    v = torch.randn(B, H, S, Dv, device="cuda", dtype=dt)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    try:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.cuda.synchronize()
    except RuntimeError as e:
        msg = str(e).splitlines()[0][:200]
        print(("error " if "output_names::O" in msg else "refused ") + msg)
        return
    print("ok max error %.3g" % (out.double() - ref).abs().max().item())


if __name__ == "__main__":
    if len(sys.argv) == 5:
        one(sys.argv[1], None if sys.argv[2] == "-" else int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    if not torch.cuda.is_available():
        print("SKIP: needs a CUDA GPU")
        sys.exit(77)
    bad = ran = wrong_control = 0
    for label, dtype, bdim, D, Dv, expected in CONFIGS:
        p = subprocess.run([sys.executable, __file__, dtype, "-" if bdim is None else str(bdim), str(D), str(Dv)],
                           capture_output=True, text=True, timeout=300)
        said = (p.stdout.strip().splitlines() or [""])[-1]
        if p.returncode < 0:
            said = "killed by signal %d (%s)" % (-p.returncode, p.stderr.strip().splitlines()[-1][:160]
                                                if p.stderr.strip() else "no stderr")
        print("%s: %s" % (label, said))
        if said.startswith("refused"):
            continue
        ran += 1
        failed = said.startswith("error") or said.startswith("killed") or \
            (said.startswith("ok") and not float(said.split()[-1]) < 2e-2)
        if expected:
            bad += failed
        else:
            wrong_control += failed
    print(f"torch {torch.__version__}: {ran} configurations ran, {bad} broadcast ones failed, "
          f"{wrong_control} controls failed")
    if not ran:
        print("SKIP: cuDNN attention does not run here")
        sys.exit(77)
    if wrong_control:
        print(f"BUG: {wrong_control} controls fail too: cuDNN SDPA fails here more widely than described")
        sys.exit(1)
    if bad:
        print(f"BUG: {bad} configurations with a broadcast Q and Dv != D fail; the controls run")
        sys.exit(1)
    print("FIXED: cuDNN SDPA runs a broadcast Q with Dv != D")
    sys.exit(0)
