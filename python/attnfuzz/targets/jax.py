"""JAX attention as users write it: a jitted function fed Q, K, V (or the packed QKV buffer)
in the case's PHYSICAL layout; it moves them to jax.nn.dot_product_attention's BTNH (= bshd)
layout inside the jit, so the transposes are part of what XLA compiles.

Variants (`python -m attnfuzz.targets.jax VARIANT`, `--backend target:jax/VARIANT`):
  xla       jax.nn.dot_product_attention(implementation="xla")
  explicit  jnp under jit: einsum, scale at the case's placement, softcap, masks, softmax in
            float32 (the Hugging Face habit), dropout by the counter RNG's keep mask, einsum
  cudnn     jax.nn.dot_product_attention(implementation="cudnn"): needs a CUDA GPU

Serving paths (docs/design.md section 2, "Serving forms"; attnfuzz.targets._jax_serving):
  xla_seqlens     dot_product_attention(implementation="xla") with query_seq_lengths and
                  key_value_seq_lengths on a padded batch (packed THD segments gathered)
  cudnn_seqlens   the same with implementation="cudnn" (CUDA GPU)
  pallas_mha      pallas attention.mha with segment_ids over one packed sequence (CUDA GPU)
  pallas_decode   pallas decode_attention.gqa (split-KV decode), sinks through its residuals
                  (CUDA GPU)
  pallas_paged    pallas paged_attention over the page cache and block table (CUDA GPU)

Masks (xla, cudnn): the additive mask goes to `bias` as sent (its own dtype, 2-D or 4-D),
the boolean mask to `mask`. A structural mask whose diagonal offset is 0 for every draw
(top-left, explicit 0, bottom-right with Sq == Sk) uses the native arguments: is_causal,
local_window_size (an unbounded side becomes Sq + Sk), key_value_seq_lengths; any other
diagonal is a boolean [B, 1, Sq, Sk] input combined with `mask`, as user code does.

Measured on jax 0.10.2 CPU: implementation "xla" replaces masked logits (mask, is_causal,
window, seq lengths) by -0.7 * finfo.max rather than -inf, so a row that these mask
entirely gets the mean of V over the keys they mask, and a row masked entirely by -inf in
`bias` gives NaN (declared: masked_rows "mean", which the oracle models as exactly that, a
row of -inf only allowed 0 or NaN).
Masked keys get weight exactly 0 and P @ V lets 0 * NaN through (masked_values "ieee").
XLA flushes subnormal inputs and results to zero (FTZ/DAZ; jax "sharp bits", jax-ml/jax#16200):
declared denormals "flush" for every variant. The explicit function's einsum makes the
scores in the case dtype (scores "dtype").
Implementation "cudnn" (jax 0.11.2, H100) turns the boolean mask into a large negative
bias that it *adds* to the scores (-2 << 14 in f16, -2 << 40 in bf16), so a fully masked
row comes out as plain attention over all keys in f16 and as the mean of V in bf16, where
the bias swamps the scores (declared by dtype: masked_rows {"f16": "unmasked", "bf16":
"mean"}; a row of -inf only comes out 0);
a masked key whose f16 score exceeds the live ones by more than 32768 keeps its weight (a
known bug); it takes a right window only as 0 or under plain causal, and a
window only for Sq <= Sk (other windows go in the boolean mask here), and wants bias and
mask at full Sq x Sk (broadcast here). The explicit function gives NaN for fully masked
rows (softmax of all -inf).
dot_product_attention needs V's head dim equal to K's (no cap dv).

Precision: x64 stays off. f32 matmuls run under jax.default_matmul_precision("highest")
unless the case allows TF32 ("default"). On a CPU both are f32; on an H100 "default" runs
f32 matmuls in TF32 (measured: 6.5e-4 off float64 on a unit-scale case, 5.4e-7 at
"highest"), so an f32 case that forbids TF32 must not be left at jax's default.
"""

from __future__ import annotations

import importlib
import os
import sys

import numpy as np

from attnfuzz import layouts, masks
from attnfuzz.targets import _base, _common

# The serving variants (run by attnfuzz.targets._jax_serving.ServingTarget, their declarations
# say) and the kind of call each makes; the pallas kernels' modules.
SERVING_KINDS = {"xla_seqlens": "seqlens", "cudnn_seqlens": "seqlens", "pallas_mha": "segments",
                 "pallas_decode": "decode", "pallas_paged": "paged"}
PALLAS_MODULES = {"segments": "jax.experimental.pallas.ops.gpu.attention",
                  "decode": "jax.experimental.pallas.ops.gpu.decode_attention",
                  "paged": "jax.experimental.pallas.ops.gpu.paged_attention"}
# What a fully masked row gives through implementation="cudnn", per dtype: the boolean mask
# becomes a finite bias, -2 << 14 in f16 (plain attention over every key: "unmasked") and
# -2 << 40 in bf16, which swamps every score (the mean of V over the masked keys: "mean")
CUDNN_MASKED_ROWS = {"f16": "unmasked", "bf16": "mean"}
PALLAS = ("pallas_mha", "pallas_decode", "pallas_paged")


def interpret_mode():
    """ATTNFUZZ_PALLAS_INTERPRET=1: the pallas variants run in pallas's interpret mode on
    the default (CPU) device."""
    return os.environ.get("ATTNFUZZ_PALLAS_INTERPRET", "") not in ("", "0")


def _probe(variant):
    if variant in PALLAS:
        mod = PALLAS_MODULES[SERVING_KINDS[variant]]
        try:
            importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 - the module is not in this jax
            return "%s does not import: %s" % (mod, _base.describe(e))
        if interpret_mode():
            return None       # pallas's interpret mode: the kernels as jax programs on the CPU
    elif variant not in ("cudnn", "cudnn_seqlens"):
        return None
    import jax
    try:
        gpus = jax.devices("gpu")
    except Exception as e:  # noqa: BLE001 - no GPU backend at all
        return "%s needs a CUDA GPU; jax has none (%s)" % (variant, _base.describe(e))
    return None if gpus else "%s needs a CUDA GPU; jax sees none" % variant


_V = _base.Variant
_SERVING = "_jax_serving.ServingTarget"
STACK = _base.Stack("jax", imports=("jax",), pip=("jax==0.10.2", "jaxlib==0.10.2"), probe=_probe, trains=True,
                    variants=(
    _V("xla", "jax.nn.dot_product_attention(implementation='xla') under jit, inputs in the physical layout",
       compiled=True),
    _V("explicit", "jnp under jit: einsum / scale / softcap / masks / f32 softmax / dropout / einsum", compiled=True),
    _V("cudnn", "jax.nn.dot_product_attention(implementation='cudnn') under jit (CUDA GPU only)", gpu=True,
       compiled=True),
    # serving paths (attnfuzz.targets._jax_serving); forward only
    _V("xla_seqlens", "jax.nn.dot_product_attention(implementation='xla') with query/key_value_seq_lengths on a "
       "padded batch: THD segments gathered, the valid rows back to THD", compiled=True, backward=False,
       serving=("packed",), target=_SERVING),
    _V("cudnn_seqlens", "the same with implementation='cudnn' (CUDA GPU only)", gpu=True, compiled=True,
       backward=False, serving=("packed",), target=_SERVING),
    _V("pallas_mha", "pallas attention.mha over one packed sequence with segment_ids (CUDA GPU only)", gpu=True,
       compiled=True, backward=False, serving=("packed",), target=_SERVING),
    _V("pallas_decode", "pallas decode_attention.gqa (split-KV), a call row per query with its key range; a sink "
       "through the residuals (CUDA GPU only)", gpu=True, compiled=True, backward=False,
       serving=("packed", "sinks"), target=_SERVING),
    _V("pallas_paged", "pallas paged_attention over the page cache and block table, a call row per query with its "
       "length (CUDA GPU only)", gpu=True, compiled=True, backward=False, serving=("packed", "paged"),
       target=_SERVING),
))


# ---------------------------------------------------------------------------------------
# The model code: only jax, numpy and math from here to the end of the section (repro_snippet
# copies it into a standalone repro.py).
# ---------------------------------------------------------------------------------------

def to_btnh(x, layout, heads, dim):
    """One unpacked physical tensor -> [B, S, H, D] (BTNH), the layout
    jax.nn.dot_product_attention takes."""
    import jax.numpy as jnp
    if layout == "bshd":
        return x
    if layout == "bhsd":
        return jnp.transpose(x, (0, 2, 1, 3))
    if layout == "sbhd":
        return jnp.transpose(x, (1, 0, 2, 3))
    if layout == "bsd":
        b, s, _ = x.shape
        return jnp.reshape(x, (b, s, heads, dim))
    if layout == "channels_first":
        b, _, s = x.shape
        return jnp.transpose(jnp.reshape(x, (b, heads, dim, s)), (0, 3, 1, 2))
    raise ValueError("to_btnh: %r is not an unpacked layout" % (layout,))


def unpack_btnh(qkv, layout, heads, dim):
    """A packed QKV buffer -> q, k, v as [B, S, H, D], the way models split it."""
    import jax.numpy as jnp
    if layout == "qkv_bs3hd":          # [B, S, 3, H, D]
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    if layout == "qkv_bsh3d":          # [B, S, H, 3, D]: Q, K, V of each head adjacent
        return qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
    if layout == "qkv_channels_first":  # [B, 3*H*D, S]: qkv.reshape(b, 3c, -1).chunk(3, dim=1)
        q, k, v = jnp.split(qkv, 3, axis=1)
        return tuple(to_btnh(t, "channels_first", heads, dim) for t in (q, k, v))
    raise ValueError("unpack_btnh: %r is not a packed layout" % (layout,))


def from_btnh(o, layout):
    """The [B, S, H, Dv] output -> the model's output layout."""
    import jax.numpy as jnp
    if layout == "bshd":
        return o
    if layout == "bhsd":
        return jnp.transpose(o, (0, 2, 1, 3))
    if layout == "sbhd":
        return jnp.transpose(o, (1, 0, 2, 3))
    b, s, h, dv = o.shape
    if layout == "bsd":
        return jnp.reshape(o, (b, s, h * dv))
    if layout == "channels_first":
        return jnp.reshape(jnp.transpose(o, (0, 2, 3, 1)), (b, h * dv, s))
    raise ValueError("from_btnh: %r is not an output layout" % (layout,))


def full_qk(m, sq, sk):
    """A 2-D or 4-D mask as 4-D [B', H', Sq, Sk]: broadcast over the query and key dims."""
    import jax.numpy as jnp
    if m is None:
        return None
    m = jnp.reshape(m, (1,) * (4 - m.ndim) + tuple(m.shape))
    return jnp.broadcast_to(m, (m.shape[0], m.shape[1], sq, sk))


def make_fn(cfg):
    """The attention function of one structure, jitted. Arguments (in order): q, k, v (or
    qkv), then the inputs cfg names: mask (the additive mask, jax's `bias`), bool_mask
    (jax's `mask`), struct (bool [B, 1, Sq, Sk]), kv_len (int32 [B]), keep (bool
    [B, Hq, Sq, Sk])."""
    import jax
    import jax.numpy as jnp

    lay = cfg["layouts"]
    hq, hkv, d, dv = cfg["hq"], cfg["hkv"], cfg["d"], cfg["dv"]
    names = cfg["inputs"]

    def fn(*args):
        if cfg["packed"]:
            q, k, v = unpack_btnh(args[0], lay["q"], hq, d)
            rest = args[1:]
        else:
            q = to_btnh(args[0], lay["q"], hq, d)
            k = to_btnh(args[1], lay["k"], hkv, d)
            v = to_btnh(args[2], lay["v"], hkv, dv)
            rest = args[3:]
        a = dict(zip(names, rest))
        bias, mask, struct = a.get("mask"), a.get("bool_mask"), a.get("struct")
        if struct is not None:
            mask = struct if mask is None else jnp.logical_and(mask, struct)
        if cfg["implementation"] == "cudnn":
            # cudnn wants the bias (and the mask it becomes) at full Sq x Sk ("Bias must have
            # same seq length as QKV"); xla broadcasts them
            bias, mask = full_qk(bias, q.shape[1], k.shape[1]), full_qk(mask, q.shape[1], k.shape[1])
        if cfg["kind"] == "sdpa":
            o = jax.nn.dot_product_attention(
                q, k, v, bias=bias, mask=mask, scale=cfg["scale_arg"], is_causal=cfg["is_causal"],
                key_value_seq_lengths=a.get("kv_len"), local_window_size=cfg["window_arg"],
                implementation=cfg["implementation"])
        else:
            o = explicit_btnh(q, k, v, bias, mask, a.get("keep"), cfg)
        return from_btnh(o, cfg["out_layout"])

    if not cfg["grads"]:
        return jax.jit(fn)
    # Backward (the way a training step asks for it): jax.vjp of the same function with
    # respect to q, k, v (or the packed buffer) and, for dmask, the bias; the cotangent dO
    # is the last argument, in the output layout. Returns (out, (grads...)).
    diff = [0] if cfg["packed"] else [0, 1, 2]
    if "dmask" in cfg["grads"]:
        diff.append(len(diff) + names.index("mask"))

    def fwd_bwd(*args):
        args, do = list(args[:-1]), args[-1]

        def f(*d):
            a = list(args)
            for i, x in zip(diff, d):
                a[i] = x
            return fn(*a)
        out, pull = jax.vjp(f, *[args[i] for i in diff])
        return out, pull(do)

    return jax.jit(fwd_bwd)


def explicit_btnh(q, k, v, bias, mask, keep, cfg):
    """The unfused attention on [B, S, H, D] tensors: matmuls in the case dtype, scores,
    masks and softmax in float32, P cast back to the case dtype."""
    import jax
    import jax.numpy as jnp
    dt = q.dtype
    hq, hkv = cfg["hq"], cfg["hkv"]
    if hq != hkv:                      # GQA: query head h reads kv head h // (hq / hkv)
        k = jnp.repeat(k, hq // hkv, axis=2)
        v = jnp.repeat(v, hq // hkv, axis=2)
    s_scores, s_q, s_k = cfg["scale_factors"]
    if s_q != 1.0:
        q = (q * jnp.asarray(s_q, dt)).astype(dt)
    if s_k != 1.0:
        k = (k * jnp.asarray(s_k, dt)).astype(dt)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    if s_scores != 1.0:
        s = s * jnp.float32(s_scores)
    if cfg["softcap"] > 0:
        c = jnp.float32(cfg["softcap"])
        s = c * jnp.tanh(s / c)
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    allowed = mask
    if cfg["is_causal"]:               # offset-0 diagonal, built in the graph
        sq, sk = s.shape[-2], s.shape[-1]
        tri = jnp.tril(jnp.ones((sq, sk), dtype=bool))
        allowed = tri if allowed is None else jnp.logical_and(allowed, tri)
    if allowed is not None:
        s = jnp.where(allowed, s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    if keep is not None:
        p = jnp.where(keep, p * jnp.float32(cfg["dropout_scale"]), jnp.float32(0))
    o = jnp.einsum("bhqk,bkhd->bqhd", p.astype(dt), v)
    return o


def config(case, mask, bool_mask, variant):
    """The static structure of one case (what a recompile depends on) as plain values."""
    lay = dict(case.layouts)
    left, right = case.window
    native = _common.offset_zero_always(case)
    inputs = []
    if mask is not None:
        inputs.append("mask")
    if bool_mask is not None:
        inputs.append("bool_mask")
    if variant == "explicit":
        # the explicit graph builds only an offset-0 causal triangle itself; everything
        # else structural is the host's boolean input
        is_causal = bool(case.causal) and native and case.key_padding is None and left < 0 and right < 0
        struct = masks.has_structural(case) and not is_causal
        window_arg = None
    else:
        big = case.q_len + case.kv_len
        window_arg = None
        if native and (left >= 0 or right >= 0):
            window_arg = (left if left >= 0 else big, right if right >= 0 else big)
            # cudnn takes a right window only as 0 or under plain causal (it raises otherwise):
            # then the structural masks go in the boolean mask, as a user would do
            # and only for Sq <= Sk ("Sliding window attention is only supported with
            # max_s_q <= max_s_kv")
            plain_causal = bool(case.causal) and case.key_padding is None
            if variant == "cudnn" and (not (window_arg[1] == 0 or plain_causal) or case.q_len > case.kv_len):
                window_arg = None
                native = False
        is_causal = bool(case.causal) and native
        struct = masks.has_structural(case) and not native
    if struct:
        inputs.append("struct")
    if native and variant != "explicit" and case.key_padding is not None:
        inputs.append("kv_len")
    if variant == "explicit" and case.dropout_p > 0:
        inputs.append("keep")
    return {
        "kind": "explicit" if variant == "explicit" else "sdpa",
        "implementation": "cudnn" if variant == "cudnn" else "xla",
        "layouts": lay, "packed": case.packed, "out_layout": _common.OUT_LAYOUT[lay["q"]],
        "hq": case.q_heads, "hkv": case.kv_heads, "d": case.head_dim, "dv": case.v_head_dim,
        "scale_arg": float(case.scale) if case.scale_given else None,
        "scale_factors": _common.scale_factors(case), "softcap": float(case.softcap),
        "is_causal": is_causal, "window_arg": window_arg, "inputs": inputs,
        "dropout_scale": _common.dropout_scale(case.dropout_p),
        "precision": "default" if (case.allow_tf32 and case.dtype == "f32") else "highest",
        "device": "gpu" if variant == "cudnn" else None,     # None: jax's default device
        "grads": tuple(case.grads),
    }


def arguments(req, cfg):
    """The inputs of the jitted function, in order (_common.dense_arguments); a backward
    case's dO last."""
    args = _common.dense_arguments(req, cfg["inputs"])
    if cfg["grads"]:
        args.append(np.ascontiguousarray(req.dout))
    return args


def call(fn, args, cfg):
    """Runs the jitted function; the output as numpy, or for a backward case (output,
    {"q", "k", "v" or "qkv", and "mask" for dmask: the gradient of each physical input})."""
    import jax
    import numpy as np
    dev = jax.devices(cfg["device"])[0] if cfg["device"] else jax.devices()[0]
    with jax.default_matmul_precision(cfg["precision"]), jax.default_device(dev):
        res = fn(*args)
        jax.block_until_ready(res)
    if not cfg["grads"]:
        return np.asarray(res)
    out, grads = res
    names = ["qkv"] if cfg["packed"] else ["q", "k", "v"]
    if "dmask" in cfg["grads"]:
        names.append("mask")
    return np.asarray(out), {n: np.asarray(g) for n, g in zip(names, grads)}


def _has_gpu() -> bool:
    try:
        import jax
        return bool(jax.devices("gpu"))
    except Exception:  # noqa: BLE001 - no GPU backend
        return False


class Target(_base.Target):
    """One variant: a cache of jitted functions keyed by structure."""
    STACK = STACK
    LAZY_COMPILE = True           # jit compiles on the first call of a structure
    # jax's cuDNN checks (check_is_flash_attention): NotImplementedError for what cuDNN's
    # flash attention does not take, e.g. a training graph with a bias and an odd length
    REFUSALS = ("Unsupported sequence length", "The head dim must be")

    def libs(self):
        return dict(super().libs(), **_common.jax_libs(_has_gpu()))

    def declare(self) -> dict:
        conv = {"masked_values": "ieee", "denormals": "flush"}
        base = ["f32", "f16", "bf16", "gqa", "cross", "scale", "amask", "bmask", "causal", "padding", "window",
                "strided", "mask_dtype", "tf32"]
        limits = {"max_bytes": 64 << 20}
        if self.variant == "explicit":
            # jax.nn.dot_product_attention needs V's head dim equal to K's and has no softcap
            # and no dropout: only the explicit function takes those
            caps = base + ["dv", "softcap", "dropout"]
            conv.update(masked_rows="nan", dropout="counter", scores="dtype")
        elif self.variant == "xla":
            # Rows masked through `mask` / is_causal / windows / seq lengths get the mean of V
            # over those keys (-0.7 * finfo.max); a row masked entirely by -inf in `bias` is NaN
            # (the bias is added as is, softmax of all -inf): both are masked_rows "mean".
            conv["masked_rows"] = "mean"
            # jit of dot_product_attention on f16 fails to compile on a CPU: its F16_F16_F32 dot
            # algorithm is refused at lowering, where its own try/except fallback does not reach
            # (known: keras-team/keras-hub#2354); f16 only where a GPU runs it
            caps = base if _has_gpu() else [c for c in base if c != "f16"]
        else:  # cudnn: cuDNN flash attention, f16/bf16 only, head dim a multiple of 8 up to 256 (Hopper)
            caps = [c for c in base if c != "f32"]
            # the boolean mask is added as a finite bias (jax's get_large_negative_number:
            # -2 << 14 in f16, -2 << 40 in bf16): in f16 a fully masked row is plain
            # attention; in bf16 the bias swamps the scores and the row is the mean of V
            # (measured on an H200, 2026-11-28); an Inf score of a masked key stays Inf
            # (Inf + finite): NaN rows
            conv["masked_rows"] = dict(CUDNN_MASKED_ROWS)
            conv["masked_keys"] = "ieee"
            limits.update({"max_head_dim": 256, "head_dim_multiple": 8})
        return {"caps": caps, "limits": limits, "conventions": conv}

    def build(self, req):
        cfg = config(req.case, req.mask, req.bool_mask, self.variant)
        return make_fn(cfg), cfg

    def execute(self, art, req):
        from attnfuzz.worker import Result
        case = req.case
        fn, cfg = art
        res = call(fn, arguments(req, cfg), cfg)
        if not case.grads:
            return Result(res, layout=cfg["out_layout"])
        out, grads = res
        g = layouts.grads_bhsd(case, grads)
        return Result(layouts.to_bhsd(out, cfg["out_layout"], case.q_heads, case.v_head_dim), layout="bhsd",
                      grads={n: g[n] for n in case.grads})


def repro_snippet(variant: str) -> str:
    """Python source defining attention(req) and gradients(req) with jax and numpy only;
    returns the output as [B, Hq, Sq, Dv]. (A serving variant's: _jax_serving.repro_snippet,
    the module of the class that runs it.)"""
    if STACK.variant(variant).target:
        raise ValueError("jax/%s runs as %s: its repro snippet is that module's" % (variant, _SERVING))
    return _common.snippet(
        ["import jax", "import jax.numpy as jnp"],
        (to_btnh, unpack_btnh, from_btnh, full_qk, make_fn, explicit_btnh, config, arguments, call),
        consts={"VARIANT": variant}, tail='''

def attention(req):
    """req.q, req.k, req.v: numpy arrays in the case's physical layouts (req.qkv: the packed
    buffer)."""
    case = req.case
    cfg = dict(config(case, req.mask, req.bool_mask, VARIANT), grads=())
    out = call(make_fn(cfg), arguments(req, cfg), cfg)
    return layouts.to_bhsd(out, cfg["out_layout"], case.q_heads, case.v_head_dim)


def gradients(req):
    """Backward as a training step asks for it: jax.vjp of the same jitted function with
    cotangent req.dout (numpy, in the output layout). Returns the gradients the case asks
    for: dq, dk, dv as [B, H, S, D], dmask at the mask's shape."""
    case = req.case
    cfg = config(case, req.mask, req.bool_mask, VARIANT)
    _, g = call(make_fn(cfg), arguments(req, cfg), cfg)
    g = layouts.grads_bhsd(case, g)
    return {n: g[n] for n in case.grads}
''')


def main(argv=None) -> int:
    # a worker shares the GPU with whatever else runs: no 75% preallocation. Set before
    # anything touches a jax backend (available() lists the GPUs for cudnn), or it is too
    # late: four cudnn workers then ran each other, and a torch campaign beside them, out
    # of memory
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    jax.config.update("jax_enable_x64", False)
    return _base.main(STACK, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
