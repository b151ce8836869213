"""OpenVINO CPU: ScaledDotProductAttention on Q, K, V split from one packed QKV tensor
(Split + Reshape + Transpose to [B, H, S, D], the way models split a fused QKV projection)
gives wrong rows when the number of heads equals the sequence length (H == S). f32 and
bf16 inference precision both: the error is as large as V itself, not a rounding effect.

The Snippets MHA subgraph is at fault (the explicit MatMul / Softmax / MatMul graph, which
the plugin tokenizes into the same subgraph, is wrong the same way): with SNIPPETS_MODE=DISABLE
the same model is right, and so is H != S (H 4, S 5). The same happens with a [B, S, H, 3, D]
or [B, S, 3, H, D] buffer split by Gather, and with three separate [B, S, H*D] inputs each
Reshaped to [B, S, H, D] before the Transpose; a [B, S, H, D] parameter transposed directly is
right. The wrong rows are those of query i of head h with h > i; their output is a convex
combination of the right head's V rows with the wrong weights.

Found by a stock attnfuzz CPU campaign (openvino/sdpa, bf16, packed QKV [3, 10, 10, 3, 80]:
B 3, H 10, S 10, D 80, top-left causal; 5440 where the reference is -28.3; bundle
diverge-be047e4ecb1d66c7).

Run: python repro_snippets_mha_packed_qkv_heads_eq_seq.py   (openvino 2026.4, numpy)

Exit status: 1 with a BUG line while the H == S packed case is wrong, 0 with a FIXED line
once it is right.
"""
import sys

import numpy as np
import openvino as ov
import openvino.opset13 as ops

core = ov.Core()


def packed_sdpa(qkv, H, D, cfg=None):
    """qkv: [B, S, 3*H*D] -> Split(3) -> Reshape [B, S, H, D] -> Transpose [B, H, S, D] -> SDPA."""
    B, S, _ = qkv.shape
    p = ops.parameter(list(qkv.shape), ov.Type.f32)
    parts = ops.split(p, ops.constant(np.int64(2)), 3).outputs()
    q, k, v = (ops.transpose(ops.reshape(x, ops.constant(np.array([B, S, H, D], np.int64)), False),
                             ops.constant(np.array([0, 2, 1, 3], np.int64))) for x in parts)
    model = ov.Model([ops.scaled_dot_product_attention(q, k, v, causal=False)], [p])
    conf = dict({"INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": "1"}, **(cfg or {}))
    return core.compile_model(model, "CPU", conf)([qkv])[0]


def reference(qkv, H, D):
    """numpy float64 softmax(Q K^T / sqrt(D)) V of the same split, [B, H, S, D]."""
    B, S, _ = qkv.shape
    q, k, v = (x.reshape(B, S, H, D).transpose(0, 2, 1, 3).astype(np.float64) for x in np.split(qkv, 3, axis=-1))
    s = q @ k.swapaxes(-1, -2) / np.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


rng = np.random.default_rng(0)
D = 16
print("openvino", ov.__version__)
errs = {}
for H, S, cfg, label in [(4, 4, None, "H 4 = S 4 (default: Snippets MHA)"),
                         (4, 4, {"SNIPPETS_MODE": "DISABLE"}, "H 4 = S 4, SNIPPETS_MODE=DISABLE"),
                         (4, 5, None, "H 4, S 5 (default)")]:
    qkv = rng.standard_normal((1, S, 3 * H * D)).astype(np.float32)
    got, want = packed_sdpa(qkv, H, D, cfg), reference(qkv, H, D)
    err = np.abs(got - want).max(-1)                     # [B, H, S]
    errs[label] = err.max()
    h, i = np.unravel_index(np.argmax(err[0]), err[0].shape)
    print("%-36s max |got - want| = %.3g   wrong rows (h, i): %s" % (label, err.max(),
          [tuple(int(t) for t in x) for x in np.argwhere(err[0] > 1e-4)]))
    if err.max() > 1e-4:
        print("    head %d query %d: got %s\n                     want %s" % (h, i, np.round(got[0, h, i, :4], 4),
                                                                       np.round(want[0, h, i, :4], 4)))
bug = errs["H 4 = S 4 (default: Snippets MHA)"] > 1e-4
controls_ok = errs["H 4 = S 4, SNIPPETS_MODE=DISABLE"] < 1e-4 and errs["H 4, S 5 (default)"] < 1e-4
if bug and controls_ok:
    print("BUG: Snippets MHA gives wrong rows for Q/K/V split from a packed QKV tensor when heads == sequence length")
    sys.exit(1)
if bug:
    print("BUG (controls also off: the failure has spread): max errors %s" % errs)
    sys.exit(1)
print("FIXED: packed QKV with heads == sequence length is right")
sys.exit(0)
