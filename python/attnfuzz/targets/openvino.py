"""OpenVINO attention as users build it: a small ov.Model (opset13 graph building) that takes
Q, K, V (or the packed QKV buffer) in the case's PHYSICAL layout and does the layout handling
itself (Transpose, the bsd / channels-first head split by Reshape, Gather / Split of a packed
buffer), compiled for the CPU plugin.

Variants (`python -m attnfuzz.targets.openvino VARIANT`, `--backend target:openvino/VARIANT`):
  sdpa      opset13 ScaledDotProductAttention
  explicit  MatMul / Multiply / Add / Select / Softmax / MatMul: scores and softmax in f32
            (Convert), the matmuls in the case dtype, dropout by the counter RNG's keep mask
  sdpa_nosnippets  the sdpa model compiled with SNIPPETS_MODE=DISABLE

On the CPU plugin both sdpa and explicit compile to one Snippets "Subgraph" (the MHA
tokenizer takes the decomposed SDPA and the explicit pattern alike), so they share a
kernel; with snippets disabled the same SDPA model runs as separate MatMul / Eltwise /
Softmax nodes: a genuinely different path to pair with.

Precision: every compile sets INFERENCE_PRECISION_HINT explicitly (inference_precision):
"f32" for f32 cases (the CPU plugin defaults to bf16 on AVX512_BF16 / AMX CPUs, which would
silently compute an f32 case in bf16), "bf16" for bf16 cases, "f16" for f16 cases where the
CPU lists FP16 in OPTIMIZATION_CAPABILITIES, and "f32" for f16 cases elsewhere: the plugin
ignores an f16 hint it cannot run natively and keeps its default, which on an AVX512_BF16
CPU is bf16 (the compiled model then reports INFERENCE_PRECISION_HINT bf16), so an f16 case
would be computed with bf16's 8-bit mantissa, 10x the f16 error (measured with openvino
2026.4: 0.021 off where f16 arithmetic gives 0.0024). The self-test pins the precision in
effect for every dtype.

Masks (sdpa): one attention_mask input. The boolean mask and the structural mask (a bool
[B, 1, Sq, Sk] input computed on the host for causal on any diagonal, key padding, window)
combine with LogicalAnd; with an additive mask they become Select(allowed, mask, -inf). The
op's `causal` attribute (top-left; the spec ignores attention_mask when it is set) is used
when a top-left causal mask is the only mask. GQA: an Hkv = 1 key broadcasts natively
(numpy rules of the spec); Hkv > 1 repeats K and V per group (Unsqueeze / Broadcast /
Reshape, the `repeat_kv` of model code). The spec wants the mask and the scale in Q's type:
no mask_dtype, and the scale is rounded to the case dtype.

The output goes into a tensor the request is handed (set_output_tensor) over a buffer inside
guard bands (attnfuzz.guard): a write past it is reported in the result's guard_writes.

Conventions, measured with openvino 2026.4 CPU: ScaledDotProductAttention lets 0 * NaN
through from masked keys (masked_values "ieee"); so does the explicit graph. What a fully
masked row gives depends on the CPU and the graph (NaN, Softmax of an all -inf row, or the
mean of V where the plugin's bf16 or f16 path makes the masked logits one finite value): the
target measures it per dtype at start-up (attnfuzz.probes) and declares masked_rows by
dtype.
"""

from __future__ import annotations

import sys

import numpy as np

from attnfuzz import guard, layouts, masks
from attnfuzz.targets import _base, _common

def _probe(variant):
    import openvino as ov
    devices = ov.Core().available_devices
    return None if "CPU" in devices else "openvino has no CPU device (devices: %s)" % ", ".join(devices)


_V = _base.Variant
STACK = _base.Stack("openvino", imports=("openvino", "openvino.opset13"), pip=("openvino==2026.4.1",),
                    version_of="openvino", probe=_probe, variants=(
    _V("sdpa", "opset13 ScaledDotProductAttention in an ov.Model fed the physical layout (CPU plugin)",
       compiled=True),
    _V("explicit", "MatMul / Multiply / Add / Select / Softmax / MatMul ov.Model (CPU plugin)", compiled=True),
    _V("sdpa_nosnippets", "the sdpa model compiled with SNIPPETS_MODE=DISABLE (oneDNN MatMul + Softmax nodes)",
       compiled=True),
))


# ---------------------------------------------------------------------------------------
# The model code: only openvino, numpy and math from here to the end of the section
# (repro_snippet copies it into a standalone repro.py).
# ---------------------------------------------------------------------------------------

_OV_TYPES = {"f32": "f32", "f16": "f16", "bf16": "bf16"}


def _const(value, dtype):
    """A constant of the case dtype (bf16 built by Convert from f32)."""
    import openvino.opset13 as ops
    value = np.asarray(value, dtype=np.float32)
    if dtype == "f32":
        return ops.constant(value)
    return ops.convert(ops.constant(value), _OV_TYPES[dtype])


def _type(name):
    """An ov.Type by its name ("f32", "f16", "bf16", "boolean")."""
    import openvino as ov
    return getattr(ov.Type, name)


def _i64(values):
    import openvino.opset13 as ops
    return ops.constant(np.asarray(values, dtype=np.int64))


def to_bhsd(x, layout, heads, dim, shape):
    """One unpacked physical tensor (node x of physical shape `shape`) -> [B, H, S, D]."""
    import openvino.opset13 as ops
    if layout == "bhsd":
        return x
    if layout == "bshd":
        return ops.transpose(x, _i64([0, 2, 1, 3]))
    if layout == "sbhd":
        return ops.transpose(x, _i64([1, 2, 0, 3]))
    if layout == "bsd":
        b, s, _ = shape
        return ops.transpose(ops.reshape(x, _i64([b, s, heads, dim]), False), _i64([0, 2, 1, 3]))
    if layout == "channels_first":
        b, _, s = shape
        return ops.transpose(ops.reshape(x, _i64([b, heads, dim, s]), False), _i64([0, 1, 3, 2]))
    raise ValueError("to_bhsd: %r is not an unpacked layout" % (layout,))


def unpack_qkv(qkv, layout, heads, dim, shape):
    """A packed QKV buffer -> q, k, v as [B, H, S, D] nodes, the way models split it."""
    import openvino.opset13 as ops
    if layout == "qkv_bs3hd":          # [B, S, 3, H, D]
        b, s = shape[0], shape[1]
        parts = [ops.gather(qkv, _i64(i), _i64(2)) for i in range(3)]
        return tuple(to_bhsd(p, "bshd", heads, dim, (b, s, heads, dim)) for p in parts)
    if layout == "qkv_bsh3d":          # [B, S, H, 3, D]: Q, K, V of each head adjacent
        b, s = shape[0], shape[1]
        parts = [ops.gather(qkv, _i64(i), _i64(3)) for i in range(3)]
        return tuple(to_bhsd(p, "bshd", heads, dim, (b, s, heads, dim)) for p in parts)
    if layout == "qkv_channels_first":  # [B, 3*H*D, S], chunk(3, dim=1)
        b, _, s = shape
        parts = ops.split(qkv, _i64(1), 3).outputs()
        return tuple(to_bhsd(p, "channels_first", heads, dim, (b, heads * dim, s)) for p in parts)
    raise ValueError("unpack_qkv: %r is not a packed layout" % (layout,))


def from_bhsd(o, layout, b, h, s, dv):
    """The [B, H, S, Dv] output node -> the model's output layout."""
    import openvino.opset13 as ops
    if layout == "bhsd":
        return o
    if layout == "bshd":
        return ops.transpose(o, _i64([0, 2, 1, 3]))
    if layout == "sbhd":
        return ops.transpose(o, _i64([2, 0, 1, 3]))
    if layout == "bsd":
        return ops.reshape(ops.transpose(o, _i64([0, 2, 1, 3])), _i64([b, s, h * dv]), False)
    if layout == "channels_first":
        return ops.reshape(ops.transpose(o, _i64([0, 1, 3, 2])), _i64([b, h * dv, s]), False)
    raise ValueError("from_bhsd: %r is not an output layout" % (layout,))


def repeat_kv(x, b, hkv, group, s, d):
    """[B, Hkv, S, D] -> [B, Hkv*group, S, D], each kv head repeated for its query heads."""
    import openvino.opset13 as ops
    x = ops.unsqueeze(x, _i64([2]))
    x = ops.broadcast(x, _i64([b, hkv, group, s, d]))
    return ops.reshape(x, _i64([b, hkv * group, s, d]), False)


def build_model(cfg):
    """The ov.Model of one structure. Parameters, in order: q, k, v (or qkv), then those cfg
    names: mask (additive, as sent), bool_mask (as sent), struct (bool [B, 1, Sq, Sk]), keep
    (bool [B, Hq, Sq, Sk])."""
    import openvino as ov
    import openvino.opset13 as ops
    dt = cfg["dtype"]
    et = _OV_TYPES[dt]
    b, hq, hkv, sq, sk, d, dv = cfg["shape"]
    params = []
    if cfg["packed"]:
        qkv = ops.parameter(cfg["phys"]["qkv"], _type(et), name="qkv")
        params.append(qkv)
        q, k, v = unpack_qkv(qkv, cfg["layouts"]["q"], hq, d, cfg["phys"]["qkv"])
    else:
        nodes = {}
        for n, heads, dim in (("q", hq, d), ("k", hkv, d), ("v", hkv, dv)):
            p = ops.parameter(cfg["phys"][n], _type(et), name=n)
            params.append(p)
            nodes[n] = to_bhsd(p, cfg["layouts"][n], heads, dim, cfg["phys"][n])
        q, k, v = nodes["q"], nodes["k"], nodes["v"]
    extra = {}
    for n in cfg["inputs"]:
        shape, t = cfg["phys"][n]
        p = ops.parameter(shape, _type(t), name=n)
        params.append(p)
        extra[n] = p
    group = hq // hkv
    if cfg["kind"] == "sdpa":
        if group > 1 and hkv > 1:
            k = repeat_kv(k, b, hkv, group, sk, d)
            v = repeat_kv(v, b, hkv, group, sk, dv)
        allowed = None
        for n in ("bool_mask", "struct"):
            if n in extra:
                allowed = extra[n] if allowed is None else ops.logical_and(allowed, extra[n])
        mask = extra.get("mask")
        if mask is not None and allowed is not None:
            mask = ops.select(allowed, mask, _const(float("-inf"), dt))
        elif mask is None:
            mask = allowed
        args = [q, k, v]
        if mask is not None:
            args.append(mask)
        if cfg["scale_arg"] is not None:
            if mask is None:
                args.append(_const(np.zeros((1, 1)), dt))   # scale is input 5: a zero mask first
            args.append(_const(cfg["scale_arg"], dt))
        o = ops.scaled_dot_product_attention(*args, causal=cfg["is_causal"])
    else:
        if group > 1:
            k = repeat_kv(k, b, hkv, group, sk, d)
            v = repeat_kv(v, b, hkv, group, sk, dv)
        s_scores, s_q, s_k = cfg["scale_factors"]
        if s_q != 1.0:
            q = ops.multiply(q, _const(s_q, dt))
        if s_k != 1.0:
            k = ops.multiply(k, _const(s_k, dt))
        s = ops.matmul(q, k, False, True)
        if dt != "f32":
            s = ops.convert(s, "f32")
        if s_scores != 1.0:
            s = ops.multiply(s, _const(s_scores, "f32"))
        if cfg["softcap"] > 0:
            c = _const(cfg["softcap"], "f32")
            s = ops.multiply(ops.tanh(ops.divide(s, c)), c)
        if "mask" in extra:
            m = extra["mask"]
            s = ops.add(s, m if cfg["mask_dtype"] == "f32" else ops.convert(m, "f32"))
        for n in ("bool_mask", "struct"):
            if n in extra:
                s = ops.select(extra[n], s, _const(float("-inf"), "f32"))
        if cfg["is_causal"]:
            tri = ops.constant(np.tril(np.ones((sq, sk), dtype=bool)))
            s = ops.select(tri, s, _const(float("-inf"), "f32"))
        p = ops.softmax(s, -1)
        if "keep" in extra:
            p = ops.select(extra["keep"], ops.multiply(p, _const(cfg["dropout_scale"], "f32")), _const(0.0, "f32"))
        if dt != "f32":
            p = ops.convert(p, _OV_TYPES[dt])
        o = ops.matmul(p, v, False, False)
    out = from_bhsd(o, cfg["out_layout"], b, hq, sq, dv)
    return ov.Model([out], params, "attention")


def inference_precision(core, dtype):
    """The INFERENCE_PRECISION_HINT for a case dtype: the dtype itself, except f16 on a CPU
    without native f16 (no FP16 in OPTIMIZATION_CAPABILITIES), where the plugin would keep
    its own default (bf16 on AVX512_BF16 CPUs) instead: f32 there."""
    if dtype == "f16" and "FP16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        return "f32"
    return dtype


def compile_model(cfg):
    """The compiled model and one infer request; the inference precision is set explicitly."""
    import openvino as ov
    core = ov.Core()
    model = build_model(cfg)
    conf = {"INFERENCE_PRECISION_HINT": inference_precision(core, cfg["precision"]), "NUM_STREAMS": "1"}
    if cfg["no_snippets"]:
        conf["SNIPPETS_MODE"] = "DISABLE"
    compiled = core.compile_model(model, "CPU", conf)
    return compiled, compiled.create_infer_request()


def ov_tensor(x):
    """A numpy array as an ov.Tensor; bf16 (ml_dtypes) by its bits: infer() given an
    ml_dtypes.bfloat16 array does not read it as bf16."""
    import openvino as ov
    x = np.ascontiguousarray(x)
    if x.dtype.name == "bfloat16":
        return ov.Tensor(x.view(np.uint16), ov.Shape(list(x.shape)), ov.Type.bf16)
    return ov.Tensor(x)


def guarded_output(request):
    """Hands the request an output tensor over a buffer inside guard bands (attnfuzz.guard)
    and returns the guard: the plugin writes the case's output there."""
    import ml_dtypes
    import openvino as ov
    port = request.get_compiled_model().output(0)
    et = port.get_element_type()
    dt = {ov.Type.f32: np.float32, ov.Type.f16: np.float16, ov.Type.bf16: ml_dtypes.bfloat16}[et]
    shape = tuple(int(n) for n in port.get_shape())
    g = guard.numpy_out(shape, dt)
    if et == ov.Type.bf16:
        request.set_output_tensor(0, ov.Tensor(g.inner.view(np.uint16), ov.Shape(list(shape)), et))
    else:
        request.set_output_tensor(0, ov.Tensor(g.inner, shared_memory=True))
    return g


def infer(request, arrays, dtype):
    """Runs the request on the arrays; the output as numpy in the case dtype."""
    for i, a in enumerate(arrays):
        request.set_input_tensor(i, ov_tensor(a))
    request.infer()
    t = request.get_output_tensor(0)
    if dtype == "bf16":
        import ml_dtypes
        return np.array(t.data.view(np.uint16).view(ml_dtypes.bfloat16))
    return np.array(t.data)


def config(req, variant):
    """The static structure of one request as plain values."""
    case, mask, bool_mask = req.case, req.mask, req.bool_mask
    lay = dict(case.layouts)
    B, Hq, Hkv, Sq, Sk, D, Dv = (case.batch, case.q_heads, case.kv_heads, case.q_len, case.kv_len,
                                 case.head_dim, case.v_head_dim)
    phys = {}
    if case.packed:
        phys["qkv"] = tuple(req.qkv.shape)
    else:
        for n, h, s, dim in (("q", Hq, Sq, D), ("k", Hkv, Sk, D), ("v", Hkv, Sk, Dv)):
            phys[n] = layouts.out_shape(lay[n], B, h, s, dim)
    left, right = case.window
    only_causal = (bool(case.causal) and _common.offset_zero_always(case) and case.key_padding is None
                   and left < 0 and right < 0)
    inputs = []
    if mask is not None:
        inputs.append("mask")
        phys["mask"] = (tuple(mask.shape), _OV_TYPES[case.amask.get("dtype", "f32")])
    if bool_mask is not None:
        inputs.append("bool_mask")
        phys["bool_mask"] = (tuple(bool_mask.shape), "boolean")
    if variant == "explicit":
        is_causal = only_causal
    else:
        is_causal = only_causal and mask is None and bool_mask is None
    if masks.has_structural(case) and not is_causal:
        inputs.append("struct")
        phys["struct"] = ((B, 1, Sq, Sk), "boolean")
    if variant == "explicit" and case.dropout_p > 0:
        inputs.append("keep")
        phys["keep"] = ((B, Hq, Sq, Sk), "boolean")
    return {
        "kind": "explicit" if variant == "explicit" else "sdpa", "no_snippets": variant.endswith("_nosnippets"),
        "dtype": case.dtype, "shape": (B, Hq, Hkv, Sq, Sk, D, Dv), "phys": phys,
        "layouts": lay, "packed": case.packed, "out_layout": _common.OUT_LAYOUT[lay["q"]], "inputs": inputs,
        "scale_arg": float(case.scale) if case.scale_given else None,
        "scale_factors": _common.scale_factors(case), "softcap": float(case.softcap), "is_causal": is_causal,
        "mask_dtype": case.amask.get("dtype", "f32") if case.amask else None,
        "dropout_scale": _common.dropout_scale(case.dropout_p),
        "precision": case.dtype,
    }


def arguments(req, cfg):
    """The inputs of the model, in order (_common.dense_arguments)."""
    return _common.dense_arguments(req, cfg["inputs"])


class Target(_base.Target):
    """One variant: a cache of compiled models and their infer requests keyed by structure."""
    STACK = STACK

    def declare(self) -> dict:
        caps = ["f32", "f16", "bf16", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal", "padding",
                "window", "strided", "tf32"]
        conv = {"masked_rows": self._masked_rows(), "masked_values": "ieee"}
        # The inference precision each case gets (inference_precision): bf16 for bf16 cases,
        # f16 for f16 ones where the CPU runs f16 natively. The plugin then computes the
        # scores and adds the mask at that precision (the campaign's bf16 mask findings).
        import openvino as ov
        core = ov.Core()
        conv["scores"] = ["bf16"] + (["f16"] if inference_precision(core, "f16") == "f16" else [])
        if "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
            # native bf16 kernels (AVX512_BF16's VDPBF16PS, AMX) read a subnormal bf16 as 0
            # and flush subnormal results: a bf16 case's denormals are flushed
            conv["denormals"] = ["bf16"]
        if self.variant != "explicit":
            # opset13 ScaledDotProductAttention turns a boolean mask into select(m, 0, -inf)
            # and adds it: a masked key's NaN or +Inf score makes the row NaN
            conv["masked_keys"] = "ieee"
        if self.variant == "explicit":
            # ScaledDotProductAttention has no softcap and no dropout, and wants the mask in
            # Q's type: only the explicit model takes those
            caps += ["softcap", "mask_dtype", "dropout"]
            conv["dropout"] = "counter"
        return {"caps": caps, "limits": {"max_bytes": 64 << 20}, "conventions": conv}

    def _masked_rows(self):
        """masked_rows by dtype, measured here (attnfuzz.probes: a boolean mask leaving a row
        no key): it depends on the CPU and the graph. Measured with openvino 2026.4.1: on an
        AVX2 CPU (no AVX-512) sdpa and sdpa_nosnippets give the mean of V in bf16 (uniform
        weights) and NaN in f32 and f16 (computed at f32 there), explicit NaN in every dtype
        (its Softmax runs in f32); on a CPU with native FP16, select-then-Softmax gave uniform
        weights in f16 too (known entry openvino-f16-masked-row-uniform). A dtype whose row
        follows none of the conventions is declared "nan", the spec's answer (the campaign
        then shows it)."""
        from attnfuzz import probes

        def run(req):
            return self.execute(self.build(req), req)
        rows = {dt: name or "nan" for dt, name in probes.masked_rows(run, ["f32", "f16", "bf16"]).items()}
        return rows if len(set(rows.values())) > 1 else next(iter(rows.values()), "nan")

    def build(self, req):
        cfg = config(req, self.variant)
        compiled, request = compile_model(cfg)
        return compiled, request, cfg

    def self_check(self):
        """[(ok, message)]: every model compiled so far computes at its case's precision,
        read back from the compiled model: f32 cases at f32 (the CPU plugin's default is
        bf16 on AVX512_BF16 / AMX CPUs), bf16 at bf16, f16 at f16 where the CPU runs f16
        natively and at f32 elsewhere, never at the bf16 default the plugin keeps when it
        ignores an f16 hint."""
        import openvino as ov
        caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        want = {"f32": "f32", "bf16": "bf16" if "BF16" in caps else "f32", "f16": "f16" if "FP16" in caps else "f32"}
        names = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
        seen = {}
        for compiled, _, cfg in self.cache.values():
            hint = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
            w = want[cfg["dtype"]]
            seen[cfg["dtype"]] = seen.get(cfg["dtype"], 0) + 1
            if "'%s'" % names[w] not in hint:
                return [(False, "a %s model compiled with INFERENCE_PRECISION_HINT %s, want %s"
                         % (cfg["dtype"], hint, names[w]))]
        return [(bool(seen.get("f32") and seen.get("f16")),
                 "models compiled at their precision (%s; CPU capabilities %s)"
                 % (", ".join("%d %s at %s" % (n, d, want[d]) for d, n in sorted(seen.items())), " ".join(caps)))]

    def execute(self, art, req):
        from attnfuzz.worker import Result
        _, request, cfg = art
        g = guarded_output(request)
        out = infer(request, arguments(req, cfg), req.case.dtype)
        return Result(out, layout=cfg["out_layout"], guard_writes=guard.writes(g))


def repro_snippet(variant: str) -> str:
    """Python source defining attention(req) with openvino and numpy only; returns the
    output as [B, Hq, Sq, Dv]."""
    STACK.variant(variant)
    return _common.snippet(
        ["import openvino as ov", "import openvino.opset13 as ops"],
        (_const, _type, _i64, to_bhsd, unpack_qkv, from_bhsd, repeat_kv, build_model, inference_precision,
         compile_model, ov_tensor, infer, config, arguments),
        consts={"VARIANT": variant, "_OV_TYPES": _OV_TYPES}, tail='''

def attention(req):
    """req.q, req.k, req.v: numpy arrays in the case's physical layouts (req.qkv: the packed
    buffer)."""
    case = req.case
    cfg = config(req, VARIANT)
    compiled, request = compile_model(cfg)
    out = infer(request, arguments(req, cfg), case.dtype)
    return layouts.to_bhsd(out, cfg["out_layout"], case.q_heads, case.v_head_dim)
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK))
