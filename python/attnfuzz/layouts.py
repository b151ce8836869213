"""The physical layouts of docs/design.md section 3 as views of canonical [B, H, S, D].

Per tensor (q, k or v alone; packed layouts arrive as three per-tensor views of one
buffer, docs/worker-protocol.md):

| layout                          | physical shape | canonical index [b, h, s, d] |
| bhsd                            | [B, H, S, D]   | x[b, h, s, d]                |
| bshd, qkv_bs3hd, qkv_bsh3d      | [B, S, H, D]   | x[b, s, h, d]                |
| sbhd                            | [S, B, H, D]   | x[s, b, h, d]                |
| bsd                             | [B, S, H*D]    | x[b, s, h*D + d]             |
| channels_first, qkv_channels_first | [B, H*D, S] | x[b, h*D + d, s]             |

to_bhsd never copies: splitting one axis in two is always a view, whatever its stride.

The physical tensors attnfuzz sends (physical_inputs, strided_empty) follow the C
library's stride rule (src/core/layout.c, af_strides_for): a tensor spec's perm is a
Lehmer code giving the memory order of the layout's dims (0 = row major), pad adds
elements after each innermost row (the padding holds NaN), broadcast makes the batch or
heads dim stride 0.

This module imports numpy and math only: repro scripts copy its source (attnfuzz.repro)."""

import math

import numpy as np

UNPACKED = ("bhsd", "bshd", "sbhd", "bsd", "channels_first")
PACKED = ("qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first")
ALL = UNPACKED + PACKED

# packed layouts: the per-tensor view has the shape of this unpacked layout
PER_TENSOR = {"qkv_bs3hd": "bshd", "qkv_bsh3d": "bshd", "qkv_channels_first": "channels_first"}

# The output layout of a model whose Q comes in layout L: a packed QKV model returns its
# output unpacked in the same family.
OUT_LAYOUT = {"bhsd": "bhsd", "bshd": "bshd", "sbhd": "sbhd", "bsd": "bsd", "channels_first": "channels_first",
              "qkv_bs3hd": "bshd", "qkv_bsh3d": "bshd", "qkv_channels_first": "channels_first"}


def to_bhsd(x, layout, heads, head_dim):
    """Canonical [B, H, S, D] view of one physical tensor x in layout (a packed layout's
    name stands for its per-tensor view). heads and head_dim split the folded channel
    axis of bsd and channels_first."""
    layout = PER_TENSOR.get(layout, layout)
    if layout == "bhsd":
        return x
    if layout == "bshd":
        return x.transpose(0, 2, 1, 3)
    if layout == "sbhd":
        return x.transpose(1, 2, 0, 3)
    if layout == "bsd":
        B, S, C = x.shape
        if C != heads * head_dim:
            raise ValueError("layout bsd: %d channels, not %d heads x %d" % (C, heads, head_dim))
        return x.reshape(B, S, heads, head_dim).transpose(0, 2, 1, 3)
    if layout == "channels_first":
        B, C, S = x.shape
        if C != heads * head_dim:
            raise ValueError("layout channels_first: %d channels, not %d heads x %d" % (C, heads, head_dim))
        return x.reshape(B, heads, head_dim, S).transpose(0, 1, 3, 2)
    raise ValueError("unknown layout %r" % layout)


def out_shape(layout, B, H, S, Dv):
    """The output's physical shape in an unpacked layout."""
    if layout == "bhsd":
        return (B, H, S, Dv)
    if layout == "bshd":
        return (B, S, H, Dv)
    if layout == "sbhd":
        return (S, B, H, Dv)
    if layout == "bsd":
        return (B, S, H * Dv)
    if layout == "channels_first":
        return (B, H * Dv, S)
    raise ValueError("output layout %r is not one of %s" % (layout, ", ".join(UNPACKED)))


def from_bhsd(x, layout):
    """The physical array of an output [B, H, S, Dv] in an unpacked layout (a view where
    the layout is a permutation, a copy for the folded ones)."""
    if layout == "bhsd":
        return x
    if layout == "bshd":
        return x.transpose(0, 2, 1, 3)
    if layout == "sbhd":
        return x.transpose(2, 0, 1, 3)
    B, H, S, Dv = x.shape
    if layout == "bsd":
        return x.transpose(0, 2, 1, 3).reshape(B, S, H * Dv)
    if layout == "channels_first":
        return x.transpose(0, 1, 3, 2).reshape(B, H * Dv, S)
    raise ValueError("output layout %r is not one of %s" % (layout, ", ".join(UNPACKED)))


def case_inputs_bhsd(case, q, k, v):
    """q, k, v (physical views of a run request) as canonical views [B, Hq, Sq, D],
    [B, Hkv, Sk, D], [B, Hkv, Sk, Dv]."""
    lay = case.layouts
    return (to_bhsd(q, lay["q"], case.q_heads, case.head_dim),
            to_bhsd(k, lay["k"], case.kv_heads, case.head_dim),
            to_bhsd(v, lay["v"], case.kv_heads, case.v_head_dim))


def as_float64(x):
    """x as float64 (bf16 and f16 values are exact)."""
    return np.asarray(x, dtype=np.float64)


# --- physical tensors as attnfuzz sends them ---------------------------------------------

def physical_shape(layout, B, H, S, D):
    """The physical shape of one tensor (packed layouts: the whole buffer)."""
    if layout == "qkv_bs3hd":
        return (B, S, 3, H, D)
    if layout == "qkv_bsh3d":
        return (B, S, H, 3, D)
    if layout == "qkv_channels_first":
        return (B, 3 * H * D, S)
    return out_shape(layout, B, H, S, D)


def batch_head_dims(layout):
    """(index of the batch dim, index of the heads dim or -1 when folded) in the physical
    shape."""
    return {"bhsd": (0, 1), "bshd": (0, 2), "sbhd": (1, 2), "bsd": (0, -1), "channels_first": (0, -1),
            "qkv_bs3hd": (0, 3), "qkv_bsh3d": (0, 2), "qkv_channels_first": (0, -1)}[layout]


def lehmer_order(perm, ndim):
    """Memory order of the dims (outermost first) for Lehmer code perm (0 = row major)."""
    avail = list(range(ndim))
    order = []
    perm %= math.factorial(ndim)
    for pos in range(ndim):
        f = math.factorial(ndim - 1 - pos)
        idx, perm = divmod(perm, f)
        order.append(avail.pop(idx))
    return order


def strided_empty(shape, dtype, perm=0, pad=0, bcast_dims=(), fill=np.nan):
    """An array of shape whose strides follow (perm, pad, broadcast dims), over a fresh
    buffer filled with fill (the padding keeps it)."""
    dt = np.dtype(dtype)
    order = lehmer_order(perm, len(shape))
    strides = [0] * len(shape)
    stride = dt.itemsize
    innermost = True
    for d in reversed(order):
        if d in bcast_dims:
            strides[d] = 0
            continue
        strides[d] = stride
        stride *= shape[d] + (pad if innermost else 0)
        innermost = False
    span = dt.itemsize + sum((n - 1) * s for n, s in zip(shape, strides))
    buf = np.full(span // dt.itemsize + 1, fill, dtype=dt)
    return np.ndarray(tuple(shape), dt, buffer=buf, offset=0, strides=tuple(strides))


def broadcast_dims(layout, broadcast):
    """The physical dims a tensor spec's broadcast ("none", "batch", "heads") makes stride 0."""
    bd, hd = batch_head_dims(layout)
    if broadcast == "batch" and bd >= 0:
        return (bd,)
    if broadcast == "heads" and hd >= 0:
        return (hd,)
    return ()


def packed_views(qkv, layout, heads, head_dim):
    """The q, k, v per-tensor views (physical, PER_TENSOR[layout]'s shape) of a packed
    buffer: [B, S, 3, H, D], [B, S, H, 3, D] or [B, 3*H*D, S]."""
    if layout == "qkv_bs3hd":
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if layout == "qkv_bsh3d":
        return qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
    if layout == "qkv_channels_first":
        c = heads * head_dim
        return qkv[:, :c, :], qkv[:, c:2 * c, :], qkv[:, 2 * c:, :]
    raise ValueError("packed_views: %r is not a packed layout" % (layout,))


def grads_bhsd(case, grads):
    """Canonical [B, H, S, D] gradients from gradients of the physical inputs as a dense
    framework returns them: {"q", "k", "v"} or {"qkv"} (the packed buffer's), plus any
    other entry (e.g. "mask") passed through. Returns {"dq", "dk", "dv", ...}."""
    s = case.specs
    if "qkv" in grads:
        views = packed_views(grads["qkv"], case.layout, case.q_heads, case.head_dim)
    else:
        views = (grads["q"], grads["k"], grads["v"])
    heads = (case.q_heads, case.kv_heads, case.kv_heads)
    dims = (case.head_dim, case.head_dim, case.v_head_dim)
    out = {"d" + n: to_bhsd(x, s[n]["layout"], h, d) for n, x, h, d in zip(("q", "k", "v"), views, heads, dims)}
    out.update({"d" + n: x for n, x in grads.items() if n not in ("q", "k", "v", "qkv")})
    return out


def physical_inputs(case, q, k, v, mask=None, bool_mask=None, dtype_of=None, dout=None):
    """{name: array} as attnfuzz sends them: q, k, v (and qkv for packed layouts) in the
    case's layouts and strides from canonical q [B, Hq, Sq, D], k, v; mask / bool_mask
    (given [B', Hq', Sq', Sk'] or 2-D, e.g. a bundle's 4-D arrays) in the rank, shape,
    dtype and stride-0 form of the case's mask specs; for a backward case, do from
    canonical dout [B, Hq, Sq, Dv] in the output layout with its spec's strides. case: an
    attnfuzz.case.Case.
    dtype_of(name) gives the numpy dtype of "f32", "f16", "bf16" (default: numpy's, and
    ml_dtypes for bf16, imported only then)."""
    dtype_of = dtype_of or _dtype_of
    dt = dtype_of(case.dtype)
    B = case.batch
    out = {}
    dims = {"q": (case.q_heads, case.q_len, case.head_dim), "k": (case.kv_heads, case.kv_len, case.head_dim),
            "v": (case.kv_heads, case.kv_len, case.v_head_dim)}
    canon = {"q": q, "k": k, "v": v}
    specs = case.specs
    if case.packed:
        s = specs["q"]
        lay = s["layout"]
        H, S, D = dims["q"]
        qkv = strided_empty(physical_shape(lay, B, H, S, D), dt, s["perm"], s["pad"],
                            broadcast_dims(lay, s["broadcast"]))
        out["qkv"] = qkv
        for n, view in zip(("q", "k", "v"), packed_views(qkv, lay, H, D)):
            to_bhsd(view, lay, H, D)[...] = np.asarray(canon[n]).astype(dt)
            out[n] = view
    else:
        for n in ("q", "k", "v"):
            s = specs[n]
            H, S, D = dims[n]
            x = strided_empty(physical_shape(s["layout"], B, H, S, D), dt, s["perm"], s["pad"],
                              broadcast_dims(s["layout"], s["broadcast"]))
            to_bhsd(x, s["layout"], H, D)[...] = np.asarray(canon[n]).astype(dt)
            out[n] = x
    if dout is not None and case.grads:
        s = specs["do"]
        H, S, D = case.q_heads, case.q_len, case.v_head_dim
        x = strided_empty(physical_shape(s["layout"], B, H, S, D), dt, s["perm"], s["pad"],
                          broadcast_dims(s["layout"], s["broadcast"]))
        to_bhsd(x, s["layout"], H, D)[...] = np.asarray(dout).astype(dt)
        out["do"] = x
    full = (B, case.q_heads, case.q_len, case.kv_len)
    for name, spec, m in (("mask", case.amask, mask), ("bool_mask", case.bmask, bool_mask)):
        if spec is None or m is None:
            continue
        mdt = np.bool_ if name == "bool_mask" else dtype_of(spec.get("dtype", "f32"))
        fd = spec.get("full_dims", "qk")
        m = np.asarray(m)
        m = m.reshape((1,) * (4 - m.ndim) + m.shape)
        small = tuple(f if letter in fd else 1 for f, letter in zip(full, "bhqk"))
        m = np.broadcast_to(m, full)[tuple(slice(0, n) for n in small)]
        if spec.get("rank", 4) == 2:
            arr = np.ascontiguousarray(m.reshape(small[2], small[3]).astype(mdt))
        elif spec.get("expanded"):
            arr = np.broadcast_to(np.ascontiguousarray(m.astype(mdt)), full)  # stride 0 on the broadcast dims
        else:
            arr = np.ascontiguousarray(m.astype(mdt))
        out[name] = arr
    return out


def _dtype_of(name):
    if name == "bf16":
        import ml_dtypes  # numpy has no bfloat16
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f32": np.float32, "f16": np.float16, "f64": np.float64, "bool": np.bool_}[name])
