"""ONNX attention graphs built with onnx.helper, shared by the ONNX Runtime and TensorRT targets.

Every graph takes Q, K, V (or the packed QKV buffer) in the case's PHYSICAL layout, as a
model's ONNX export would: the layout's Transpose / Reshape (and the packed Split) are in
the graph, so the optimizer or the engine builder sees them. Three kinds:

- `attention`: the ONNX Attention op (opset 23, 24 for nonpad_kv_seqlen): 4-D inputs, or
  3-D ones with q_num_heads / kv_num_heads when Q, K and V all come as `bsd`; the KV-cache
  form (past_key / past_value, the first `past` keys) for a causal diagonal at the past
  length; nonpad_kv_seqlen for key padding.
- `explicit`: MatMul / Mul (scale at the case's placement) / softcap / Add / Where /
  Softmax / dropout by a keep mask / MatMul: the unfused pattern the optimizer fuses.
- `exported_sdpa`: what torch.onnx.export(dynamo=False) writes for
  F.scaled_dot_product_attention (symbolic_opset14.scaled_dot_product_attention): the
  scale split as Sqrt on Q and on the transposed K (the default scale computed from
  Q's shape: Shape/Slice/Cast/Sqrt/Div/Cast, then Sqrt again), a boolean mask turned into
  Where(m, 0, -inf) + Add with the IsNaN/Where guard after Softmax, is_causal as a
  Trilu mask, f32 constants that promote f16/bf16 scores to f32 through Cast (as the
  exporter's scalar-type pass does). Checked against torch 2.15's exporter: exporting a
  bshd module calling SDPA (f32/f16; no mask, bool mask, float mask, is_causal, a given
  scale) wrote these node types in this order (Transpose of K fused with the layout
  transpose), and a given scale became Constant(sqrt(scale)) -> Mul on Q and K.
  GQA: the exporter refuses enable_gqa, so the module repeats K/V heads first (Unsqueeze,
  Expand, Reshape, as repeat_interleave exports).
"""

from __future__ import annotations

import math

import numpy as np

from attnfuzz import layouts, masks
from attnfuzz.targets import _common

ONNX_DTYPE = {"f32": 1, "f16": 10, "bf16": 16, "bool": 9, "i64": 7}   # TensorProto enums

# Physical (unpacked) layout -> canonical [B, H, S, D] as (reshape to, transpose perm).
def _layout_ops(layout, B, H, S, D):
    if layout == "bhsd":
        return None, None
    if layout == "bshd":
        return None, [0, 2, 1, 3]
    if layout == "sbhd":
        return None, [1, 2, 0, 3]
    if layout == "bsd":
        return [B, S, H, D], [0, 2, 1, 3]
    if layout == "channels_first":
        return [B, H, D, S], [0, 1, 3, 2]
    raise ValueError(f"onnx_graphs: layout {layout!r} is not an unpacked layout")


class _G:
    """A tiny graph writer: unique names, constants as initializers."""

    def __init__(self):
        from onnx import helper
        self.h = helper
        self.nodes, self.inits, self.inputs = [], [], []
        self.n = 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type)
        self.nodes.append(self.h.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def ops(self, op_type, inputs, n_out, **attrs):
        outs = [self.name(op_type) for _ in range(n_out)]
        self.nodes.append(self.h.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def const(self, value, dtype):
        from onnx import numpy_helper
        name = self.name("c")
        arr = np.asarray(value, dtype=np.int64 if dtype == "i64" else np.bool_ if dtype == "bool"
                         else np.float32)
        t = numpy_helper.from_array(arr, name)
        if dtype in ("f16", "bf16"):
            # Constants of the compute dtype: written as f32, cast once (exact for our values).
            self.inits.append(t)
            return self.op("Cast", [name], to=ONNX_DTYPE[dtype])
        self.inits.append(t)
        return name

    def input(self, name, dtype, shape):
        self.inputs.append(self.h.make_tensor_value_info(name, ONNX_DTYPE[dtype], list(shape)))
        return name


def _to_bhsd(g, x, layout, B, H, S, D, fuse_perm=None):
    """Layout ops of one tensor; `fuse_perm` (applied after) is folded into the transpose the
    way the exporter's peephole pass fuses consecutive transposes."""
    shape, perm = _layout_ops(layout, B, H, S, D)
    if shape is not None:
        x = g.op("Reshape", [x, g.const(shape, "i64")])
    if fuse_perm is not None:
        perm = [perm[i] for i in fuse_perm] if perm is not None else list(fuse_perm)
    if perm is not None and perm != [0, 1, 2, 3]:
        x = g.op("Transpose", [x], perm=perm)
    return x


def _unpack(g, qkv, layout, B, H, S, D):
    """The packed buffer split the way the model's code does it -> q, k, v as [B, H, S, D]."""
    if layout in ("qkv_bs3hd", "qkv_bsh3d"):
        axis = 2 if layout == "qkv_bs3hd" else 3
        parts = g.ops("Split", [qkv], 3, axis=axis, num_outputs=3)
        outs = []
        for p in parts:
            p = g.op("Squeeze", [p, g.const([axis], "i64")])
            outs.append(g.op("Transpose", [p], perm=[0, 2, 1, 3]))
        return outs
    if layout == "qkv_channels_first":
        c = H * D
        x = g.op("Reshape", [qkv, g.const([B, 3 * c, -1], "i64")])    # qkv.reshape(b, 3*c, -1)
        parts = g.ops("Split", [x], 3, axis=1, num_outputs=3)           # .chunk(3, dim=1)
        outs = []
        for p in parts:
            p = g.op("Reshape", [p, g.const([B, H, D, S], "i64")])
            outs.append(g.op("Transpose", [p], perm=[0, 1, 3, 2]))
        return outs
    raise ValueError(f"onnx_graphs: layout {layout!r} is not packed")


def _from_bhsd(g, o, layout, B, H, S, Dv):
    if layout == "bhsd":
        return o
    if layout == "bshd":
        return g.op("Transpose", [o], perm=[0, 2, 1, 3])
    if layout == "sbhd":
        return g.op("Transpose", [o], perm=[2, 0, 1, 3])
    if layout == "bsd":
        o = g.op("Transpose", [o], perm=[0, 2, 1, 3])
        return g.op("Reshape", [o, g.const([B, S, H * Dv], "i64")])
    if layout == "channels_first":
        o = g.op("Transpose", [o], perm=[0, 1, 3, 2])
        return g.op("Reshape", [o, g.const([B, H * Dv, S], "i64")])
    raise ValueError(layout)


def _repeat_kv(g, x, B, Hkv, rep, S, D):
    """repeat_interleave(rep, dim=1) as exporters write it."""
    x = g.op("Unsqueeze", [x, g.const([2], "i64")])
    x = g.op("Expand", [x, g.const([B, Hkv, rep, S, D], "i64")])
    return g.op("Reshape", [x, g.const([B, Hkv * rep, S, D], "i64")])


def _promoted(a: str, b: str) -> str:
    """torch's type promotion of two float dtypes (f16 + bf16 -> f32)."""
    return a if a == b else "f32"


def build(spec: dict):
    """The ONNX model for one static structure.

    spec keys: kind ("attention" | "explicit" | "exported_sdpa"), dtype, layouts (q, k, v),
    packed, B, Hq, Hkv, Sq, Sk, D, Dv, scale (effective), scale_given, placement, softcap,
    amask (None or (shape, dtype)), bmask (None or shape), struct (bool input [B, 1, Sq, Sk]),
    causal (the kind's own causal: is_causal / tril, top-left or at the past length),
    past (attention: keys before the current block), nonpad (attention), window
    (attention, opset 25: (left, right) on the op's diagonal), dropout (explicit:
    p, with a bool input "keep" [B, Hq, Sq, Sk]), opset.
    Inputs: q, k, v (or qkv), mask, bool_mask, struct, keep, nonpad; output: out (in q's
    output layout) whose dtype out_dtype(spec) gives.
    """
    from onnx import helper
    g = _G()
    dt = spec["dtype"]
    B, Hq, Hkv, Sq, Sk, D, Dv = (spec[x] for x in ("B", "Hq", "Hkv", "Sq", "Sk", "D", "Dv"))
    lq, lk, lv = spec["layouts"]
    out_layout = {"qkv_bs3hd": "bshd", "qkv_bsh3d": "bshd", "qkv_channels_first": "channels_first"}.get(lq, lq)
    kind = spec["kind"]
    three_d = (kind == "attention" and not spec["packed"] and (lq, lk, lv) == ("bsd",) * 3
               and not spec.get("past"))

    # Inputs in their physical layouts.
    if spec["packed"]:
        qkv = g.input("qkv", dt, layouts.physical_shape(lq, B, Hq, Sq, D))
    else:
        q_in = g.input("q", dt, layouts.physical_shape(lq, B, Hq, Sq, D))
        k_in = g.input("k", dt, layouts.physical_shape(lk, B, Hkv, Sk, D))
        v_in = g.input("v", dt, layouts.physical_shape(lv, B, Hkv, Sk, Dv))
    mask = bmask = struct = keep = nonpad = None
    if spec.get("amask"):
        shape, mdt = spec["amask"]
        mask = g.input("mask", mdt, shape)
    if spec.get("bmask"):
        bmask = g.input("bool_mask", "bool", spec["bmask"])
    if spec.get("struct"):
        struct = g.input("struct", "bool", [B, 1, Sq, Sk])
    if spec.get("dropout", 0) > 0:
        keep = g.input("keep", "bool", [B, Hq, Sq, Sk])
    if spec.get("nonpad"):
        nonpad = g.input("nonpad", "i64", [B])

    key_t = [0, 1, 3, 2] if kind == "exported_sdpa" else None
    if three_d:
        q, k, v = q_in, k_in, v_in
    elif spec["packed"]:
        q, k, v = _unpack(g, qkv, lq, B, Hq, Sq, D)
        if key_t is not None:
            k = g.op("Transpose", [k], perm=key_t)
    else:
        q = _to_bhsd(g, q_in, lq, B, Hq, Sq, D)
        k = _to_bhsd(g, k_in, lk, B, Hkv, Sk, D, fuse_perm=key_t if Hq == Hkv else None)
        v = _to_bhsd(g, v_in, lv, B, Hkv, Sk, Dv)
        if key_t is not None and Hq != Hkv:
            pass  # transposed after the head repeat below

    if kind == "attention":
        o = _attention_op(g, spec, q, k, v, mask, bmask, struct, nonpad, three_d)
        if not three_d:
            o = _from_bhsd(g, o, out_layout, B, Hq, Sq, Dv)
    else:
        if Hq != Hkv:
            rep = Hq // Hkv
            k = _repeat_kv(g, k, B, Hkv, rep, Sk, D)
            v = _repeat_kv(g, v, B, Hkv, rep, Sk, Dv)
            if key_t is not None:
                k = g.op("Transpose", [k], perm=key_t)
        body = _exported_sdpa if kind == "exported_sdpa" else _explicit
        o = body(g, spec, q, k, v, mask, bmask, struct, keep)
        o = _from_bhsd(g, o, out_layout, B, Hq, Sq, Dv)

    out_dt = out_dtype(spec)
    g.nodes.append(helper.make_node("Identity", [o], ["out"]))
    outputs = [helper.make_tensor_value_info("out", ONNX_DTYPE[out_dt], None)]
    graph = helper.make_graph(g.nodes, f"attnfuzz_{kind}", g.inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", spec.get("opset", 23))],
                              producer_name="attnfuzz")
    model.ir_version = 10
    return model


def out_dtype(spec) -> str:
    """The output dtype: the case dtype, except where the exported graph's f32 constants
    promote the scores (and so P and P V) to f32."""
    if spec["kind"] != "exported_sdpa" or spec["dtype"] == "f32":
        return spec["dtype"]
    return "f32" if _exported_mask_dtype(spec) not in (None, spec["dtype"]) else spec["dtype"]


def _exported_mask_dtype(spec):
    """The dtype the exported graph adds its mask in (None: no mask)."""
    dt = spec["dtype"]
    if spec.get("amask"):
        return _promoted(dt, spec["amask"][1])
    if spec.get("bmask") or spec.get("struct") or spec.get("causal"):
        return "f32"            # Where(m, 0.0, -inf) with f32 constants
    return None


def _attention_op(g, spec, q, k, v, mask, bmask, struct, nonpad, three_d):
    """The ONNX Attention op. One attn_mask from the case's masks: the boolean ones
    combined by And, an additive one (Cast to the compute dtype) with -inf where a boolean
    one says no."""
    dt = spec["dtype"]
    Sq, Sk = spec["Sq"], spec["Sk"]

    def full_qk(m, shape):
        # ORT (1.32) refuses an attn_mask whose query or key dim is broadcast (size 1),
        # though the spec allows any broadcastable shape (corpus/findings/ort/): expand it,
        # as a user meeting that error does.
        if shape is None or list(shape[-2:]) == [Sq, Sk]:
            return m
        return g.op("Expand", [m, g.const(list(shape[:-2]) + [Sq, Sk], "i64")])

    if mask is not None:
        if spec["amask"][1] != dt:
            mask = g.op("Cast", [mask], to=ONNX_DTYPE[dt])   # before Expand: no bf16 Expand on CPU
        mask = full_qk(mask, spec["amask"][0])
    if bmask is not None:
        bmask = full_qk(bmask, spec["bmask"])
    bools = [m for m in (bmask, struct) if m is not None]
    b = None
    for m in bools:
        b = m if b is None else g.op("And", [b, m])
    attn_mask = None
    if mask is not None:
        attn_mask = mask
        if b is not None:
            attn_mask = g.op("Where", [b, attn_mask, g.const(-np.inf, dt)])
    elif b is not None:
        attn_mask = b
    past = spec.get("past", 0)
    inputs = [q, k, v, attn_mask or ""]
    if past:
        Sk = spec["Sk"]
        ax = g.const([2], "i64")
        pk = g.op("Slice", [k, g.const([0], "i64"), g.const([past], "i64"), ax])
        pv = g.op("Slice", [v, g.const([0], "i64"), g.const([past], "i64"), ax])
        inputs[1] = g.op("Slice", [k, g.const([past], "i64"), g.const([Sk], "i64"), ax])
        inputs[2] = g.op("Slice", [v, g.const([past], "i64"), g.const([Sk], "i64"), ax])
        inputs += [pk, pv]
    if nonpad is not None:
        inputs += [""] * (6 - len(inputs)) + [nonpad]
    while inputs and inputs[-1] == "":
        inputs.pop()
    attrs = {}
    if spec.get("causal"):
        attrs["is_causal"] = 1
    if spec.get("window"):
        attrs["left_window_size"], attrs["right_window_size"] = (int(x) for x in spec["window"])
    if spec["scale_given"]:
        attrs["scale"] = float(spec["scale"])
    if spec["softcap"] > 0:
        attrs["softcap"] = float(spec["softcap"])
    if three_d:
        attrs["q_num_heads"] = spec["Hq"]
        attrs["kv_num_heads"] = spec["Hkv"]
    outs = g.ops("Attention", inputs, 3 if past else 1, **attrs)
    return outs[0]


def _scores_scaled(g, spec, q, k, kt_perm=True):
    """Q K^T with the scale at the case's placement."""
    dt = spec["dtype"]
    s = float(spec["scale"])
    pl = spec["placement"]
    if pl == "q":
        q = g.op("Mul", [q, g.const(s, dt)])
    elif pl == "k":
        k = g.op("Mul", [k, g.const(s, dt)])
    elif pl == "sqrt_qk":
        r = math.sqrt(abs(s))
        q = g.op("Mul", [q, g.const(r, dt)])
        k = g.op("Mul", [k, g.const(math.copysign(r, s), dt)])
    kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
    scores = g.op("MatMul", [q, kt])
    if pl == "scores":
        scores = g.op("Mul", [scores, g.const(s, dt)])
    return scores


def _explicit(g, spec, q, k, v, mask, bmask, struct, keep):
    dt = spec["dtype"]
    s = _scores_scaled(g, spec, q, k)
    c = spec["softcap"]
    if c > 0:
        s = g.op("Mul", [g.op("Tanh", [g.op("Div", [s, g.const(c, dt)])]), g.const(c, dt)])
    if mask is not None:
        m = mask if spec["amask"][1] == dt else g.op("Cast", [mask], to=ONNX_DTYPE[dt])
        s = g.op("Add", [s, m])
    neg = None
    for m in (bmask, struct):
        if m is not None:
            neg = neg or g.const(-np.inf, dt)
            s = g.op("Where", [m, s, neg])
    if spec.get("causal"):
        Sq, Sk = spec["Sq"], spec["Sk"]
        tril = np.tril(np.ones((Sq, Sk), dtype=bool))
        s = g.op("Where", [g.const(tril, "bool"), s, neg or g.const(-np.inf, dt)])
    p = g.op("Softmax", [s], axis=-1)
    dp = spec.get("dropout", 0.0)
    if dp > 0:
        # Dropout by the counter RNG's keep mask (all false when p = 1).
        f = 1.0 / (1.0 - dp) if dp < 1 else 1.0
        p = g.op("Where", [keep, g.op("Mul", [p, g.const(f, dt)]), g.const(0.0, dt)])
    return g.op("MatMul", [p, v])


def _exported_sdpa(g, spec, q, k_t, v, mask, bmask, struct, keep):
    """symbolic_opset14.scaled_dot_product_attention; k_t is already K transposed."""
    dt = spec["dtype"]
    if spec["scale_given"]:
        # The exporter folds Sqrt(Constant(scale)) into one constant: sqrt(scale) in the
        # dtype (NaN for a negative scale, as the exported model computes it).
        with np.errstate(invalid="ignore"):
            r = float(np.sqrt(np.float32(spec["scale"])))
        sq = g.const(r, dt)
        sk = sq
    else:
        # _attention_scale: 1 / sqrt(Cast(Shape(q)[-1])) in f32, Cast to the dtype.
        shp = g.op("Shape", [q])
        last = g.op("Slice", [shp, g.const([-1], "i64"), g.const([2 ** 63 - 1], "i64")])
        e = g.op("Cast", [last], to=ONNX_DTYPE[dt])
        e = g.op("Sqrt", [e])
        if dt != "f32":
            e = g.op("Cast", [e], to=ONNX_DTYPE["f32"])
        scale = g.op("Div", [g.const([1.0], "f32"), e])
        scale = g.op("Cast", [scale], to=ONNX_DTYPE[dt])
        sq = g.op("Sqrt", [scale])
        sk = g.op("Sqrt", [scale])
    qs = g.op("Mul", [q, sq])
    ks = g.op("Mul", [k_t, sk])
    s = g.op("MatMul", [qs, ks])

    # The user's module combines its masks into SDPA's one attn_mask (bool & bool, or the
    # additive mask with -inf where a boolean one says no); is_causal builds a Trilu mask.
    bools = [m for m in (bmask, struct) if m is not None]
    b = None
    for m in bools:
        b = m if b is None else g.op("And", [b, m])
    mdt = _exported_mask_dtype(spec)
    bool_path = False
    if mask is not None:
        m = mask
        if spec["amask"][1] != mdt:
            m = g.op("Cast", [m], to=ONNX_DTYPE[mdt])
        if b is not None:
            m = g.op("Where", [b, m, g.const(-np.inf, mdt)])
    elif b is not None:
        bool_path = True
        m = g.op("Where", [b, g.const([0.0], "f32"), g.const([-np.inf], "f32")])
    elif spec.get("causal"):
        # _causal_attention_mask: Trilu of ones [L, S] from the shapes, Where(== 0, -inf, 0).
        l_ = g.op("Slice", [g.op("Shape", [q]), g.const([-2], "i64"), g.const([-1], "i64")])
        s_ = g.op("Slice", [g.op("Shape", [k_t]), g.const([-1], "i64"), g.const([2 ** 63 - 1], "i64")])
        size = g.op("Concat", [l_, s_], axis=0)
        ones = g.op("Expand", [g.const(1.0, "f32"), size])
        tri = g.op("Trilu", [ones], upper=0)
        eq = g.op("Equal", [tri, g.const(0.0, "f32")])
        m = g.op("Where", [eq, g.const(-np.inf, "f32"), g.const(0.0, "f32")])
    else:
        m = None
    vv = v
    if m is not None:
        if mdt != dt:
            s = g.op("Cast", [s], to=ONNX_DTYPE[mdt])
            vv = g.op("Cast", [v], to=ONNX_DTYPE[mdt])
        s = g.op("Add", [s, m])
    p = g.op("Softmax", [s], axis=-1)
    if bool_path:
        p = g.op("Where", [g.op("IsNaN", [p]), g.const([0.0], mdt), p])
    return g.op("MatMul", [p, vv])


def graph_spec(case, kind: str, opset: int = 0) -> dict:
    """The static structure of the ONNX graph a case needs (build's spec). opset 0: 25 for
    the Attention op with a window, 24 without (nonpad_kv_seqlen), 18 for the others (what
    the exporter writes)."""
    if not opset:
        if kind == "attention":
            opset = 25 if (case.window[0] >= 0 or case.window[1] >= 0) else 24
        else:
            opset = 18
    spec = {
        "kind": kind, "dtype": case.dtype,
        "layouts": (case.layouts["q"], case.layouts["k"], case.layouts["v"]),
        "packed": bool(case.packed),
        "B": case.batch, "Hq": case.q_heads, "Hkv": case.kv_heads, "Sq": case.q_len,
        "Sk": case.kv_len, "D": case.head_dim, "Dv": case.v_head_dim,
        "scale": float(case.scale), "scale_given": bool(case.scale_given),
        "placement": case.placement if kind == "explicit" else "scores",
        "softcap": float(case.softcap),
        "amask": None, "bmask": None, "struct": False, "causal": False, "past": 0,
        "nonpad": False, "dropout": float(case.dropout_p) if kind == "explicit" else 0.0,
        "opset": opset,
    }
    if case.amask is not None:
        spec["amask"] = (None, case.amask.get("dtype") or "f32")
    if case.bmask is not None:
        spec["bmask"] = None
    if not masks.has_structural(case):
        return spec
    left, right = case.window
    window = left >= 0 or right >= 0
    offs = [int(o) for o in case.diag_offset]
    if kind == "attention":
        # The op's own forms put causal and window masks on one diagonal: offset 0 without
        # a cache, the past length with past_key/past_value, nonpad[b] - Sq with
        # nonpad_kv_seqlen (spec errata onnx#8068); windows need opset 25.
        uniform = len(set(offs)) == 1
        shaped = case.causal or window
        if window and opset < 25:
            spec["struct"] = True
        elif case.key_padding is None and uniform and 0 <= offs[0] < case.kv_len:
            spec["causal"] = bool(case.causal)            # top-left, or past = the offset
            spec["past"] = offs[0]
            spec["window"] = (left, right) if window else None
        elif case.key_padding is not None and (not shaped or case.diagonal == "bottom_right_valid"):
            spec["causal"] = bool(case.causal)            # offset(b) = nonpad[b] - Sq
            spec["nonpad"] = True
            spec["window"] = (left, right) if window else None
        else:
            spec["struct"] = True
        if spec.get("window") is None:
            spec.pop("window", None)
    else:
        # The exporter refuses is_causal together with attn_mask (a user combines them into
        # one mask); the explicit graph's tril goes with any mask.
        lone = kind == "explicit" or (case.amask is None and case.bmask is None)
        if _common.plain_causal(case) and lone:
            spec["causal"] = True
        else:
            spec["struct"] = True
    return spec


def feeds_spec(spec, mask, bool_mask):
    """Fill in the mask shapes the graph inputs take."""
    s = dict(spec)
    if spec["amask"] is not None:
        s["amask"] = (list(mask.shape), spec["amask"][1])
    if bool_mask is not None:
        s["bmask"] = list(bool_mask.shape)
    return s


def feeds(req, spec, *old):
    """The graph's inputs from a request, as contiguous numpy arrays (ONNX takes no strides:
    strided cases are accepted and the graph sees their values): q, k, v or the packed qkv,
    the masks as sent, the host's structural mask, the key lengths, the dropout keep mask.
    The old positional form feeds(case, spec, q, k, v, mask, bool_mask, keep) (the packed
    buffer case.qkv: an old-form hook's case) is taken too."""
    if old:
        case, spec, q, k, v, mask, bool_mask, keep = (req, spec) + old
        qkv = case.qkv if case.packed else None
    else:
        case, q, k, v, mask, bool_mask, qkv = req.case, req.q, req.k, req.v, req.mask, req.bool_mask, req.qkv
    f = {"qkv": qkv} if case.packed else {"q": q, "k": k, "v": v}
    if mask is not None:
        f["mask"] = mask
    if bool_mask is not None:
        f["bool_mask"] = bool_mask
    if spec["struct"]:
        f["struct"] = _common.structural_allowed(case)
    if spec["nonpad"]:
        f["nonpad"] = np.asarray(case.key_padding, dtype=np.int64)
    if spec["dropout"] > 0:
        f["keep"] = (keep if old else req.keep) if spec["dropout"] < 1 else np.zeros(
            (case.batch, case.q_heads, case.q_len, case.kv_len), bool)
    return {n: np.ascontiguousarray(x) for n, x in f.items()}


def model_objects():
    """This module's functions and classes in source order (what a repro copies)."""
    import inspect
    import sys
    mod = sys.modules[__name__]
    objs = [o for o in vars(mod).values()
            if (inspect.isfunction(o) or inspect.isclass(o)) and o.__module__ == __name__ and o is not model_objects]
    return sorted(objs, key=lambda o: inspect.getsourcelines(o)[1])


CONSTS = {"ONNX_DTYPE": ONNX_DTYPE}
