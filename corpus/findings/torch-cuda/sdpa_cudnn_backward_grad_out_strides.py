"""PyTorch's cuDNN SDPA backward with a grad_output whose memory order differs from the
output's: each dO form in its own process (a device fault ends the CUDA context), the
gradients compared with the float64 math backward of the same graph.

    python sdpa_cudnn_backward_grad_out_strides.py

Exit status: 1 with a BUG line while some form errs or is off (max |grad - float64| over
0.05), 0 with a FIXED line once every form is right, 77 with a SKIP line without a CUDA GPU.

Forms: contiguous; BSHD memory order (dO.transpose(1, 2) of a [B, S, H, D] tensor: the
output's own order under bshd inputs); head dim not innermost ([B, H, D, S] memory); a
padded row (stride(-2) = D + 3); stride 0 (out.sum().backward()). The inputs are q [B, S,
Hq, D] f16 transposed to [B, Hq, S, D] (a model's view), GQA 4:2, causal, S = 9."""
import json
import subprocess
import sys

FORMS = ("contiguous", "bshd", "d_not_innermost", "padded", "stride0")


def run(form):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    B, S, Hq, Hkv, D = 2, 9, 4, 2, 16
    q = torch.randn(B, S, Hq, D, device="cuda", dtype=torch.float16).transpose(1, 2).requires_grad_(True)
    k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.float16).transpose(1, 2).requires_grad_(True)
    v = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.float16).transpose(1, 2).requires_grad_(True)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    g = torch.randn(B, Hq, S, D, device="cuda", dtype=torch.float16)
    if form == "bshd":
        g = g.transpose(1, 2).contiguous().transpose(1, 2)
    elif form == "d_not_innermost":
        g = g.transpose(2, 3).contiguous().transpose(2, 3)
    elif form == "padded":
        g = torch.nn.functional.pad(g, (0, 3))[..., :D]
    elif form == "stride0":
        g = torch.ones((), device="cuda", dtype=torch.float16).expand(B, Hq, S, D)
    o.backward(g)
    torch.cuda.synchronize()
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    o64 = F.scaled_dot_product_attention(q64, k64, v64, is_causal=True, enable_gqa=True)
    o64.backward(g.double())
    return {"strides": list(g.stride()), **{n: float((a.grad.double() - b.grad).abs().max()) for n, a, b in
                                           (("dq", q, q64), ("dk", k, k64), ("dv", v, v64))}}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        try:
            print(json.dumps({"form": sys.argv[1], **run(sys.argv[1])}))
        except Exception as e:  # noqa: BLE001 - reported per form
            print(json.dumps({"form": sys.argv[1], "error": type(e).__name__ + ": " + str(e).splitlines()[0][:160]}))
        sys.exit(0)
    import torch
    if not torch.cuda.is_available():
        print("SKIP: needs a CUDA GPU")
        sys.exit(77)
    bad = []
    for f in FORMS:
        r = subprocess.run([sys.executable, __file__, f], capture_output=True, text=True, timeout=300)
        line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        print(line or "%s: exit %d %s" % (f, r.returncode, r.stderr.strip().splitlines()[-1:]), flush=True)
        res = json.loads(line) if line.startswith("{") else {"error": "no result"}
        if "error" in res or not all(res[g] <= 0.05 for g in ("dq", "dk", "dv")):
            bad.append(f)
    if bad:
        print("BUG: cuDNN SDPA backward errs or is off for grad_output forms: " + ", ".join(bad))
        sys.exit(1)
    print("FIXED: cuDNN SDPA backward is right for every grad_output form")
