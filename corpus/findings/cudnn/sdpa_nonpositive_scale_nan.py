"""cuDNN's SDPA graph (the frontend's `graph.sdpa`) returns NaN when `attn_scale` is 0 or
negative, with or without a causal mask; a positive scale is right. The same kernels
behind PyTorch's cuDNN SDPA show it (corpus/findings/torch-cuda/
sdpa_cuda_cudnn_nonpositive_scale_nan.py) and jax's cuDNN path for a negative scale: the
frontend has no check that refuses such a scale. Found by attnfuzz's self-test of
target:cudnn/sdpa (the case "causal, negative scale": f16 [1, 1, 5, 8], scale -0.3).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed, 77 with a SKIP line where it cannot run (no CUDA GPU, or no cuDNN frontend).
"""
import sys

import torch

try:
    import cudnn
except ImportError:
    print("SKIP: needs nvidia-cudnn-frontend (import cudnn)")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)


def sdpa(q, k, v, scale, causal):
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
    o, _ = g.sdpa(name="sdpa", q=tq, k=tk, v=tv, attn_scale=scale, generate_stats=False, use_causal_mask=causal)
    o.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    out = torch.empty_like(q)
    ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device="cuda")
    g.execute({tq: q, tk: k, tv: v, o: out}, ws, handle=handle)
    torch.cuda.synchronize()
    return out


handle = cudnn.create_handle()
torch.manual_seed(0)
bad = 0
for causal in (False, True):
    for D in (8, 64):
        q, k, v = (torch.randn(1, 1, 5, D, device="cuda", dtype=torch.float16) for _ in range(3))
        for scale in (-0.3, 0.0, 0.125):  # 0.125: the control, honoured
            s = (q.double() @ k.double().transpose(-1, -2)) * scale
            if causal:
                s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            ref = torch.softmax(s, -1) @ v.double()
            out = sdpa(q, k, v, scale, causal)
            err = (out.double() - ref).abs().max().item()
            if not err < 1e-2:
                bad += 1 if scale <= 0 else 0
                print(f"causal={causal} D={D} scale={scale}: max error {err} (out {out.flatten()[:3].tolist()})")
print(f"cudnn frontend {cudnn.__version__}, cuDNN {cudnn.backend_version()}: {bad} mismatches with a scale <= 0")
if bad:
    print(f"BUG: {bad} configurations with a zero or negative scale mismatch")
    sys.exit(1)
print("FIXED: cuDNN's SDPA graph honours a zero or negative scale")
sys.exit(0)
