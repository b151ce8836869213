"""TVM Relax attention as users get it: a torch nn.Module fed Q, K, V (or the packed QKV buffer)
in the case's PHYSICAL layout, exported with torch.export and imported by TVM's own PyTorch
frontend (tvm.relax.frontend.torch.from_exported_program), built for llvm and run on the
Relax VM. The module permutes to SDPA's [B, H, S, D] inside, so TVM sees the permutes around
the attention and its own BHSD -> BSHD mapping to R.nn.attention.

Variants (`python -m attnfuzz.targets.tvm VARIANT`, `--backend target:tvm/VARIANT`):
  torch_sdpa         F.scaled_dot_product_attention imported with run_ep_decomposition=False:
                     the frontend maps it to R.nn.attention (legalized by TOPI for llvm)
  torch_sdpa_decomp  the same module imported with the default run_ep_decomposition=True:
                     torch's decomposition of SDPA into matmul / softmax, then TVM's ops
  explicit           an explicit matmul / scale / softcap / masks / softmax (f32) / matmul
                     module through the frontend (default decomposition)
  relax_attention    R.nn.attention written directly in Relax with a BlockBuilder: the
                     physical layout to BSHD by permute_dims / reshape / strided_slice /
                     split, GQA by repeat, scale as the op's attribute, causal_mask "TopLeft"
                     or "BottomRight" (documented as tril(k=|Sq - Sk|): used only for Sq <= Sk,
                     where it is the bottom-right diagonal), other masks as one float bias

What TVM 0.27 supports here (measured on llvm): f32 and f16 (the frontend rejects bfloat16
tensors: "Got unsupported ScalarType BFloat16"); the SDPA importer takes only a float
attn_mask (a boolean one is asserted away) and R.nn.attention wants a 4-D bias, so the
module turns the boolean and structural masks into one float mask with torch.where(allowed,
mask, -inf) and expands it to [B', Hq', Sq, Sk] (a 2-D mask or one broadcast over the query
or key dim is refused: "The bias should have 4 dimensions", "The key sequence length and the
bias sequence length should be the same"); is_causal maps to causal_mask
"TopLeft". The importer drops SDPA's `scale` and `enable_gqa` arguments without a word (the
variants still declare scale and GQA: a user passes them, and a wrong answer there is a
finding, docs/findings.md). No dropout (the importer asserts dropout_p == 0).

Conventions, measured: torch_sdpa (R.nn.attention) gives NaN for a fully masked row and
lets 0 * NaN through from masked keys; torch_sdpa_decomp gives 0 there (torch's
decomposition guards the row) but its P @ V is IEEE all the same; the explicit module's
softmax gives NaN rows.
"""

from __future__ import annotations

import sys

import numpy as np

from attnfuzz import layouts, masks
from attnfuzz.targets import _base, _common, _torch_layouts
from attnfuzz.targets._torch_layouts import from_bhsd, to_bhsd, unpack_qkv

def _probe(variant):
    import tvm
    try:
        from tvm.relax.frontend.torch import from_exported_program  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return "tvm's PyTorch frontend does not import: %s" % _base.describe(e)
    return None if tvm.runtime.enabled("llvm") else "this tvm build has no llvm target"


_V = _base.Variant
STACK = _base.Stack("tvm", imports=("tvm", "tvm.relax"), pip=("apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.15.post2"),
                    version_of="tvm", probe=_probe, variants=(
    _V("torch_sdpa", "torch SDPA module -> torch.export -> from_exported_program (R.nn.attention) -> llvm",
       compiled=True, needs=("torch",), quick=True),
    _V("torch_sdpa_decomp", "torch SDPA module -> torch.export -> from_exported_program (decomposed) -> llvm",
       compiled=True, needs=("torch",), quick=True, smoke=False),
    _V("explicit", "explicit torch attention module -> torch.export -> from_exported_program -> llvm",
       compiled=True, needs=("torch",), quick=True, smoke=False),
    _V("relax_attention", "R.nn.attention written in Relax (BlockBuilder), BSHD, causal_mask/bias/scale -> llvm",
       compiled=True, quick=True),
))


# ---------------------------------------------------------------------------------------
# The model code: only torch, tvm, numpy and math from here to the end of the section
# (repro_snippet copies it into a standalone repro.py).
# ---------------------------------------------------------------------------------------

_MODULE_CLASS = []


def make_module(cfg):
    """The nn.Module of one structure. forward(q, k, v | qkv, *extra) with extra the inputs
    cfg names: mask (additive, as sent), bool_mask (as sent), struct (bool [B, 1, Sq, Sk]),
    keep (bool [B, Hq, Sq, Sk]). One class for every structure (torch.export traces the
    second one much faster)."""
    if not _MODULE_CLASS:
        _MODULE_CLASS.append(_attention_class())
    return _MODULE_CLASS[0](cfg).eval()


def _attention_class():
    import torch
    import torch.nn.functional as F

    class Attention(torch.nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg

        def forward(self, *args):
            c = self.cfg
            lay = c["layouts"]
            if c["packed"]:
                q, k, v = unpack_qkv(args[0], lay["q"], c["hq"], c["d"])
                rest = args[1:]
            else:
                q = to_bhsd(args[0], lay["q"], c["hq"], c["d"])
                k = to_bhsd(args[1], lay["k"], c["hkv"], c["d"])
                v = to_bhsd(args[2], lay["v"], c["hkv"], c["dv"])
                rest = args[3:]
            x = dict(zip(c["inputs"], rest))
            allowed = None
            for n in ("bool_mask", "struct"):
                if n in x:
                    allowed = x[n] if allowed is None else allowed & x[n]
            if c["kind"] == "sdpa":
                m = x.get("mask")
                if allowed is not None:      # the importer takes only a float mask
                    base = m if m is not None else torch.zeros((), dtype=q.dtype)
                    m = torch.where(allowed, base, torch.tensor(float("-inf"), dtype=base.dtype))
                if m is not None:            # R.nn.attention wants a 4-D bias at full Sq x Sk
                    if m.dim() == 2:
                        m = m[None, None]
                    m = m.expand(m.shape[0], m.shape[1], q.shape[2], k.shape[2])
                kw = {"scale": c["scale_arg"]} if c["scale_arg"] is not None else {}
                if c["hq"] != c["hkv"]:
                    kw["enable_gqa"] = True
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=c["is_causal"], **kw)
            else:
                o = explicit_bhsd(q, k, v, x.get("mask"), allowed, x.get("keep"), c)
            return from_bhsd(o, c["out_layout"])

    return Attention


def explicit_bhsd(q, k, v, mask, allowed, keep, c):
    """Unfused attention on [B, H, S, D]: matmuls in the case dtype, scores and softmax in
    float32, P cast back to the case dtype."""
    import torch
    if c["hq"] != c["hkv"]:
        rep = c["hq"] // c["hkv"]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    s_scores, s_q, s_k = c["scale_factors"]
    if s_q != 1.0:
        q = q * s_q
    if s_k != 1.0:
        k = k * s_k
    s = (q @ k.transpose(-2, -1)).float()
    if s_scores != 1.0:
        s = s * s_scores
    if c["softcap"] > 0:
        s = c["softcap"] * torch.tanh(s / c["softcap"])
    if mask is not None:
        s = s + mask.float()
    if c["is_causal"]:
        tri = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril()
        allowed = tri if allowed is None else allowed & tri
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if keep is not None:
        p = torch.where(keep, p * c["dropout_scale"], torch.zeros((), dtype=p.dtype))
    return p.to(q.dtype) @ v


def build(cfg, example):
    """torch.export -> from_exported_program -> relax.build(llvm) -> a Relax VM function."""
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program
    module = make_module(cfg)
    args = tuple(torch.from_numpy(np.array(a)) for a in example)   # writable copies
    ep = torch.export.export(module, args)
    mod = from_exported_program(ep, run_ep_decomposition=cfg["decompose"])
    ex = relax.build(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"]


def call(fn, arrays):
    """Runs the VM function on numpy arrays; the output as numpy."""
    import tvm
    out = fn(*(tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays))
    return out[0].numpy()


def relax_to_bshd(bb, x, layout, heads, dim, shape):
    """One unpacked physical tensor (Relax expr of physical shape `shape`) -> [B, S, H, D]."""
    from tvm import relax
    op = relax.op
    if layout == "bshd":
        return x
    if layout == "bhsd":
        return bb.emit(op.permute_dims(x, [0, 2, 1, 3]))
    if layout == "sbhd":
        return bb.emit(op.permute_dims(x, [1, 0, 2, 3]))
    if layout == "bsd":
        b, s, _ = shape
        return bb.emit(op.reshape(x, (b, s, heads, dim)))
    if layout == "channels_first":
        b, _, s = shape
        return bb.emit(op.permute_dims(bb.emit(op.reshape(x, (b, heads, dim, s))), [0, 3, 1, 2]))
    raise ValueError("relax_to_bshd: %r is not an unpacked layout" % (layout,))


def relax_unpack(bb, qkv, layout, heads, dim, shape):
    """A packed QKV buffer -> q, k, v as [B, S, H, D] Relax exprs."""
    from tvm import relax
    op = relax.op
    b = shape[0]
    if layout in ("qkv_bs3hd", "qkv_bsh3d"):
        axis = 2 if layout == "qkv_bs3hd" else 3
        s = shape[1]
        return tuple(bb.emit(op.reshape(bb.emit(op.strided_slice(qkv, axes=[axis], begin=[i], end=[i + 1])),
                                        (b, s, heads, dim))) for i in range(3))
    if layout == "qkv_channels_first":  # [B, 3*H*D, S], chunk(3, dim=1)
        s = shape[2]
        parts = bb.emit(op.split(qkv, 3, axis=1))
        return tuple(relax_to_bshd(bb, bb.emit(relax.TupleGetItem(parts, i)), "channels_first", heads, dim,
                                   (b, heads * dim, s)) for i in range(3))
    raise ValueError("relax_unpack: %r is not a packed layout" % (layout,))


def relax_from_bshd(bb, o, layout, b, s, h, dv):
    """The [B, S, H, Dv] output -> the model's output layout."""
    from tvm import relax
    op = relax.op
    if layout == "bshd":
        return o
    if layout == "bhsd":
        return bb.emit(op.permute_dims(o, [0, 2, 1, 3]))
    if layout == "sbhd":
        return bb.emit(op.permute_dims(o, [1, 0, 2, 3]))
    if layout == "bsd":
        return bb.emit(op.reshape(o, (b, s, h * dv)))
    if layout == "channels_first":
        return bb.emit(op.reshape(bb.emit(op.permute_dims(o, [0, 2, 3, 1])), (b, h * dv, s)))
    raise ValueError("relax_from_bshd: %r is not an output layout" % (layout,))


def build_relax(cfg, example):
    """The Relax module of one structure (R.nn.attention), built for llvm: a VM function."""
    import tvm
    import tvm.tirx as tirx
    from tvm import relax
    op = relax.op
    dt = {"float32": "float32", "float16": "float16"}[str(example[0].dtype)]
    b, hq, hkv, sq, sk, d, dv = cfg["shape"]
    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType(tuple(a.shape), str(a.dtype))) for n, a in zip(cfg["names"], example)]
    with bb.function("main", params):
        with bb.dataflow():
            lay = cfg["layouts"]
            if cfg["packed"]:
                q, k, v = relax_unpack(bb, params[0], lay["q"], hq, d, tuple(example[0].shape))
                rest = params[1:]
            else:
                q = relax_to_bshd(bb, params[0], lay["q"], hq, d, tuple(example[0].shape))
                k = relax_to_bshd(bb, params[1], lay["k"], hkv, d, tuple(example[1].shape))
                v = relax_to_bshd(bb, params[2], lay["v"], hkv, dv, tuple(example[2].shape))
                rest = params[3:]
            if hq != hkv:                  # R.nn.attention has no GQA: repeat each kv head
                k = bb.emit(op.repeat(k, hq // hkv, axis=2))
                v = bb.emit(op.repeat(v, hq // hkv, axis=2))
            x = dict(zip(cfg["inputs"], rest))
            bias = x.get("mask")
            allowed = None
            for n in ("bool_mask", "struct"):
                if n in x:
                    allowed = x[n] if allowed is None else bb.emit(op.logical_and(allowed, x[n]))
            if allowed is not None:
                base = bias if bias is not None else relax.const(0.0, dt)
                bias = bb.emit(op.where(allowed, base, relax.const(float("-inf"), dt)))
            if bias is not None:           # 4-D, ending with Sq x Sk
                bias = bb.emit(op.broadcast_to(bias, (b, hq, sq, sk)))
            scale = tirx.FloatImm(dt, cfg["scale_arg"]) if cfg["scale_arg"] is not None else None
            o = bb.emit(op.nn.attention(q, k, v, bias=bias, scale=scale, causal_mask=cfg["causal_mask"]))
            out = bb.emit_output(relax_from_bshd(bb, o, cfg["out_layout"], b, sq, hq, dv))
        bb.emit_func_output(out)
    ex = relax.build(bb.get(), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"]


def call_relax(fn, arrays):
    """Runs the Relax VM function on numpy arrays; the output as numpy."""
    import tvm
    return fn(*(tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays)).numpy()


def config(case, mask, bool_mask, variant):
    """The static structure of one case as plain values."""
    lay = dict(case.layouts)
    left, right = case.window
    only_causal = (bool(case.causal) and _common.offset_zero_always(case) and case.key_padding is None
                   and left < 0 and right < 0)
    inputs = []
    if mask is not None:
        inputs.append("mask")
    if bool_mask is not None:
        inputs.append("bool_mask")
    is_causal = only_causal and (variant == "explicit" or (mask is None and bool_mask is None))
    causal_mask = None
    if variant == "relax_attention":
        # the op's own causal masks, beside any bias; the rest of the structure in the bias
        plain = bool(case.causal) and case.key_padding is None and left < 0 and right < 0
        if plain and _common.offset_zero_always(case):
            causal_mask = "TopLeft"
        elif plain and case.diagonal == "bottom_right" and case.q_len <= case.kv_len:
            causal_mask = "BottomRight"
        is_causal = causal_mask is not None
    if masks.has_structural(case) and not is_causal:
        inputs.append("struct")
    if variant == "explicit" and case.dropout_p > 0:
        inputs.append("keep")
    return {
        "kind": {"explicit": "explicit", "relax_attention": "relax"}.get(variant, "sdpa"),
        "decompose": variant != "torch_sdpa", "causal_mask": causal_mask,
        "shape": (case.batch, case.q_heads, case.kv_heads, case.q_len, case.kv_len, case.head_dim, case.v_head_dim),
        "names": (["qkv"] if case.packed else ["q", "k", "v"]) + inputs,
        "layouts": lay, "packed": case.packed, "out_layout": _common.OUT_LAYOUT[lay["q"]],
        "hq": case.q_heads, "hkv": case.kv_heads, "d": case.head_dim, "dv": case.v_head_dim,
        "scale_arg": float(case.scale) if case.scale_given else None,
        "scale_factors": _common.scale_factors(case), "softcap": float(case.softcap), "is_causal": is_causal,
        "inputs": inputs, "dropout_scale": _common.dropout_scale(case.dropout_p),
    }


def arguments(req, cfg):
    """The module's input arrays, in order (_common.dense_arguments); a bf16 mask as f32
    (exact): neither torch.from_numpy nor tvm's frontend takes bf16 (explicit only; the
    SDPA variants refuse a mask dtype other than Q's)."""
    if req.mask is not None and req.mask.dtype.name == "bfloat16":
        req = req.replace(mask=req.mask.astype(np.float32))
    return _common.dense_arguments(req, cfg["inputs"])


class Target(_base.Target):
    """One variant: a cache of built Relax VM functions keyed by structure."""
    STACK = STACK
    CACHE_SIZE = 32

    def declare(self) -> dict:
        caps = ["f32", "f16", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal", "padding", "window",
                "strided", "tf32"]
        conv = {"masked_rows": "nan", "masked_values": "ieee"}
        if self.variant == "torch_sdpa_decomp":
            conv["masked_rows"] = "zero"
        if self.variant != "explicit":
            # R.nn.attention and torch's decomposition add a boolean mask as -inf: a masked
            # key's NaN or +Inf score (or a NaN query) makes the row NaN (measured by the
            # self-test's check_conventions)
            conv["masked_keys"] = "ieee"
        if self.variant == "explicit":
            # R.nn.attention has no softcap and adds the bias in Q's dtype; tvm's SDPA importer
            # asserts dropout_p == 0: only the explicit module takes those
            caps += ["softcap", "mask_dtype", "dropout"]
            conv["dropout"] = "counter"
        # tvm's PyTorch frontend has no bfloat16
        return {"caps": caps, "dtypes": ["f32", "f16"], "limits": {"max_bytes": 64 << 20}, "conventions": conv}

    def build(self, req):
        cfg = config(req.case, req.mask, req.bool_mask, self.variant)
        example = arguments(req, cfg)
        return (build_relax(cfg, example) if cfg["kind"] == "relax" else build(cfg, example)), cfg

    def execute(self, art, req):
        from attnfuzz.worker import Result
        fn, cfg = art
        args = arguments(req, cfg)
        out = call_relax(fn, args) if cfg["kind"] == "relax" else call(fn, args)
        return Result(out, layout=cfg["out_layout"])


def repro_snippet(variant: str) -> str:
    """Python source defining attention(req) with torch, tvm and numpy only; returns the
    output as [B, Hq, Sq, Dv]."""
    STACK.variant(variant)
    return _common.snippet(
        ["import torch", "import tvm", "from tvm import relax"],
        _torch_layouts.FUNCTIONS + (make_module, _attention_class, explicit_bhsd, build, call, relax_to_bshd,
                                    relax_unpack, relax_from_bshd, build_relax, call_relax, config, arguments),
        consts={"VARIANT": variant, "_MODULE_CLASS": []}, tail='''

def attention(req):
    """req.q, req.k, req.v: numpy arrays in the case's physical layouts (req.qkv: the packed
    buffer)."""
    case = req.case
    cfg = config(case, req.mask, req.bool_mask, VARIANT)
    args = arguments(req, cfg)
    out = call_relax(build_relax(cfg, args), args) if cfg["kind"] == "relax" else call(build(cfg, args), args)
    return layouts.to_bhsd(out, cfg["out_layout"], case.q_heads, case.v_head_dim)
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK))
