"""cuDNN's own frontend (nvidia-cudnn-frontend, `import cudnn`) as an attnfuzz target: the SDPA
graphs of its Python graph API (`graph.sdpa`, `graph.sdpa_backward`), which PyTorch and JAX
reach only in part.

  sdpa      a forward graph per structure (f16/bf16, GQA, D != Dv): causal top-left
            (use_causal_mask) and bottom-right (use_causal_mask_bottom_right), an explicit
            diagonal and sliding windows as the diagonal band's bounds, key padding through
            the padding mask (seq_len_q, seq_len_kv), the additive mask as `bias`, dropout
            (its own Philox; the mask read back through rng_dump), a sink token, ALiBi;
            the backward (sdpa_backward from the forward's softmax stats: dQ, dK, dV, dBias)
  serving   the same graphs over the serving forms: THD tensors through ragged offsets (the
            cu_seqlens scaled to elements), paged K and V caches through page tables
            (paged_attention_k_table / _v_table), per-row lengths through the padding mask;
            forward only

A graph is built per structure (validate, build_operation_graph, heuristics A and FALLBACK,
check_support, build_plans: tens to hundreds of milliseconds) and cached: the variants declare
PLANS, so the first case of a structure is timed as compiling and a batch shares one graph.
Values the graph takes at run time (key lengths, page tables, ragged offsets, dropout seed)
are tensors, not structure.

The diagonal: cuDNN's band is [d - left_bound + 1, d + right_bound] around d = i (TOP_LEFT)
or d = i + seq_len_kv - seq_len_q (BOTTOM_RIGHT, per row with the padding mask); attnfuzz's
window (left, right) is [d - left, d + right]. A case's diagonal offset that is neither is
expressed as TOP_LEFT with the bounds moved by it. cuDNN refuses a bottom-right diagonal and
windows where Sq > Sk ("virtually slice the Q tensor"), and right bounds below 0: those
cases are unsupported, as is every other graph check_support refuses. ALiBi is cuDNN's own
geometric slopes only (2^(-8 (h + 1) / n) ..., the case's `geometric` slopes of magnitude 1);
its bias, (j - i) * slope, differs from attnfuzz's -(d - j) * slope by a constant per row,
which the softmax cancels. The softmax statistics (log-sum-exp per row, natural log, f32
[B, H, Sq, 1]) come out of the forward graph of a backward case (generate_stats), which the
backward graph reads, and of the sdpa variant's forward cases when the run asks for them (cap
lse; a graph check_support refuses with them is built without, and the run returns none);
what they are for a row that attends to nothing is probed at start (a bias of -inf at every
key: lse_masked_rows where it is not -inf).

Measured on an H200 (cuDNN 9.19.0): NaN in the value row of a key the causal mask hides
reaches the output (`masked_values: "ieee"`, probed at start); bf16 subnormal outputs come
out 0 (`denormals: ["bf16"]`); a zero or negative scale gives NaN and a bias broadcast over
queries or keys gives wrong gradients (docs/findings.md, cudnn rows).

Only torch (for device tensors), numpy and cudnn: repro_snippet copies the model code."""

from __future__ import annotations

import math
import sys

import numpy as np

from attnfuzz import guard, serving
from attnfuzz.targets import _base, _common, _torch_layouts
from attnfuzz.layouts import UNPACKED as UNPACKED_LAYOUTS
from attnfuzz.targets._torch_layouts import to_bhsd, to_numpy, to_torch, unpack_qkv


def _probe(variant):
    import torch
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    major, _ = torch.cuda.get_device_capability()
    if major < 8:
        return "cuDNN's fused SDPA needs compute capability 8.0 or newer"
    if variant == "sdpa_fp8" and major < 9:
        return "cuDNN's FP8 SDPA needs compute capability 9.0 or newer"
    return None


_V = _base.Variant
STACK = _base.Stack("cudnn", imports=("cudnn", "torch"), gpu_pip=("nvidia-cudnn-frontend==1.32.0",),
                    probe=_probe, trains=True, variants=(
    _V("sdpa", "cudnn.pygraph sdpa / sdpa_backward: causal, bands, padding mask, bias, dropout, sink, ALiBi (CUDA)",
       gpu=True, serving=("sinks", "alibi")),
    _V("serving", "cudnn.pygraph sdpa over THD ragged offsets and paged K/V caches with page tables (CUDA)",
       gpu=True, backward=False, serving=("packed", "paged", "sinks", "alibi")),
    _V("sdpa_fp8", "cudnn.pygraph sdpa_fp8: e4m3/e5m2 Q, K, V with per-tensor descales, causal, padding mask, "
       "bias (CUDA, compute capability 9.0+)", gpu=True, backward=False, smoke=False),
))

# Tensor uids of the graphs (the variant pack's keys).
UID = {n: i for i, n in enumerate(
    ("q", "k", "v", "o", "stats", "bias", "seq_q", "seq_kv", "off_q", "off_k", "off_v", "off_o", "seed", "offset",
     "rng_dump", "table_k", "table_v", "sink", "dq", "dk", "dv", "do", "dbias",
     # sdpa_fp8's scalars and amax outputs
     "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o", "amax_s", "amax_o"))}
FP8_SCALARS = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
# scale_s of sdpa_fp8: P in [0, 1] times it, rounded to the format: a power of two (exact
# descale_s = 1 / scale_s) half the format's largest one, as cuDNN's FP8 tests choose it for
# an amax of 1
FP8_S_SCALE = {"e4m3": 64.0, "e5m2": 16384.0}
# the kernel's running max may lag a row's by a rescale threshold of 4 (2^4), the numerators
# exp(s - m) then up to 2^4 and scaled by scale_s 2^-4 before their rounding (the frontend's
# test reference, fp8_ref.py, by default): the scale declared in fp8_probs is that smaller one,
# whose bound holds with or without the lag
FP8_P_LAG = 16.0
# the format's largest power of two (e4m3: 448 = 1.75 * 2^8, e5m2: 57344 = 1.75 * 2^15)
FP8_PO2 = {"e4m3": 256.0, "e5m2": 32768.0}


# ---------------------------------------------------------------------------------------
# The model code: cudnn, torch, numpy only (repro_snippet copies it).
# ---------------------------------------------------------------------------------------

def band(case):
    """(alignment, left_bound, right_bound, padding) of cuDNN's SDPA for a case's structural
    masks: alignment "top_left" or "bottom_right", the bounds None or ints (keys
    [d - left_bound + 1, d + right_bound] attend), padding whether the padding mask is used
    (key padding, or a serving case's per-row lengths). Raises NotImplementedError ("not
    expressible") for a diagonal cuDNN cannot place."""
    left, right = case.window
    serving_rows = case.thd or case.paged
    padding = case.key_padding is not None or serving_rows
    R = None
    if case.causal:
        R = 0
    if right >= 0:
        R = right if R is None else min(R, right)
    L = left + 1 if left >= 0 else None
    if R is None and L is None:
        return "top_left", None, None, padding
    d = case.diagonal
    if serving_rows and d in ("bottom_right", "bottom_right_valid"):
        return "bottom_right", L, R, True            # per row: seq_len_kv[b] - seq_len_q[b]
    if d == "bottom_right_valid" and case.key_padding is not None:
        return "bottom_right", L, R, True            # valid keys - Sq, as cuDNN aligns padded rows
    if d in ("bottom_right", "bottom_right_valid"):
        if case.key_padding is None:
            return "bottom_right", L, R, padding
        o = case.kv_len - case.q_len                 # the padded batch's corner: fixed by the shapes
    elif d == "explicit":
        o = case.diagonal_offset
    else:
        o = 0
    if serving_rows and o != 0:
        raise NotImplementedError("cudnn: an explicit diagonal offset in a serving case is not expressible")
    return "top_left", (None if L is None else L - o), (None if R is None else R + o), padding


def cudnn_alibi_ok(case):
    """cuDNN's use_alibi_mask has fixed geometric slopes and the one-sided form."""
    return (not case.alibi_symmetric and not case.alibi_random and case.alibi_mag_q4 == 0)


def io_type(cudnn, dtype):
    return {"f16": cudnn.data_type.HALF, "bf16": cudnn.data_type.BFLOAT16}[dtype]


def torch_dtype(dtype):
    import torch
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dtype]


def cudnn_inputs(case, q, k, v, mask, dev):
    """The device tensors of a case, as a graph takes them: q, k, v as logical
    [B, H, S, D] views (dense: the physical tensor made compact in its own layout, so BSHD,
    SBHD and packed QKV keep their interleaved strides; THD: [Tmax, H, D] buffers read
    through ragged offsets; paged: caches [P, H, page, D] as strided views of
    [P, page, H, D]), the bias [B', H', Sq, Sk], per-row lengths, offsets, tables."""
    import torch
    t = {}
    st = case.serving_tensors
    B = case.batch

    def compact(x, layout, heads, dim):
        y = to_bhsd(to_torch(x, dev).contiguous(), layout, heads, dim)
        return y if y.stride(-1) == 1 else y.contiguous()

    def thd(x, cu, heads, dim):
        x = to_torch(x, dev).contiguous()
        rows = int(cu[-1])
        buf = torch.zeros((rows + 64, heads, dim), dtype=x.dtype, device=dev)  # slack for tile reads
        buf[:rows] = x[:rows]
        return buf
    if case.packed:
        qkv = to_torch(case.qkv, dev).contiguous()
        t["q"], t["k"], t["v"] = (x if x.stride(-1) == 1 else x.contiguous()   # channels_first: D strided
                                  for x in unpack_qkv(qkv, case.layout, case.q_heads, case.head_dim))
    else:
        if case.thd:
            t["q"] = thd(q, st["cu_seqlens_q"], case.q_heads, case.head_dim)
        else:
            t["q"] = compact(q, case.layouts["q"], case.q_heads, case.head_dim)
        if case.paged:
            for n, d in (("k", case.head_dim), ("v", case.v_head_dim)):
                c = to_torch(k if n == "k" else v, dev).contiguous()         # [P, page, H, D]
                t[n] = c.transpose(1, 2)                                     # [P, H, page, D] view
            tab = torch.from_numpy(np.ascontiguousarray(st["block_table"], dtype=np.int32)).to(dev)
            t["table_k"] = t["table_v"] = tab.reshape(B, 1, -1, 1)
        elif case.thd:
            t["k"] = thd(k, st["cu_seqlens_k"], case.kv_heads, case.head_dim)
            t["v"] = thd(v, st["cu_seqlens_k"], case.kv_heads, case.v_head_dim)
        else:
            t["k"] = compact(k, case.layouts["k"], case.kv_heads, case.head_dim)
            t["v"] = compact(v, case.layouts["v"], case.kv_heads, case.v_head_dim)
    if mask is not None:
        m = to_torch(mask, dev)
        if m.dim() == 2:
            m = m.reshape(1, 1, *m.shape)
        # stride-0 dims of size > 1 expanded; size-1 broadcast dims kept
        t["bias"] = m.to(torch_dtype(case.dtype)).contiguous()
    seq_q = [case.seg_q(b) for b in range(B)]
    seq_kv = list(case.valid_keys) if not (case.thd or case.paged) else [case.seg_k(b) for b in range(B)]
    t["seq_q"] = torch.tensor(seq_q, dtype=torch.int32, device=dev).reshape(B, 1, 1, 1)
    t["seq_kv"] = torch.tensor(seq_kv, dtype=torch.int32, device=dev).reshape(B, 1, 1, 1)
    if case.thd:
        cq = np.asarray(serving.cu_seqlens(seq_q), dtype=np.int64)
        ck = np.asarray(serving.cu_seqlens(seq_kv), dtype=np.int64)
        for n, cu, h, d in (("off_q", cq, case.q_heads, case.head_dim), ("off_o", cq, case.q_heads, case.v_head_dim),
                            ("off_k", ck, case.kv_heads, case.head_dim), ("off_v", ck, case.kv_heads, case.v_head_dim),
                            ):
            t[n] = torch.from_numpy(cu * h * d).to(dev).reshape(B + 1, 1, 1, 1)
    if case.sinks is not None:
        t["sink"] = torch.from_numpy(np.asarray(case.sinks, dtype=np.float32)).to(dev).reshape(1, case.q_heads, 1, 1)
    if case.dropout_p > 0:
        t["seed"] = torch.full((1, 1, 1, 1), int(case.dropout_seed) & 0x7FFFFFFF, dtype=torch.int64, device=dev)
        t["offset"] = torch.zeros((1, 1, 1, 1), dtype=torch.int64, device=dev)
        t["rng_dump"] = torch.zeros((B, case.q_heads, case.q_len, case.kv_len), dtype=torch.float32, device=dev)
    return t


def logical(case, t, name):
    """(dims, strides) of a graph tensor: q, k, v as the tensors hold them (THD: the logical
    [B, H, S, D] with [S H D] strides, read from ragged offsets); o, dO and the gradients
    [B, H, S, D] compact (THD o like q); anything else as its tensor is."""
    B, Hq, Hk, Sq, Sk, D, Dv = (case.batch, case.q_heads, case.kv_heads, case.q_len, case.kv_len, case.head_dim,
                                case.v_head_dim)
    if name in ("q", "o") and case.thd:
        d = D if name == "q" else Dv
        return (B, Hq, Sq, d), (Sq * Hq * d, d, Hq * d, 1)
    if name in ("k", "v") and case.thd and not case.paged:
        d = D if name == "k" else Dv
        return (B, Hk, Sk, d), (Sk * Hk * d, d, Hk * d, 1)
    dense = {"o": (B, Hq, Sq, Dv), "do": (B, Hq, Sq, Dv), "dq": (B, Hq, Sq, D), "dk": (B, Hk, Sk, D),
             "dv": (B, Hk, Sk, Dv), "stats": (B, Hq, Sq, 1)}
    if name in dense:
        return dense[name], contiguous_strides(dense[name])
    x = t["bias" if name == "dbias" else name]
    return tuple(x.shape), tuple(x.stride())


def contiguous_strides(dims):
    out, acc = [], 1
    for n in reversed(dims):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def finish(cudnn, graph):
    """validate, lower, pick plans (heuristics A, then FALLBACK), check support, build."""
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()


def build_graph(cudnn, handle, case, t, spec, stats=False):
    """The built graphs of the case's structure, spec = band(case): {"fwd": the forward
    graph, "g": its tensors by name, "bwd": the backward graph (dQ, dK, dV, dBias from the
    forward's softmax stats) of a backward case or None, "b": its tensors}. stats: the
    forward graph outputs its softmax statistics (generate_stats) in a forward case too."""
    align, L, R, padding = spec
    dt = io_type(cudnn, case.dtype)
    I32, I64, F32 = cudnn.data_type.INT32, cudnn.data_type.INT64, cudnn.data_type.FLOAT

    def new_graph():
        return cudnn.pygraph(io_data_type=dt, intermediate_data_type=F32, compute_data_type=F32, handle=handle)

    def tensor(graph, name, dtype=None):
        dims, strides = logical(case, t, name)
        return graph.tensor(uid=UID[name], dim=list(dims), stride=list(strides), data_type=dtype or dt)
    fwd, g = new_graph(), {}
    for n in ("q", "k", "v"):
        g[n] = tensor(fwd, n)
    if case.thd:
        for n in ("off_q", "off_k", "off_v", "off_o"):
            g[n] = tensor(fwd, n, I64)
        g["q"].set_ragged_offset(g["off_q"])
        if not case.paged:
            g["k"].set_ragged_offset(g["off_k"])
            g["v"].set_ragged_offset(g["off_v"])
        else:
            del g["off_k"], g["off_v"]
    # the mask arguments both graphs take, by name; the forward's own after them
    shared = {}
    if padding:
        shared.update(use_padding_mask=True, seq_len_q=("seq_q", I32), seq_len_kv=("seq_kv", I32))
    if "bias" in t:
        shared["bias"] = ("bias", None)
    if "sink" in t:
        shared["sink_token"] = ("sink", F32)
    if case.alibi_slopes is not None:
        shared["use_alibi_mask"] = True
    if L is not None or R is not None:
        if L is None and R == 0:
            shared["use_causal_mask" if align == "top_left" else "use_causal_mask_bottom_right"] = True
        else:
            shared["diagonal_alignment"] = (cudnn.diagonal_alignment.TOP_LEFT if align == "top_left"
                                            else cudnn.diagonal_alignment.BOTTOM_RIGHT)
            if L is not None:
                shared["diagonal_band_left_bound"] = int(L)
            if R is not None:
                shared["diagonal_band_right_bound"] = int(R)

    def args(graph, into):
        kw = {}
        for key, val in shared.items():
            if isinstance(val, tuple):
                into[val[0]] = tensor(graph, val[0], val[1])
                kw[key] = into[val[0]]
            else:
                kw[key] = val
        if case.dropout_p > 0:
            into["seed"], into["offset"] = tensor(graph, "seed", I64), tensor(graph, "offset", I64)
            kw["dropout"] = (float(case.dropout_p), into["seed"], into["offset"])
        return kw
    kw = args(fwd, g)
    if case.paged:
        g["table_k"], g["table_v"] = tensor(fwd, "table_k", I32), tensor(fwd, "table_v", I32)
        kw.update(paged_attention_k_table=g["table_k"], paged_attention_v_table=g["table_v"],
                  paged_attention_max_seq_len_kv=case.kv_len)
    if case.dropout_p > 0:
        g["rng_dump"] = tensor(fwd, "rng_dump", F32)
        kw["rng_dump"] = g["rng_dump"]
    train = bool(case.grads)
    o, st = fwd.sdpa(name="sdpa", q=g["q"], k=g["k"], v=g["v"], attn_scale=float(case.scale),
                     generate_stats=train or bool(stats), **kw)
    dims, strides = logical(case, t, "o")
    o.set_uid(UID["o"]).set_output(True).set_dim(list(dims)).set_stride(list(strides))
    if case.thd:
        o.set_ragged_offset(g["off_o"])
    g["o"] = o
    if train or stats:
        # the softmax statistics: per query row the natural-log log-sum-exp of its scaled,
        # masked scores, f32 [B, H, Sq, 1]
        dims, strides = logical(case, t, "stats")
        st.set_uid(UID["stats"]).set_output(True).set_data_type(F32).set_dim(list(dims)).set_stride(list(strides))
        g["stats"] = st
    finish(cudnn, fwd)
    if not train:
        return {"fwd": fwd, "g": g, "bwd": None, "b": None}
    bwd, b = new_graph(), {}
    for n in ("q", "k", "v", "o", "do"):
        b[n] = tensor(bwd, n)
    b["stats"] = tensor(bwd, "stats", F32)
    bk = args(bwd, b)
    if "dmask" in case.grads:
        b["dbias"] = tensor(bwd, "dbias")
        bk["dBias"] = b["dbias"]
    grads = bwd.sdpa_backward(name="sdpa_backward", q=b["q"], k=b["k"], v=b["v"], o=b["o"], dO=b["do"],
                              stats=b["stats"], attn_scale=float(case.scale), **bk)
    for n, x in zip(("dq", "dk", "dv"), grads):
        dims, strides = logical(case, t, n)
        x.set_uid(UID[n]).set_output(True).set_dim(list(dims)).set_stride(list(strides))
        b[n] = x
    finish(cudnn, bwd)
    return {"fwd": fwd, "g": g, "bwd": bwd, "b": b}


def run_graph(handle, case, t, art, dev, guards=None):
    """Runs the built graphs on the case's tensors: (out [B, Hq, Sq, Dv] or THD [Tq, Hq, Dv],
    its layout, {gradient: tensor} of a backward case, the dropout keep mask or None, the
    forward's softmax statistics [B, Hq, Sq] f32 where the graph outputs them, else None).
    With a list guards, the dense output and the gradients dq, dk, dv are allocated inside
    guard bands (attnfuzz.guard), whose guards are appended to it."""
    import torch
    B, Hq, Sq, Dv = case.batch, case.q_heads, case.q_len, case.v_head_dim
    dt = torch_dtype(case.dtype)
    made = {}

    def zeros(name, shape):
        if guards is None:
            return torch.zeros(shape, dtype=dt, device=dev)
        guards.append(guard.torch_out(shape, dt, dev, name="out" if name == "o" else name))
        return guards[-1].inner

    if case.thd:
        rows = int(serving.cu_seqlens([case.seg_q(b) for b in range(B)])[-1])
        made["o"] = torch.zeros((rows + 64, Hq, Dv), dtype=dt, device=dev)
    else:
        made["o"] = zeros("o", (B, Hq, Sq, Dv))
    if "stats" in art["g"]:
        # NaN: a row the graph leaves unwritten shows
        made["stats"] = torch.full((B, Hq, Sq, 1), float("nan"), dtype=torch.float32, device=dev)
    if art["bwd"] is not None:
        made["do"] = to_bhsd(to_torch(case.dout, dev), case.out_layout, Hq, Dv).to(dt).contiguous()
        for n in ("dq", "dk", "dv"):
            made[n] = zeros(n, logical(case, t, n)[0])
        if "dmask" in case.grads:
            made["dbias"] = torch.zeros(tuple(t["bias"].shape), dtype=dt, device=dev)
    for graph, names in ((art["fwd"], art["g"]), (art["bwd"], art["b"])):
        if graph is None:
            continue
        pack = {UID[n]: (made[n] if n in made else t[n]) for n in names}
        ws = torch.empty(max(1, graph.get_workspace_size()), dtype=torch.uint8, device=dev)
        graph.execute(pack, ws, handle=handle)
    torch.cuda.synchronize()
    grads = {n: made["dbias" if n == "dmask" else n] for n in case.grads}
    keep = (t["rng_dump"] != 0) if "rng_dump" in t else None
    stats = made["stats"][..., 0] if "stats" in made else None
    if case.thd:
        return made["o"][:rows], "thd", grads, keep, stats
    return made["o"], "bhsd", grads, keep, stats


def cudnn_attention(case, q, k, v, mask, dev, handle):
    """One case through cuDNN's SDPA graphs, built for it: (out, layout, grads, keep, stats)."""
    import cudnn
    import torch
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    t = cudnn_inputs(case, q, k, v, mask, dev)
    spec = band(case)
    art = build_graph(cudnn, handle, case, t, spec)
    return run_graph(handle, case, t, art, dev)


def fp8_o_here(torch):
    """Whether sdpa_fp8's O is built in the FP8 format on this GPU: on Hopper (compute
    capability 9.x; cuDNN's own FP8 tests run an f16 O on Blackwell only), declared as
    conventions fp8_out "v_amax"; elsewhere O is in the case dtype."""
    return torch.cuda.get_device_capability()[0] == 9


def fp8_type(cudnn, fmt):
    return {"e4m3": cudnn.data_type.FP8_E4M3, "e5m2": cudnn.data_type.FP8_E5M2}[fmt]


def torch_fp8(fmt):
    import torch
    return {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]


def fp8_inputs(case, q, k, v, mask, dev):
    """cudnn_inputs of an FP8 case: q, k, v (ml_dtypes float8 arrays of the stored values,
    unpacked layouts) moved as their bits and viewed as torch float8 [B, H, S, D]; the bias
    in the case dtype; the padding mask's lengths."""
    t = cudnn_inputs(case, *(np.asarray(x).view(np.uint8) for x in (q, k, v)), mask, dev)
    for n in ("q", "k", "v"):
        t[n] = t[n].view(torch_fp8(case.fp8))
    return t


def fp8_scales(case, v, o_fp8):
    """{name: float} of sdpa_fp8's scalars: the case's descales of q, k, v; scale_s and its
    inverse descale_s (FP8_S_SCALE, powers of two); scale_o 1 for an f16/bf16 O, else the
    power of two that puts the largest |V| (a bound on |O|) at half the format's largest
    power of two (the output is then O / scale_o exactly)."""
    s = FP8_S_SCALE[case.fp8]
    out = {"descale_q": case.descale["q"], "descale_k": case.descale["k"], "descale_v": case.descale["v"],
           "descale_s": 1.0 / s, "scale_s": s, "scale_o": 1.0}
    if o_fp8:
        vv = np.asarray(v).astype(np.float64)        # the stored values (ml_dtypes float8)
        vv = vv[np.isfinite(vv)]
        amax = float(np.abs(vv).max()) * case.descale["v"] if vv.size else 0.0
        out["scale_o"] = 2.0 ** math.floor(math.log2(FP8_PO2[case.fp8] / 2 / amax)) if amax > 0 else 1.0
    return out


def build_fp8_graph(cudnn, handle, case, t, spec, o_fp8=False, stats=False):
    """The built sdpa_fp8 graph of an FP8 case's structure (spec = band(case): causal top-left
    or bottom-right and the padding mask; a window or a moved diagonal raises
    NotImplementedError): {"fwd": the graph, "g": its tensors by name, "o_fp8": O in the
    FP8 format (else in the case dtype), "stats": whether it outputs the statistics}."""
    align, L, R, padding = spec
    if L is not None or R not in (None, 0):
        raise NotImplementedError("cudnn sdpa_fp8: windows and moved diagonals are not expressible here")
    it, F32, I32 = fp8_type(cudnn, case.fp8), cudnn.data_type.FLOAT, cudnn.data_type.INT32
    g = cudnn.pygraph(io_data_type=it, intermediate_data_type=F32, compute_data_type=F32, handle=handle)
    gt = {}

    def tensor(name, dtype):
        dims, strides = logical(case, t, name)
        return g.tensor(uid=UID[name], dim=list(dims), stride=list(strides), data_type=dtype)
    for n in ("q", "k", "v"):
        gt[n] = tensor(n, it)
    for n in FP8_SCALARS:
        gt[n] = g.tensor(uid=UID[n], dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=F32)
    kw = {}
    if padding:
        gt["seq_q"], gt["seq_kv"] = tensor("seq_q", I32), tensor("seq_kv", I32)
        kw.update(use_padding_mask=True, seq_len_q=gt["seq_q"], seq_len_kv=gt["seq_kv"])
    if "bias" in t:
        gt["bias"] = tensor("bias", io_type(cudnn, case.dtype))
        kw["bias"] = gt["bias"]
    if R == 0:
        kw["use_causal_mask" if align == "top_left" else "use_causal_mask_bottom_right"] = True
    o, st, amax_s, amax_o = g.sdpa_fp8(q=gt["q"], k=gt["k"], v=gt["v"], descale_q=gt["descale_q"],
                                       descale_k=gt["descale_k"], descale_v=gt["descale_v"],
                                       descale_s=gt["descale_s"], scale_s=gt["scale_s"], scale_o=gt["scale_o"],
                                       attn_scale=float(case.scale), generate_stats=bool(stats), name="sdpa_fp8",
                                       **kw)
    dims, strides = logical(case, t, "o")
    o.set_uid(UID["o"]).set_output(True).set_dim(list(dims)).set_stride(list(strides)).set_data_type(
        it if o_fp8 else io_type(cudnn, case.dtype))
    gt["o"] = o
    for n, x in (("amax_s", amax_s), ("amax_o", amax_o)):
        x.set_uid(UID[n]).set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(F32)
        gt[n] = x
    if stats:
        dims, strides = logical(case, t, "stats")
        st.set_uid(UID["stats"]).set_output(True).set_data_type(F32).set_dim(list(dims)).set_stride(list(strides))
        gt["stats"] = st
    finish(cudnn, g)
    return {"fwd": g, "g": gt, "o_fp8": bool(o_fp8), "stats": bool(stats)}


def run_fp8_graph(handle, case, t, art, v, dev):
    """Runs a built sdpa_fp8 graph: (out [B, Hq, Sq, Dv] in the case dtype (an FP8 O divided by
    scale_o, exact), the statistics [B, Hq, Sq] f32 or None, amax_s, amax_o: floats)."""
    import torch
    B, Hq, Sq, Dv = case.batch, case.q_heads, case.q_len, case.v_head_dim
    dt = torch_dtype(case.dtype)
    sc = fp8_scales(case, v, art["o_fp8"])
    made = {n: torch.full((1, 1, 1, 1), float(x), dtype=torch.float32, device=dev) for n, x in sc.items()}
    made["o"] = (torch.zeros((B, Hq, Sq, Dv), dtype=torch.uint8, device=dev).view(torch_fp8(case.fp8))
                 if art["o_fp8"] else torch.full((B, Hq, Sq, Dv), float("nan"), dtype=dt, device=dev))
    for n in ("amax_s", "amax_o"):
        made[n] = torch.full((1, 1, 1, 1), float("nan"), dtype=torch.float32, device=dev)
    if art["stats"]:
        made["stats"] = torch.full((B, Hq, Sq, 1), float("nan"), dtype=torch.float32, device=dev)
    graph = art["fwd"]
    pack = {UID[n]: (made[n] if n in made else t[n]) for n in art["g"]}
    ws = torch.empty(max(1, graph.get_workspace_size()), dtype=torch.uint8, device=dev)
    graph.execute(pack, ws, handle=handle)
    if made["o"].is_cuda:
        torch.cuda.synchronize()
    out = made["o"]
    if art["o_fp8"]:
        out = (out.float() / sc["scale_o"]).to(dt)
    stats = made["stats"][..., 0] if art["stats"] else None
    return out, stats, float(made["amax_s"].item()), float(made["amax_o"].item())


def cudnn_fp8_attention(case, q, k, v, mask, dev, handle, o_fp8=None):
    """One FP8 case through cuDNN's sdpa_fp8 graph, built for it: (out [B, Hq, Sq, Dv],
    stats, amax_s, amax_o). o_fp8 None: O in the FP8 format on Hopper (fp8_o_here)."""
    import cudnn
    import torch
    if o_fp8 is None:
        o_fp8 = fp8_o_here(torch)
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    t = fp8_inputs(case, q, k, v, mask, dev)
    art = build_fp8_graph(cudnn, handle, case, t, band(case), o_fp8=o_fp8)
    return run_fp8_graph(handle, case, t, art, v, dev)


# ---------------------------------------------------------------------------------------
# The worker side.
# ---------------------------------------------------------------------------------------

class Target(_base.Target):
    STACK = STACK
    PLANS = True                # a graph built per structure: timed as compiling
    SCORE_BUDGET = False        # the fused kernel forms no [B, Hq, Sq, Sk] scores (dropout's
                                # keep mask aside: refuse() checks it)
    CACHE_SIZE = 256
    # cudnnGraphNotSupportedError's messages and the frontend's own refusals
    REFUSALS = ("NOT_SUPPORTED", "not supported", "Not supported", "virtually slice", "not expressible",
                "is not supported", "unsupported")

    def __init__(self, variant):
        import cudnn
        import torch
        self.cudnn, self.torch = cudnn, torch
        super().__init__(variant)
        torch.set_grad_enabled(False)
        self.handle = cudnn.create_handle()
        self._conv = None
        self._amax = []     # sdpa_fp8: (amax_o the graph returned, max |out|) per case run
        self._o_fp8 = variant == "sdpa_fp8" and fp8_o_here(torch)

    def libs(self):
        out = dict(super().libs(), **_common.torch_libs(self.torch, True))
        v = self.cudnn.backend_version()       # the cuDNN the frontend loaded (91900: 9.19.0)
        out["cudnn"] = "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
        return out

    def declare(self):
        if self.variant == "sdpa_fp8":
            return self._declare_fp8()
        caps = ["f16", "bf16", "gqa", "cross", "dv", "scale", "amask", "causal", "padding", "window", "strided"]
        if self.variant == "sdpa":
            # lse: the forward graph's softmax statistics (generate_stats), natural log
            caps += ["dropout", "lse"]
        # bf16 outputs of about 1e-38 (a subnormal V) come out 0: about 40 diverge bundles of a
        # 75 s H200 campaign (cuDNN 9.19), f16's subnormals kept (within rounding)
        conv = {"dropout": "keep_mask", "denormals": ["bf16"]}
        conv.update(self._measured())
        return {"caps": caps, "dtypes": ["f16", "bf16"], "conventions": conv,
                "limits": {"max_head_dim": 256, "head_dim_multiple": 8}}

    def _declare_fp8(self):
        """sdpa_fp8: FP8 cases of either format, their output f16 or bf16 (the case dtype;
        non-FP8 cases are refused), unpacked layouts, causal and the padding mask, a bias,
        the statistics. Its roundings as conventions: P's online-softmax numerator times
        scale_s in Q's FP8 format before P @ V (fp8_probs: FP8_S_SCALE / FP8_P_LAG, a running
        max that lags allowed), and on Hopper O times
        scale_o in it too (fp8_out "v_amax": fp8_scales' power of two from the largest |V|)."""
        # the probes run the f16 kernel, not the FP8 one; masked_values as the FP8 campaign on
        # an H200 measured it (2026-12-02, cuDNN 9.19: a NaN or Inf in the V row of a key the
        # causal mask or the padding hides reached the output in 3 of 2,536 cases, e4m3 and
        # e5m2 alike: P @ V over whole tiles, as the f16 kernel's probe finds)
        conv = {"fp8_probs": {f: s / FP8_P_LAG for f, s in FP8_S_SCALE.items()},
                "fp8_out": "v_amax" if self._o_fp8 else "dtype", "masked_values": "ieee"}
        return {"caps": ["f16", "bf16", "e4m3", "e5m2", "gqa", "cross", "scale", "amask", "causal", "padding",
                         "strided", "lse"],
                "dtypes": ["f16", "bf16"], "layouts": list(UNPACKED_LAYOUTS), "conventions": conv,
                "limits": {"max_head_dim": 256, "head_dim_multiple": 16}}

    def _measured(self):
        """Conventions measured on tiny graphs: does a NaN in the value row of a key the
        causal mask hides reach the output (P @ V over the whole tile)? What are the
        statistics of a row whose bias is -inf at every key (lse_masked_rows)?"""
        out = {}
        torch = self.torch
        try:
            q = torch.ones((1, 1, 2, 8), dtype=torch.float16, device="cuda")
            v = q.clone()
            v[0, 0, 1] = float("nan")
            o, _ = self._probe_graph(q, q, v, causal=True)
            if o is not None and bool(torch.isnan(o[0, 0, 0]).any()):
                out["masked_values"] = "ieee"
        except Exception:  # noqa: BLE001 - a probe only
            pass
        if self.variant == "sdpa":
            try:
                q = torch.ones((1, 1, 2, 8), dtype=torch.float16, device="cuda")
                bias = torch.zeros((1, 1, 2, 2), dtype=torch.float16, device="cuda")
                bias[0, 0, 0] = -float("inf")          # query row 0 attends to nothing
                _, st = self._probe_graph(q, q, q, bias=bias, stats=True)
                x = float(st[0, 0, 0, 0])
                name = ("nan" if x != x else "-inf" if x == -float("inf") else "inf" if x == float("inf")
                        else "zero" if x == 0 else None)
                if name is not None and name != "-inf":
                    out["lse_masked_rows"] = name
            except Exception:  # noqa: BLE001 - a probe only
                pass
        return out

    def _probe_graph(self, q, k, v, causal=False, bias=None, stats=False):
        """(out, stats [B, H, Sq, 1] f32 or None) of a tiny f16 graph."""
        cudnn, torch = self.cudnn, self.torch
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=self.handle)
        tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
        kw = {"use_causal_mask": True} if causal else {}
        pack = {tq: q, tk: k, tv: v}
        if bias is not None:
            tb = g.tensor_like(bias)
            kw["bias"] = tb
            pack[tb] = bias
        o, ts = g.sdpa(name="probe", q=tq, k=tk, v=tv, attn_scale=0.5, generate_stats=stats, **kw)
        o.set_output(True).set_dim(list(q.shape)).set_stride(list(q.stride()))
        out = torch.empty_like(q)
        pack[o] = out
        st = None
        if stats:
            st = torch.full((q.shape[0], q.shape[1], q.shape[2], 1), float("nan"), dtype=torch.float32, device="cuda")
            ts.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim(list(st.shape)).set_stride(
                list(st.stride()))
            pack[ts] = st
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8, device="cuda")
        g.execute(pack, ws, handle=self.handle)
        torch.cuda.synchronize()
        return out, st

    def refuse(self, case, mask, bool_mask):
        from attnfuzz.worker import Unsupported
        if (self.variant == "sdpa_fp8") != bool(case.fp8):
            raise Unsupported("cudnn: FP8 cases go to sdpa_fp8 only" if case.fp8 else "cudnn sdpa_fp8: FP8 cases only")
        if case.fp8_kv:
            raise Unsupported("cudnn sdpa_fp8: Q, K and V in one FP8 format (no FP8 KV-cache form)")
        if case.alibi_slopes is not None and not cudnn_alibi_ok(case):
            raise Unsupported("cudnn: use_alibi_mask has fixed geometric slopes, one-sided")
        if case.grads and mask is not None and (mask.shape[-2] != case.q_len or mask.shape[-1] != case.kv_len):
            # a bias broadcast over queries or keys: the backward graph builds and returns a
            # wrong dBias (and dQ for [B, 1, 1, Sk]): corpus/findings/cudnn/
            # sdpa_backward_broadcast_bias_wrong.py; cuDNN's dBias takes [1|B, 1|H, Sq, Sk]
            raise Unsupported("cudnn: the backward takes a bias of full [Sq, Sk] only (a broadcast one gives "
                              "wrong gradients)")
        if case.dropout_p > 0:
            _base.check_score_budget(case)      # rng_dump: the keep mask [B, Hq, Sq, Sk] in f32
        if case.dropout_p >= 1:
            # the frontend's own check: "Dropout probability cannot be 1 as corresponding
            # scale wont be well formed"
            raise Unsupported("cudnn: dropout probability 1")
        try:
            _, L, R, _ = band(case)
        except NotImplementedError as e:
            raise Unsupported(str(e)) from None
        if L is not None and L <= 0:
            # "Left bound (Sliding window length) should be greater than zero when set": a
            # window's left side above the top-left diagonal (an explicit positive offset)
            raise Unsupported("cudnn: the band's left bound must be > 0")
        if self.variant == "sdpa_fp8" and (L is not None or R not in (None, 0)):
            raise Unsupported("cudnn sdpa_fp8: causal (top-left or bottom-right) only, no window or moved diagonal")
        if R is not None and R < 0:
            # "Right bound needs to be larger than or equal to zero": a diagonal below the
            # top-left one (an explicit negative offset, a bottom-right one of a padded batch
            # with Sq > Sk)
            raise Unsupported("cudnn: the band's right bound must be >= 0")

    def _stats(self, req):
        """Does the run want the forward graph's softmax statistics (cap lse: the sdpa and
        sdpa_fp8 variants' dense forward cases)?"""
        return bool(req.want_lse) and self.variant in ("sdpa", "sdpa_fp8") and not req.case.grads

    def structure(self, req):
        from attnfuzz.request import old_form
        case, _, _, _, mask, bool_mask = old_form(req)
        return (_base.dense_structure(case, mask, bool_mask), band(case), case.key("serving") if
                (case.thd or case.paged) else None, tuple(sorted(case.forms)), case.alibi_symmetric,
                self._stats(req))

    def build(self, req):
        from attnfuzz.request import old_form
        case, q, k, v, mask, _ = old_form(req)
        self.cudnn.set_stream(handle=self.handle, stream=self.torch.cuda.current_stream().cuda_stream)
        if self.variant == "sdpa_fp8":
            return self._build_fp8(case, fp8_inputs(case, q, k, v, mask, "cuda"), self._stats(req))
        t = cudnn_inputs(case, q, k, v, mask, "cuda")
        if self._stats(req):
            try:
                return build_graph(self.cudnn, self.handle, case, t, band(case), stats=True)
            except Exception as e:  # noqa: BLE001 - a graph refused with its statistics runs without them
                if not self.refusal(e):
                    raise
        return build_graph(self.cudnn, self.handle, case, t, band(case))

    def _build_fp8(self, case, t, stats):
        """The sdpa_fp8 graph: O in the FP8 format on Hopper, else in the case dtype (the
        declared fp8_out: fp8_o_here; a graph cuDNN refuses with it is unsupported); with the
        statistics when asked and built, else without."""
        last = None
        for st in ((True, False) if stats else (False,)):
            try:
                return build_fp8_graph(self.cudnn, self.handle, case, t, band(case), o_fp8=self._o_fp8, stats=st)
            except NotImplementedError:
                raise
            except Exception as e:  # noqa: BLE001 - a refused combination: the next one
                if not self.refusal(e):
                    raise
                last = e
        raise last

    def self_check(self):
        """[(ok, message)]: sdpa_fp8's amax_o output (the largest |O| the graph saw) agrees with
        the largest |out| it returned, within 10% (cuDNN's own test's tolerance)."""
        if self.variant != "sdpa_fp8" or not self._amax:
            return []
        bad = [(a, m) for a, m in self._amax if not (abs(a - m) <= 0.1 * max(abs(m), 1e-30) + 1e-6)]
        return [(not bad, "amax_o against max |out| over %d cases%s" % (len(self._amax), (
            ": %d off, e.g. amax_o %r, max |out| %r" % (len(bad), bad[0][0], bad[0][1])) if bad else ""))]

    def execute(self, art, req):
        from attnfuzz.request import old_form
        from attnfuzz.worker import Result
        case, q, k, v, mask, _ = old_form(req)
        if self.variant == "sdpa_fp8":
            t = fp8_inputs(case, q, k, v, mask, "cuda")
            out, stats, _, amax_o = run_fp8_graph(self.handle, case, t, art, v, "cuda")
            o = out.float()
            fin = o[self.torch.isfinite(o)]
            if fin.numel():
                self._amax.append((amax_o, float(fin.abs().max())))
            return Result(to_numpy(out), layout="bhsd",
                          lse=stats.cpu().numpy() if (stats is not None and self._stats(req)) else None)
        t = cudnn_inputs(case, q, k, v, mask, "cuda")
        guards = []
        out, lay, grads, keep, stats = run_graph(self.handle, case, t, art, "cuda", guards)
        res = Result(to_numpy(out), layout=lay,
                     grads={n: to_numpy(x).reshape(mask.shape) if n == "dmask" else to_numpy(x)
                            for n, x in grads.items()} or None, guard_writes=guard.writes(*guards),
                     lse=stats.cpu().numpy() if (stats is not None and self._stats(req)) else None)
        if keep is not None:
            res.dropout_keep = keep.cpu().numpy()
        return res

    def refusal(self, exc):
        if type(exc).__name__ in ("cudnnGraphNotSupportedError",):
            return "cudnn: %s" % str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "cudnn: not supported"
        return super().refusal(exc)

    def fatal(self, exc):
        return "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError"


def repro_snippet(variant):
    if variant == "sdpa_fp8":
        call = ("    out, _, _, _ = cudnn_fp8_attention(case, q, k, v, mask, \"cuda\", handle)\n"
                "    return to_numpy(out)")
    else:
        call = ("    out, lay, _, _, _ = cudnn_attention(case, q, k, v, mask, \"cuda\", handle)\n"
                "    out = to_numpy(out)\n"
                "    return serving.padded_out(case, out, \"thd\") if lay == \"thd\" else out")
    return _common.snippet(
        ["import torch", "import cudnn"],
        _torch_layouts.FUNCTIONS + (band, cudnn_alibi_ok, io_type, torch_dtype, cudnn_inputs, logical,
                                    contiguous_strides, finish, build_graph, run_graph, cudnn_attention,
                                    fp8_o_here, fp8_type, torch_fp8, fp8_inputs, fp8_scales, build_fp8_graph, run_fp8_graph,
                                    cudnn_fp8_attention),
        consts={"UID": UID, "FP8_SCALARS": FP8_SCALARS, "FP8_S_SCALE": FP8_S_SCALE, "FP8_PO2": FP8_PO2},
        namespaces={"serving": [serving.cu_seqlens, serving.seg_q, serving.padded_out]},
        tail=f'''

def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """cudnn/{variant}: q, k, v as the worker kit hands them (THD or page caches for a serving
    case, its tables on case.serving_tensors; an FP8 case's as ml_dtypes float8 arrays).
    Returns the output as [B, Hq, Sq, Dv]."""
    handle = cudnn.create_handle()
{call}
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK, Target))
