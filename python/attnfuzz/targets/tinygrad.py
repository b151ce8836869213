"""tinygrad attention as users write it: Q, K, V (or the packed QKV buffer) made Tensors from
the case's PHYSICAL layout, the layout handled with tinygrad's own views (permute, reshape,
slices), the attention, then TinyJit: tinygrad's kernel compiler schedules, fuses and
compiles the graph into kernels on the first calls of a jitted function (its CPU device
renders C and compiles it with clang, `-O2 -march=native`), then replays them.

Variants (`python -m attnfuzz.targets.tinygrad VARIANT`, `--backend target:tinygrad/VARIANT`):
  sdpa      Tensor.scaled_dot_product_attention on the CPU device: QK^T in f32 scaled by
            1/sqrt(D), a mask added in f32 (a boolean one as where(0, -inf)), is_causal as
            tril (top-left), enable_gqa (repeat_interleave), then cast to the case dtype,
            softmax and P @ V in the case dtype
  explicit  the same attention written with tinygrad ops: matmul, the scale at the case's
            placement, softcap, masks, softmax in f32, dropout by a keep mask, matmul: the
            compiler's fusion of the unfused pattern is what is under test
  gpu       the sdpa variant on tinygrad's CUDA device (DEV=CUDA; `CUDA=1` is refused by
            0.14): declared for the GPU machine, never run without one

What tinygrad 0.14 supports here (measured on its CPU device): f32 and f16 (its bf16 kernels
are C with __bf16, which Debian 12's clang 14 refuses for x86: "__bf16 is not supported on
this target"; the gpu variant declares bf16, uploaded as uint16 bits and bitcast); SDPA has no scale argument and refuses a
mask together with is_causal, so a case with a mask and a structure gets one combined mask
(the boolean masks and the structural one as a bool mask; with an additive mask,
where(allowed, mask, -inf)). SDPA's dropout draws from tinygrad's own RNG and only while
Tensor.training is set: not declared. Every structure is one TinyJit function (compile key:
every field); its first call is timed as compile time (clang per kernel; tinygrad also keeps
a disk cache of compiled kernels, ~/.cache/tinygrad, so a later process compiles less).

Conventions, measured by the self-test: a fully masked row is NaN (softmax of an all -inf
row), a NaN behind a zero weight reaches the output (P @ V is IEEE), a boolean mask is added
as -inf (masked_keys ieee); sdpa rounds the scores to the case dtype before its softmax, and
on CUDA (gpu) each product q_d k_d to the case dtype before the f32 sum (products: dot is
`(x * w).sum(acc_dtype)`, the multiply in f16 or bf16).
"""

from __future__ import annotations

import sys

import numpy as np

from attnfuzz import masks
from attnfuzz.targets import _base, _common
from attnfuzz.targets._torch_layouts import from_bhsd, to_bhsd


def _probe(variant):
    import shutil
    if variant == "gpu":
        from tinygrad import Device
        try:
            Device["CUDA"]
        except Exception as e:  # noqa: BLE001 - no CUDA device or driver
            return "tinygrad has no CUDA device: %s" % _base.describe(e)
        return None
    return None if shutil.which("clang") else "tinygrad's CPU device compiles with clang, which is not on PATH"


_V = _base.Variant
STACK = _base.Stack("tinygrad", imports=("tinygrad",), pip=("tinygrad==0.14.0",), probe=_probe, variants=(
    _V("sdpa", "Tensor.scaled_dot_product_attention under TinyJit, CPU device (clang)", compiled=True, quick=True),
    _V("explicit", "softmax(QK^T)V written with tinygrad ops under TinyJit, CPU device (clang)", compiled=True,
       quick=True, smoke=False),
    _V("gpu", "Tensor.scaled_dot_product_attention under TinyJit on the CUDA device (DEV=CUDA)", compiled=True,
       gpu=True),
))


# ---------------------------------------------------------------------------------------
# The model code: only tinygrad, numpy and math from here to the end of the section
# (repro_snippet copies it into a standalone repro.py).
# ---------------------------------------------------------------------------------------

def tensor(x, device):
    """A numpy array -> a realized tinygrad Tensor on device (bfloat16 uploaded as its bits)."""
    from tinygrad import Tensor, dtypes
    x = np.ascontiguousarray(x)
    if not x.flags.writeable:
        # tinygrad's CUDA copy-in takes the host buffer's address through ctypes.from_buffer,
        # which refuses a read-only one ("underlying buffer is not writable"; the CPU device
        # copies another way): upstream tinygrad#9809, PR #14274
        x = x.copy()
    if x.dtype.name == "bfloat16":
        return Tensor(x.view(np.uint16), device=device).bitcast(dtypes.bfloat16).realize()
    return Tensor(x, device=device).realize()


def to_numpy(t):
    """A tinygrad Tensor -> numpy (bfloat16 as ml_dtypes.bfloat16, bit for bit)."""
    from tinygrad import dtypes
    if t.dtype == dtypes.bfloat16:
        import ml_dtypes
        return t.bitcast(dtypes.uint16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def unpack(qkv, layout, heads, dim):
    """A packed QKV Tensor -> q, k, v as [B, H, S, D] views, the way models split it."""
    if layout == "qkv_bs3hd":        # [B, S, 3, H, D]
        return tuple(qkv[:, :, i].transpose(1, 2) for i in range(3))
    if layout == "qkv_bsh3d":        # [B, S, H, 3, D]
        return tuple(qkv[:, :, :, i].transpose(1, 2) for i in range(3))
    if layout == "qkv_channels_first":  # [B, 3*H*D, S]
        b, _, s = qkv.shape
        return tuple(t.reshape(b, heads, dim, s).transpose(2, 3) for t in qkv.chunk(3, dim=1))
    raise ValueError("unpack: %r is not a packed layout" % (layout,))


def forward(cfg, *args):
    """One structure's attention on Tensors: the inputs cfg["names"] lists -> the output in
    the model's output layout, realized."""
    from tinygrad import dtypes
    lay = cfg["layouts"]
    if cfg["packed"]:
        q, k, v = unpack(args[0], lay["q"], cfg["hq"], cfg["d"])
        rest = args[1:]
    else:
        q = to_bhsd(args[0], lay["q"], cfg["hq"], cfg["d"])
        k = to_bhsd(args[1], lay["k"], cfg["hkv"], cfg["d"])
        v = to_bhsd(args[2], lay["v"], cfg["hkv"], cfg["dv"])
        rest = args[3:]
    x = dict(zip(cfg["inputs"], rest))
    allowed = None
    for n in ("bool_mask", "struct"):
        if n in x:
            allowed = x[n] if allowed is None else allowed & x[n]
    mask = x.get("mask")
    if cfg["kind"] == "sdpa":
        if allowed is not None:       # one mask: SDPA refuses attn_mask with is_causal
            mask = allowed if mask is None else allowed.where(mask, float("-inf"))
        o = q.scaled_dot_product_attention(k, v, attn_mask=mask, is_causal=cfg["is_causal"],
                                           enable_gqa=cfg["hq"] != cfg["hkv"])
    else:
        if cfg["hq"] != cfg["hkv"]:
            rep = cfg["hq"] // cfg["hkv"]
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        s_scores, s_q, s_k = cfg["scale_factors"]
        if s_q != 1.0:
            q = q * s_q
        if s_k != 1.0:
            k = k * s_k
        s = (q @ k.transpose(-2, -1)).cast(dtypes.float32)
        if s_scores != 1.0:
            s = s * s_scores
        if cfg["softcap"] > 0:
            s = (s / cfg["softcap"]).tanh() * cfg["softcap"]
        if mask is not None:
            s = s + mask.cast(dtypes.float32)
        if allowed is not None:
            s = allowed.where(s, float("-inf"))
        p = s.softmax(-1)
        if "keep" in x:
            p = x["keep"].where(p * cfg["dropout_scale"], 0.0)
        o = p.cast(q.dtype) @ v
    return from_bhsd(o, cfg["out_layout"]).realize()


def compile_fn(cfg):
    """The jitted function of one structure: TinyJit runs it on its first call (scheduling
    and compiling the kernels), captures the kernels on the second and replays them after."""
    from tinygrad import TinyJit
    return TinyJit(lambda *args: forward(cfg, *args))


def config(case, mask, bool_mask, variant):
    """The static structure of one case as plain values."""
    inputs = []
    if mask is not None:
        inputs.append("mask")
    if bool_mask is not None:
        inputs.append("bool_mask")
    kind = "explicit" if variant == "explicit" else "sdpa"
    # is_causal (top-left tril) only where no other mask is given: SDPA refuses both
    is_causal = (kind == "sdpa" and _common.plain_causal(case) and _common.offset_zero_always(case)
                 and mask is None and bool_mask is None)
    if masks.has_structural(case) and not is_causal:
        inputs.append("struct")
    if kind == "explicit" and case.dropout_p > 0:
        inputs.append("keep")
    return {"kind": kind, "device": "CUDA" if variant == "gpu" else "CPU",
            "names": (["qkv"] if case.packed else ["q", "k", "v"]) + inputs, "inputs": inputs,
            "layouts": dict(case.layouts), "packed": case.packed, "out_layout": _common.OUT_LAYOUT[case.layouts["q"]],
            "hq": case.q_heads, "hkv": case.kv_heads, "d": case.head_dim, "dv": case.v_head_dim,
            "scale_factors": _common.scale_factors(case), "softcap": float(case.softcap), "is_causal": is_causal,
            "dropout_scale": _common.dropout_scale(case.dropout_p)}


def arguments(case, q, k, v, mask, bool_mask, keep, cfg):
    """The jitted function's input Tensors, in order."""
    return [tensor(a, cfg["device"]) for a in _common.dense_arguments(case, q, k, v, mask, bool_mask, keep,
                                                                       cfg["inputs"])]


class Target(_base.Target):
    """One variant: a cache of TinyJit functions keyed by structure."""
    STACK = STACK
    CACHE_SIZE = 32
    LAZY_COMPILE = True

    def declare(self) -> dict:
        caps = ["f32", "f16", "bf16", "gqa", "cross", "dv", "amask", "bmask", "causal", "padding", "window",
                "strided", "mask_dtype"]
        conv = {"masked_rows": "nan", "masked_values": "ieee", "masked_keys": "ieee"}
        if self.variant == "explicit":
            caps += ["scale", "softcap", "dropout"]
            conv["dropout"] = "counter"
        else:
            # QK^T accumulates in f32, then qk.cast(q.dtype).softmax(): the scores and the
            # softmax in the case dtype
            conv["scores"] = ["f16", "bf16"]
        if self.variant == "gpu":
            # dot is (x * w).sum(acc_dtype): on CUDA each product is an f16/bf16 multiply
            # before the f32 sum, so an f16 product past 65504 is Inf (attnfuzz triage's
            # qk_products_dtype model gives 30 of an H200 campaign's 35 f16 bundles exactly);
            # the CPU device's C keeps them wider (those bundles pass on tinygrad/sdpa)
            conv["products"] = ["f16", "bf16"]
        # bf16 on the CPU device needs a clang whose x86 target has __bf16: Debian 12's clang 14
        # refuses every bf16 kernel ("__bf16 is not supported on this target")
        dtypes = ["f32", "f16", "bf16"] if self.variant == "gpu" else ["f32", "f16"]
        return {"caps": caps, "dtypes": dtypes, "limits": {"max_bytes": 64 << 20}, "conventions": conv}

    def refuse(self, case, mask, bool_mask):
        if self.variant != "gpu" and mask is not None and mask.dtype.name == "bfloat16":
            from attnfuzz.worker import Unsupported
            raise Unsupported("tinygrad's CPU device renders a bf16 mask as __bf16 C, which this clang refuses")

    def build(self, case, q, k, v, mask, bool_mask):
        cfg = config(case, mask, bool_mask, self.variant)
        return compile_fn(cfg), cfg

    def execute(self, art, case, q, k, v, mask, bool_mask):
        from attnfuzz.worker import Result
        fn, cfg = art
        out = to_numpy(fn(*arguments(case, q, k, v, mask, bool_mask, _base.keep_mask(case), cfg)))
        return Result(out, layout=cfg["out_layout"])


def repro_snippet(variant: str) -> str:
    """Python source defining attention(case, q, k, v, mask=None, bool_mask=None, keep=None)
    with tinygrad and numpy only; returns the output as [B, Hq, Sq, Dv]. The function is
    called three times, as the worker does over a campaign: TinyJit's first call runs the
    graph, the second captures it and the third replays the captured kernels."""
    STACK.variant(variant)
    return _common.snippet(
        ["import tinygrad"],
        (to_bhsd, from_bhsd, tensor, to_numpy, unpack, forward, compile_fn, config, arguments),
        consts={"VARIANT": variant}, tail='''

def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """q, k, v: numpy arrays in the case's physical layouts (case.qkv: the packed buffer)."""
    cfg = config(case, mask, bool_mask, VARIANT)
    fn = compile_fn(cfg)
    outs = [to_numpy(fn(*arguments(case, q, k, v, mask, bool_mask, keep, cfg))) for _ in range(3)]
    for i, o in enumerate(outs[1:], 1):
        if not np.array_equal(o, outs[0], equal_nan=True):
            print("TinyJit call %d differs from the first call" % (i + 1))
    return layouts.to_bhsd(outs[-1], cfg["out_layout"], case.q_heads, case.v_head_dim)
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK, Target))
