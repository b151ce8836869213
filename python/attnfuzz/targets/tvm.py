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

import inspect
import sys
import time

import numpy as np

from attnfuzz.targets import _common

NAME = "tvm"

VARIANTS = {
    "torch_sdpa": "torch SDPA module -> torch.export -> from_exported_program (R.nn.attention) -> llvm",
    "torch_sdpa_decomp": "torch SDPA module -> torch.export -> from_exported_program (decomposed) -> llvm",
    "explicit": "explicit torch attention module -> torch.export -> from_exported_program -> llvm",
    "relax_attention": "R.nn.attention written in Relax (BlockBuilder), BSHD, causal_mask/bias/scale -> llvm",
}


def available(variant: str) -> tuple:
    if variant not in VARIANTS:
        return False, "unknown variant %r (known: %s)" % (variant, ", ".join(VARIANTS))
    try:
        import tvm
        from tvm import relax  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means unavailable
        return False, "tvm does not import: %s: %s" % (type(e).__name__, e)
    try:
        import torch  # noqa: F401
        from tvm.relax.frontend.torch import from_exported_program  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return False, "tvm's PyTorch frontend does not import: %s: %s" % (type(e).__name__, e)
    if not tvm.runtime.enabled("llvm"):
        return False, "this tvm build has no llvm target"
    return True, ""


# ---------------------------------------------------------------------------------------
# The model code: only torch, tvm, numpy and math from here to the end of the section
# (repro_snippet copies it into a standalone repro.py).
# ---------------------------------------------------------------------------------------

def to_bhsd(x, layout, heads, dim):
    """One unpacked physical tensor -> its [B, H, S, D] view."""
    if layout == "bhsd":
        return x
    if layout == "bshd":
        return x.transpose(1, 2)
    if layout == "sbhd":
        return x.permute(1, 2, 0, 3)
    if layout == "bsd":
        b, s, _ = x.shape
        return x.reshape(b, s, heads, dim).transpose(1, 2)
    if layout == "channels_first":
        b, _, s = x.shape
        return x.reshape(b, heads, dim, s).transpose(2, 3)
    raise ValueError("to_bhsd: %r is not an unpacked layout" % (layout,))


def unpack_qkv(qkv, layout, heads, dim):
    """A packed QKV buffer -> q, k, v as [B, H, S, D] views, the way models split it."""
    if layout == "qkv_bs3hd":          # [B, S, 3, H, D]
        q, k, v = qkv.unbind(2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if layout == "qkv_bsh3d":          # [B, S, H, 3, D]: Q, K, V of each head adjacent
        q, k, v = qkv.unbind(3)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if layout == "qkv_channels_first":  # [B, 3*H*D, S]: the UNet attention block
        b = qkv.shape[0]
        q, k, v = qkv.reshape(b, 3 * heads * dim, -1).chunk(3, dim=1)
        return tuple(t.reshape(b, heads, dim, -1).transpose(2, 3) for t in (q, k, v))
    raise ValueError("unpack_qkv: %r is not a packed layout" % (layout,))


def from_bhsd(o, layout):
    """The [B, H, S, Dv] output -> the model's output layout."""
    if layout == "bhsd":
        return o
    if layout == "bshd":
        return o.transpose(1, 2)
    if layout == "sbhd":
        return o.permute(2, 0, 1, 3)
    b, h, s, dv = o.shape
    if layout == "bsd":
        return o.transpose(1, 2).reshape(b, s, h * dv)
    if layout == "channels_first":
        return o.transpose(2, 3).reshape(b, h * dv, s)
    raise ValueError("from_bhsd: %r is not an output layout" % (layout,))


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
    only_causal = (bool(case.causal) and _offset_zero_always(case) and case.key_padding is None
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
        if plain and _offset_zero_always(case):
            causal_mask = "TopLeft"
        elif plain and case.diagonal == "bottom_right" and case.q_len <= case.kv_len:
            causal_mask = "BottomRight"
        is_causal = causal_mask is not None
    if _has_structural(case) and not is_causal:
        inputs.append("struct")
    if variant == "explicit" and case.dropout_p > 0:
        inputs.append("keep")
    return {
        "kind": {"explicit": "explicit", "relax_attention": "relax"}.get(variant, "sdpa"),
        "decompose": variant != "torch_sdpa", "causal_mask": causal_mask,
        "shape": (case.batch, case.q_heads, case.kv_heads, case.q_len, case.kv_len, case.head_dim, case.v_head_dim),
        "names": (["qkv"] if case.packed else ["q", "k", "v"]) + inputs,
        "layouts": lay, "packed": case.packed, "out_layout": _OUT_LAYOUT[lay["q"]],
        "hq": case.q_heads, "hkv": case.kv_heads, "d": case.head_dim, "dv": case.v_head_dim,
        "scale_arg": float(case.scale) if case.scale_given else None,
        "scale_factors": _scale_factors(case), "softcap": float(case.softcap), "is_causal": is_causal,
        "inputs": inputs, "dropout_scale": 0.0 if case.dropout_p >= 1.0 else 1.0 / (1.0 - case.dropout_p),
    }


def arguments(case, q, k, v, mask, bool_mask, cfg):
    """The module's input arrays, in order."""
    if case.packed:
        args = [np.ascontiguousarray(case.qkv)]
    else:
        args = [np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v)]
    for n in cfg["inputs"]:
        if n == "mask":
            if mask.dtype.name == "bfloat16":   # neither torch.from_numpy nor tvm's frontend takes bf16:
                mask = mask.astype(np.float32)  # exact in f32 (explicit only; the SDPA variants refuse it)
            args.append(np.ascontiguousarray(mask))
        elif n == "bool_mask":
            args.append(np.ascontiguousarray(bool_mask))
        elif n == "struct":
            args.append(_structural_allowed(case))
        elif n == "keep":
            args.append(_keep_mask(case))
    return args


# ---------------------------------------------------------------------------------------
# Host code shared with the other graph targets; the snippet inlines these.
# ---------------------------------------------------------------------------------------

_OUT_LAYOUT = _common.OUT_LAYOUT
_offset_zero_always = _common.offset_zero_always
_has_structural = _common.has_structural
_structural_allowed = _common.structural_allowed
_scale_factors = _common.scale_factors
_keep_mask = _common.keep_mask


def caps_for(variant: str) -> dict:
    """The hello fields of a variant."""
    conv = {"causal": ["top_left", "bottom_right", "bottom_right_valid", "explicit"], "masked_rows": "nan",
            "masked_values": "ieee", "dropout": "none"}
    caps = ["f32", "f16", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal", "padding", "window",
            "strided", "tf32"]
    if variant == "torch_sdpa_decomp":
        conv["masked_rows"] = "zero"
    if variant == "explicit":
        caps += ["softcap", "mask_dtype"]
        if _common.have_counter_rng():
            caps.append("dropout")
            conv["dropout"] = "counter"
    return {"caps": caps, "layouts": list(_common.ALL_LAYOUTS), "dtypes": ["f32", "f16"],
            "limits": {"max_bytes": 64 << 20}, "conventions": conv,
            "compile_key": ["shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap", "dropout"]}


def _structure_key(case, mask, bool_mask):
    def shp(x):
        return None if x is None else (tuple(x.shape), str(x.dtype))
    return (case.key("shapes", "dtype", "causal", "scale", "softcap", "dropout"),
            tuple(sorted(case.layouts.items())), case.packed, shp(mask), shp(bool_mask))


class Target:
    """One variant: a cache of built Relax VM functions keyed by structure."""

    def __init__(self, variant: str):
        self.variant = variant
        self.cache = _common.LRU(32)

    def run(self, case, q, k, v, mask=None, bool_mask=None):
        from attnfuzz.worker import Result, Unsupported
        _common.check_score_budget(case)
        if case.dtype == "bf16":
            raise Unsupported("tvm's PyTorch frontend has no bfloat16")
        if self.variant != "explicit":
            if case.softcap > 0:
                raise Unsupported("this attention op has no softcap")
            if case.dropout_p > 0:
                raise Unsupported("tvm's SDPA importer asserts dropout_p == 0")
            if mask is not None and case.amask.get("dtype", "f32") != case.dtype:
                raise Unsupported("R.nn.attention adds the bias in Q's dtype")
        elif case.dropout_p > 0 and not _common.have_counter_rng():
            raise Unsupported("dropout needs attnfuzz.rng (the counter keep mask)")
        key = _structure_key(case, mask, bool_mask)
        ent = self.cache.get(key)
        compile_s = 0.0
        if ent is None:
            t0 = time.perf_counter()
            cfg = config(case, mask, bool_mask, self.variant)
            example = arguments(case, q, k, v, mask, bool_mask, cfg)
            fn = build_relax(cfg, example) if cfg["kind"] == "relax" else build(cfg, example)
            compile_s = time.perf_counter() - t0
            ent = self.cache.put(key, (fn, cfg))
        fn, cfg = ent
        t1 = time.perf_counter()
        args = arguments(case, q, k, v, mask, bool_mask, cfg)
        out = call_relax(fn, args) if cfg["kind"] == "relax" else call(fn, args)
        return Result(out, layout=cfg["out_layout"], compile_s=compile_s, run_s=time.perf_counter() - t1)


def repro_snippet(variant: str) -> str:
    """Python source defining attention(case, q, k, v, mask=None, bool_mask=None) with torch,
    tvm and numpy only; returns the output in the case's output layout (see _OUT_LAYOUT)."""
    if variant not in VARIANTS:
        raise ValueError("unknown variant %r" % (variant,))
    parts = ["import math", "import numpy as np", "import torch", "import tvm", "from tvm import relax", "",
             "VARIANT = %r" % variant, "_OUT_LAYOUT = %r" % (_common.OUT_LAYOUT,), ""]
    for f in (_common.offset_zero_always, _common.has_structural, _common.structural_allowed, _common.scale_factors):
        parts.append(inspect.getsource(f))
    parts.append("_offset_zero_always, _has_structural = offset_zero_always, has_structural")
    parts.append("_structural_allowed, _scale_factors = structural_allowed, scale_factors")
    parts.append(_KEEP_SNIPPET)
    parts.append("_MODULE_CLASS = []")
    for f in (to_bhsd, unpack_qkv, from_bhsd, make_module, _attention_class, explicit_bhsd, build, call, relax_to_bshd, relax_unpack,
              relax_from_bshd, build_relax, call_relax, config, arguments):
        parts.append(inspect.getsource(f))
    parts.append('''
def attention(case, q, k, v, mask=None, bool_mask=None):
    """q, k, v: numpy arrays in the case's physical layouts (case.qkv: the packed buffer)."""
    cfg = config(case, mask, bool_mask, VARIANT)
    args = arguments(case, q, k, v, mask, bool_mask, cfg)
    if cfg["kind"] == "relax":
        return call_relax(build_relax(cfg, args), args)
    return call(build(cfg, args), args)
''')
    return "\n".join(parts)


_KEEP_SNIPPET = '''
def _keep_mask(case):
    """The dropout keep mask bool [B, Hq, Sq, Sk] (attnfuzz.rng.dropout_keep, Philox)."""
    from attnfuzz import rng
    return rng.dropout_keep(case.dropout_seed, case.dropout_p, case.batch, case.q_heads, case.q_len, case.kv_len)
'''


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in VARIANTS:
        sys.stderr.write("usage: python -m attnfuzz.targets.tvm VARIANT (one of: %s)\n" % ", ".join(VARIANTS))
        return 2
    variant = argv[0]
    ok, why = available(variant)
    if not ok:
        sys.stderr.write("attnfuzz.targets.tvm: %s is unavailable: %s\n" % (variant, why))
        return 3
    import tvm
    from attnfuzz.worker import serve
    t = Target(variant)
    return serve(t.run, name=NAME, version=tvm.__version__, variant=variant, **caps_for(variant))


if __name__ == "__main__":
    sys.exit(main())
