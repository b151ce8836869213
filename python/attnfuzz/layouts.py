"""The physical layouts of DESIGN.md section 3 as views of canonical [B, H, S, D].

Per tensor (q, k or v alone; packed layouts arrive as three per-tensor views of one
buffer, docs/worker-protocol.md):

| layout                          | physical shape | canonical index [b, h, s, d] |
| bhsd                            | [B, H, S, D]   | x[b, h, s, d]                |
| bshd, qkv_bs3hd, qkv_bsh3d      | [B, S, H, D]   | x[b, s, h, d]                |
| sbhd                            | [S, B, H, D]   | x[s, b, h, d]                |
| bsd                             | [B, S, H*D]    | x[b, s, h*D + d]             |
| channels_first, qkv_channels_first | [B, H*D, S] | x[b, h*D + d, s]             |

to_bhsd never copies: splitting one axis in two is always a view, whatever its stride."""

import numpy as np

UNPACKED = ("bhsd", "bshd", "sbhd", "bsd", "channels_first")
PACKED = ("qkv_bs3hd", "qkv_bsh3d", "qkv_channels_first")
ALL = UNPACKED + PACKED

# packed layouts: the per-tensor view has the shape of this unpacked layout
PER_TENSOR = {"qkv_bs3hd": "bshd", "qkv_bsh3d": "bshd", "qkv_channels_first": "channels_first"}


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
