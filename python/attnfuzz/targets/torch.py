"""PyTorch attention as users build it: small nn.Modules fed Q, K, V in the case's PHYSICAL
layout, so the layout handling (transposes, the bsd head split, the UNet
`qkv.reshape(b, 3*c, -1).chunk(3, dim=1)`, the MHAv2 per-head interleave) is part of what
the eager kernels or the compiler see.

Variants (`python -m attnfuzz.targets.torch VARIANT`, `--backend target:torch/VARIANT`):

CPU (always available where torch imports):
  sdpa_math     F.scaled_dot_product_attention under sdpa_kernel(MATH)
  sdpa_flash    the same under sdpa_kernel(FLASH_ATTENTION): the CPU flash kernel (needs D == Dv)
  explicit      eager module: matmul, scale at the case's placement, softcap, masks, softmax,
                dropout with the counter RNG's keep mask as an input, matmul
  compile       torch.compile (Inductor) of the explicit module
  compile_sdpa  torch.compile of the SDPA module (Inductor picks the kernel)
  flex          FlexAttention, compiled; causal / window / key padding and the boolean mask as
                a mask_mod (a block mask), softcap and the additive mask as a score_mod

CUDA (the same modules on device cuda; declared unavailable where torch sees no GPU):
  cuda_sdpa_math, cuda_sdpa_flash, cuda_sdpa_efficient, cuda_sdpa_cudnn, cuda_explicit,
  cuda_compile, cuda_compile_sdpa, cuda_flex

Serving paths (docs/design.md section 2, "Serving forms"; attnfuzz.targets._torch_serving):
  sdpa_jagged, cuda_sdpa_jagged   SDPA on nested jagged tensors (THD + offsets)
  flex_paged, cuda_flex_paged     FlexAttention over a page cache (PagedAttention), ALiBi as a
                                  score_mod, a sink through the log-sum-exp (CUDA)
  cuda_flex_decode                the same with at most 16 queries: the flex decode kernel
  cuda_varlen                     torch.nn.attention.varlen.varlen_attn (FlashAttention varlen)

Masks: SDPA's is_causal is top-left; the modules use it for a plain top-left causal case and
otherwise build an explicit boolean mask (causal on any diagonal, key padding, window) and
combine it with the case's masks the way user code does (`torch.where(mask, add, -inf)`),
so every diagonal is supported. An additive mask goes to SDPA in its own dtype when SDPA takes it (float32
or Q's dtype: an f32 mask with f16/bf16 Q goes as is), else cast to float32 (exact); the
explicit module casts it to the score dtype.

Conventions, measured on torch 2.15 CPU (and 2.11 on an H100 for the CUDA variants): SDPA
(math and CPU flash) gives 0 for a fully masked row (the eager SDPA variants measure this
when they start and declare "nan" where a version gives NaN); the explicit module's softmax gives NaN
there (declared "nan"), and its P @ V lets 0 * NaN through (masked_values "ieee"), as the
math kernel does; it computes in the case dtype (scores "dtype": f16/bf16 scores, softcap and
mask). SDPA adds a boolean mask as -inf, so an Inf or NaN in a masked key's row makes the row
NaN (masked_keys "ieee", measured per forced kernel at start, pytorch#101967). The CUDA SDPA
kernels that flush subnormal values to zero are measured at start (denormals "flush"). TF32: `allow_tf32` maps to torch.backends.cuda.matmul.allow_tf32 and
torch.backends.cudnn.allow_tf32 on the CUDA variants (cap tf32 only there). Dropout:
explicit/compile apply the counter RNG's keep mask (attnfuzz.rng.dropout_keep) as an input;
cuda_sdpa_efficient runs the kernel's own dropout and returns its keep mask, extracted the
way PyTorch's tests do (dropout "keep_mask"; the flash path exists but is not declared: its
debug mask disagreed with its output on one case); the other SDPA and flex variants
declare no dropout. Kernel declines ("No available kernel", the
memory-efficient kernel's alignment and bias-dtype checks, FlexAttention's NYI shapes) are
answered `unsupported` with PyTorch's reason, on every path (the dropout one included). A
CUDA device fault (a sticky error such as "misaligned address") ends the worker, so
attnfuzz records a crash and restarts it.
"""

from __future__ import annotations

import importlib
import math
import os
import shutil
import sys
import time
import warnings

import numpy as np

from attnfuzz import masks
from attnfuzz.targets import _base, _common, _torch_batch, _torch_layouts, _torch_serving
from attnfuzz.targets._torch_layouts import band, from_bhsd, to_bhsd, to_numpy, to_torch, unpack_qkv

# The module kind and SDPA backend of each variant (without the cuda_ prefix).
_KIND = {
    "sdpa_math": ("sdpa", "MATH"),
    "sdpa_flash": ("sdpa", "FLASH_ATTENTION"),
    "sdpa_efficient": ("sdpa", "EFFICIENT_ATTENTION"),
    "sdpa_cudnn": ("sdpa", "CUDNN_ATTENTION"),
    "explicit": ("explicit", None),
    "compile": ("explicit", "compile"),
    "compile_sdpa": ("sdpa", "compile"),
    "flex": ("flex", "compile"),
}


def _base_of(variant: str) -> tuple:
    cuda = variant.startswith("cuda_")
    return (variant[5:] if cuda else variant), cuda


def _probe(variant):
    """Why a variant cannot run here (None: it can), torch imported."""
    import torch
    base, cuda = _base_of(variant)
    if cuda and not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if base in _torch_serving.KINDS:
        mods = {"jagged": "torch.nested", "flex_paged": "torch.nn.attention.experimental._paged_attention",
                "varlen": "torch.nn.attention.varlen"}
        try:
            importlib.import_module(mods[_torch_serving.KINDS[base]])
        except Exception as e:  # noqa: BLE001
            return "%s does not import: %s" % (mods[_torch_serving.KINDS[base]], e)
        if _torch_serving.KINDS[base] == "flex_paged" and not cuda and not (
                shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
            return "Inductor on CPU needs a C++ compiler (c++, g++ or clang++) on PATH"
        return None
    if base == "flex":
        try:
            import torch.nn.attention.flex_attention  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return "torch.nn.attention.flex_attention does not import: %s" % e
    if _KIND[base][1] == "compile" and not cuda and not (
            shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        return "Inductor on CPU needs a C++ compiler (c++, g++ or clang++) on PATH"
    return None


_V = _base.Variant
STACK = _base.Stack("torch", imports=("torch",), pip=("torch==2.15.0",), probe=_probe, trains=True, variants=(
    _V("sdpa_math", "F.scaled_dot_product_attention, math kernel (CPU)"),
    _V("sdpa_flash", "F.scaled_dot_product_attention, flash kernel (CPU; D == Dv)"),
    _V("explicit", "eager nn.Module: matmul / scale / softcap / masks / softmax / dropout / matmul (CPU)"),
    _V("compile", "torch.compile (Inductor) of the explicit module (CPU)", compiled=True, quick=True,
       smoke=False),
    _V("compile_sdpa", "torch.compile (Inductor) of the SDPA module (CPU)", compiled=True, quick=True,
       smoke=False),
    # "FlexAttention does not support backward on CPU" (torch 2.15, documented)
    _V("flex", "FlexAttention, compiled; structural and boolean masks as a block mask (CPU)", compiled=True,
       quick=True, smoke=False, backward=False),
    _V("cuda_sdpa_math", "F.scaled_dot_product_attention, math kernel (CUDA)", gpu=True),
    _V("cuda_sdpa_flash", "F.scaled_dot_product_attention, flash kernel (CUDA)", gpu=True),
    _V("cuda_sdpa_efficient", "F.scaled_dot_product_attention, memory-efficient kernel (CUDA)", gpu=True),
    _V("cuda_sdpa_cudnn", "F.scaled_dot_product_attention, cuDNN kernel (CUDA)", gpu=True),
    _V("cuda_explicit", "eager explicit module (CUDA)", gpu=True),
    _V("cuda_compile", "torch.compile of the explicit module (CUDA)", gpu=True, compiled=True, quick=True),
    _V("cuda_compile_sdpa", "torch.compile of the SDPA module (CUDA)", gpu=True, compiled=True, quick=True),
    _V("cuda_flex", "FlexAttention, compiled (CUDA)", gpu=True, compiled=True, quick=True),
    # serving paths (attnfuzz.targets._torch_serving); forward only
    _V("sdpa_jagged", "F.scaled_dot_product_attention on nested jagged tensors (THD + offsets, CPU)",
       backward=False, serving=("packed",)),
    _V("flex_paged", "FlexAttention over a page cache (PagedAttention), ALiBi score_mod, compiled (CPU)",
       compiled=True, quick=True, smoke=False, backward=False, serving=("packed", "paged", "alibi")),
    _V("cuda_sdpa_jagged", "SDPA on nested jagged tensors (CUDA)", gpu=True, backward=False, serving=("packed",)),
    _V("cuda_flex_paged", "FlexAttention over a page cache, ALiBi score_mod, a sink through the LSE (CUDA)",
       gpu=True, compiled=True, quick=True, backward=False, serving=("packed", "paged", "sinks", "alibi")),
    _V("cuda_flex_decode", "FlexAttention's decode kernel (at most 16 queries) over a page cache (CUDA)",
       gpu=True, compiled=True, quick=True, backward=False, serving=("packed", "paged", "sinks", "alibi")),
    _V("cuda_varlen", "torch.nn.attention.varlen.varlen_attn: FlashAttention varlen, paged KV where torch has it "
       "(CUDA)", gpu=True, backward=False, serving=("packed", "paged")),
))
_torch_serving.ServingTarget.STACK = STACK


# ---------------------------------------------------------------------------------------
# The model code. Everything from here to the end of the Modules section uses only torch,
# numpy and math: repro_snippet() copies it verbatim into a standalone repro.py.
# ---------------------------------------------------------------------------------------

def combine_masks(add, keep_mask, struct, dtype):
    """One SDPA attn_mask from the additive mask, the boolean mask and the structural mask
    (True = attend): a bool mask when there is no additive one, else the additive mask with
    -inf where a boolean mask says no."""
    import torch
    m = add
    for b in (keep_mask, struct):
        if b is None:
            continue
        if m is None:
            m = b
        elif m.dtype == torch.bool:
            m = m & b
        else:
            m = torch.where(b, m, torch.tensor(float("-inf"), dtype=m.dtype, device=m.device))
    return m


class _Base:
    """Static structure shared by the modules: layouts, head counts, dims, scale, masks."""

    def _setup(self, cfg, **more):
        """The configuration as plain attributes, written to the instance's __dict__ in one
        update: nn.Module.__setattr__ looks each name up among parameters, buffers and
        submodules first (12 of them a case were 0.12 ms of torch/explicit's 1.4 ms on the
        CPU, profiled); none of these values is a parameter or a module."""
        self.__dict__.update(layouts=cfg["layouts"], packed=cfg["packed"], hq=cfg["hq"], hkv=cfg["hkv"],
                             d=cfg["d"], dv=cfg["dv"], out_layout=cfg["out_layout"], **more)

    def _inputs(self, q, k, v):
        if self.packed:
            return unpack_qkv(q, self.layouts[0], self.hq, self.d)
        return (to_bhsd(q, self.layouts[0], self.hq, self.d),
                to_bhsd(k, self.layouts[1], self.hkv, self.d),
                to_bhsd(v, self.layouts[2], self.hkv, self.dv))


def make_modules():
    """The module classes (defined inside a function so torch is imported lazily)."""
    import torch
    import torch.nn.functional as F

    class SDPAModule(torch.nn.Module, _Base):
        """F.scaled_dot_product_attention on inputs in their physical layouts."""

        def __init__(self, cfg):
            super().__init__()
            self.configure(cfg)

        def configure(self, cfg):
            # scale None: SDPA's default 1/sqrt(D)
            self._setup(cfg, scale=cfg["scale_arg"], is_causal=cfg["is_causal"], gqa=cfg["hq"] != cfg["hkv"])

        def forward(self, q, k, v, add=None, bool_mask=None, struct=None):
            q, k, v = self._inputs(q, k, v)
            if add is not None and add.dtype not in (torch.float32, q.dtype):
                add = add.float()     # SDPA takes bool, float32 or Q's dtype; f32 holds the rest exactly
            m = combine_masks(add, bool_mask, struct, q.dtype)
            kw = {"enable_gqa": True} if self.gqa else {}
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=self.is_causal,
                                               scale=self.scale, **kw)
            return from_bhsd(o, self.out_layout)

    class ExplicitModule(torch.nn.Module, _Base):
        """The unfused graph: (Q K^T) * scale at the case's placement, softcap, masks,
        softmax, dropout by a keep mask, P V."""

        def __init__(self, cfg):
            super().__init__()
            self.configure(cfg)

        def configure(self, cfg):
            self._setup(cfg, placement=cfg["placement"], is_causal=cfg["is_causal"], scale=cfg["scale"],
                        softcap=cfg["softcap"], dropout_p=cfg["dropout_p"])

        def forward(self, q, k, v, add=None, bool_mask=None, struct=None, keep=None):
            q, k, v = self._inputs(q, k, v)
            if self.hq != self.hkv:
                rep = self.hq // self.hkv
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            s = self.scale
            if self.placement == "q":
                scores = (q * s) @ k.transpose(-2, -1)
            elif self.placement == "k":
                scores = q @ (k * s).transpose(-2, -1)
            elif self.placement == "sqrt_qk":
                r = math.sqrt(abs(s))
                scores = (q * r) @ (k * math.copysign(r, s)).transpose(-2, -1)
            else:
                scores = (q @ k.transpose(-2, -1)) * s
            if self.softcap > 0:
                scores = self.softcap * torch.tanh(scores / self.softcap)
            if add is not None:
                scores = scores + add.to(scores.dtype)
            if bool_mask is not None:
                scores = scores.masked_fill(~bool_mask, float("-inf"))
            if self.is_causal:
                sq, sk = scores.shape[-2], scores.shape[-1]
                tri = torch.ones(sq, sk, dtype=torch.bool, device=scores.device).tril()
                scores = scores.masked_fill(~tri, float("-inf"))
            if struct is not None:
                scores = scores.masked_fill(~struct, float("-inf"))
            p = torch.softmax(scores, dim=-1)
            if self.dropout_p >= 1.0:
                p = torch.zeros_like(p)
            elif self.dropout_p > 0.0:
                p = p.masked_fill(~keep, 0.0) / (1.0 - self.dropout_p)
            return from_bhsd(p @ v, self.out_layout)

    class FlexModule(torch.nn.Module, _Base):
        """FlexAttention as its users write it: the structural masks (causal, window, key
        padding on the diagonal d = i + offset[b]) and the boolean mask as a mask_mod turned
        into a block mask (the block-sparse path), softcap and the additive mask as a
        score_mod. `struct` here is int64 [2, B]: offset[b] and the valid key count."""

        def __init__(self, cfg):
            super().__init__()
            self.configure(cfg)

        def configure(self, cfg):
            self._setup(cfg, scale=cfg["scale_arg"], softcap=cfg["softcap"], gqa=cfg["hq"] != cfg["hkv"],
                        causal=cfg["flex_causal"], left=cfg["flex_window"][0], right=cfg["flex_window"][1],
                        padding=cfg["flex_padding"])

        def forward(self, q, k, v, add=None, bool_mask=None, struct=None):
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            q, k, v = self._inputs(q, k, v)
            bsz, hq, sq, sk = q.shape[0], self.hq, q.shape[2], k.shape[2]
            cap = self.softcap
            # Captured tensors are indexed inside the mods (views only: Inductor's CPU flex
            # template wants every captured buffer to be a graph input).
            a = None if add is None else add.expand(bsz, hq, sq, sk)
            bm = None if bool_mask is None else bool_mask.expand(bsz, hq, sq, sk)
            causal, left, right, padding = self.causal, self.left, self.right, self.padding

            def score_mod(score, b, h, qi, kv):
                if cap > 0:
                    score = cap * torch.tanh(score / cap)
                if a is not None:
                    score = score + a[b, h, qi, kv].to(score.dtype)
                return score

            def mask_mod(b, h, qi, kv):
                ok = kv >= 0
                if struct is not None:
                    ok = band(ok, kv, qi + struct[0, b], causal, left, right)
                    if padding:
                        ok = ok & (kv < struct[1, b])
                if bm is not None:
                    ok = ok & bm[b, h, qi, kv]
                return ok

            block_mask = None
            if struct is not None or bm is not None:
                heads = None if bm is None else hq
                block_mask = create_block_mask(mask_mod, bsz, heads, sq, sk, device=q.device)
            o = flex_attention(q, k, v, score_mod=score_mod if (cap > 0 or a is not None) else None,
                               block_mask=block_mask, scale=self.scale, enable_gqa=self.gqa)
            return from_bhsd(o, self.out_layout)

    return SDPAModule, ExplicitModule, FlexModule


def warm_autograd(torch, device):
    """One tiny backward before the hello: the first backward of a process imports
    torch.fx's symbolic shapes (4 s on an H100 host, measured), which a worker started
    ahead of a fault (a spare) should have done before it takes over."""
    with torch.enable_grad():
        x = torch.ones(2, device=device, requires_grad=True)
        y = x * 2
        y.backward(torch.ones_like(y))


def grad_leaves(case, args):
    """The module's arguments with the tensors whose gradients the case asks for made
    leaves that require grad (q, k, v or the packed buffer; the additive mask for dmask),
    and {name: leaf}. The leaves keep the physical layout and strides (stride-0 dims
    included), as a model's parameters or activations would arrive."""
    args = list(args)
    names = ["qkv"] if case.packed else ["q", "k", "v"]
    idx = list(range(len(names)))
    if "dmask" in case.grads:
        names.append("mask")
        idx.append(3)
    leaves = {}
    for n, i in zip(names, idx):
        args[i] = args[i].detach().requires_grad_(True)
        leaves[n] = args[i]
    return args, leaves


def grads_of(case, cfg, out, leaves, dev):
    """out.backward(dO) (dO as sent: the output layout, its own strides): (out, {name:
    gradient}) for the gradients the case asks for, out and dq, dk, dv as canonical
    [B, H, S, D] tensors, dmask at the mask's shape as sent."""
    import torch
    do = to_torch(case.dout, dev)
    out.backward(do)

    def grad(name):
        t = leaves[name]
        return t.grad if t.grad is not None else torch.zeros_like(t)
    if case.packed:
        dq, dk, dv = unpack_qkv(grad("qkv"), cfg["layouts"][0], cfg["hq"], cfg["d"])
    else:
        dq = to_bhsd(grad("q"), cfg["layouts"][0], cfg["hq"], cfg["d"])
        dk = to_bhsd(grad("k"), cfg["layouts"][1], cfg["hkv"], cfg["d"])
        dv = to_bhsd(grad("v"), cfg["layouts"][2], cfg["hkv"], cfg["dv"])
    g = {"dq": dq, "dk": dk, "dv": dv}
    if "dmask" in case.grads:
        g["dmask"] = grad("mask")
    o = to_bhsd(out.detach(), cfg["out_layout"], cfg["hq"], cfg["dv"])
    return o, {n: g[n] for n in case.grads}


def backward(case, cfg, forward, args, dev):
    """forward(args) with gradients: grads_of's (out, {name: gradient})."""
    import torch
    with torch.enable_grad():
        args, leaves = grad_leaves(case, args)
        return grads_of(case, cfg, forward(args), leaves, dev)


def struct_input(case, cfg):
    """The structural-mask input of a module: None, bool [B, 1, Sq, Sk] (True = attend), or
    for FlexAttention's mask_mod int64 [2, B]: the diagonal offset and valid keys per row."""
    if not cfg["struct"]:
        return None
    if cfg["kind"] == "flex":
        return np.array([case.diag_offset, case.valid_keys], dtype=np.int64)
    return _common.structural_allowed(case)




# ---------------------------------------------------------------------------------------
# The worker side: declarations, caching, the run function.
# ---------------------------------------------------------------------------------------

# GPU memory a CUDA worker keeps cached between cases (see main).
_CUDA_KEEP_BYTES = 1 << 30
_CUDA_KEEP_EVERY = 32

# Messages of the CUDA kernels' own input checks (raised after dispatch chose the kernel,
# cleanly, the CUDA context intact): the case is unsupported by that kernel, not a bug.
_KERNEL_CHECKS = {
    "EFFICIENT_ATTENTION": ("is not correctly aligned", "invalid dtype for bias", "cutlassF: no kernel found",
                            "cutlassB: no kernel found", "last dimension must be contiguous"),
    "FLASH_ATTENTION": ("must have contiguous last dimension",),
}



def _config(case, base: str, cuda: bool) -> dict:
    """The static structure of the module a case needs."""
    kind, _ = _KIND[base]
    layouts = (case.layouts["q"], case.layouts["k"], case.layouts["v"])
    # SDPA's is_causal (top-left) when the case is exactly that and there is no other mask
    # (SDPA refuses attn_mask together with is_causal); the explicit module builds its
    # tril in forward for a plain causal case whatever else it has.
    plain = _common.plain_causal(case)
    if kind == "explicit":
        is_causal = plain
    elif kind == "sdpa":
        is_causal = plain and case.amask is None and case.bmask is None
    else:
        is_causal = False
    return {
        "kind": kind,
        "layouts": layouts,
        "packed": case.packed,
        "hq": case.q_heads, "hkv": case.kv_heads, "d": case.head_dim, "dv": case.v_head_dim,
        "out_layout": _common.OUT_LAYOUT[layouts[0]],
        "scale": float(case.scale),
        "scale_arg": float(case.scale) if case.scale_given else None,
        "placement": case.placement,
        "softcap": float(case.softcap),
        "is_causal": is_causal,
        "struct": masks.has_structural(case) and not is_causal,
        "flex_causal": bool(case.causal) if kind == "flex" else False,
        "flex_window": tuple(case.window) if kind == "flex" else (-1, -1),
        "flex_padding": case.key_padding is not None if kind == "flex" else False,
        "dropout_p": float(case.dropout_p),
    }


def _arguments(case, cfg, q, k, v, mask, bool_mask, keep, dev):
    """The module's arguments: q, k, v (or the packed buffer), the masks as sent, the
    structural input, and for the explicit module the keep mask."""
    import torch
    if case.packed:
        args = [to_torch(case.qkv, dev), None, None]
    else:
        args = [to_torch(q, dev), to_torch(k, dev), to_torch(v, dev)]
    args.append(None if mask is None else to_torch(mask, dev))
    args.append(None if bool_mask is None else to_torch(bool_mask, dev))
    struct = struct_input(case, cfg)
    args.append(None if struct is None else torch.from_numpy(struct).to(dev))
    if cfg["kind"] == "explicit":
        args.append(None if keep is None else torch.from_numpy(np.ascontiguousarray(keep)).to(dev))
    return args


def _host(res):
    """A Result whose tensors (output, gradients, keep mask) may still be on the device, with
    numpy arrays instead."""
    def host(t):
        return t if t is None or isinstance(t, np.ndarray) else to_numpy(t)
    res.out = host(res.out)
    res.dropout_keep = host(res.dropout_keep)
    if res.grads:
        res.grads = {n: host(t) for n, t in res.grads.items()}
    return res


_SDPA_SELECTED = {"target": None, "ctx": None}


def _select_sdpa(target):
    """Restricts SDPA to target's kernel (sdpa_kernel([...]), entered) or lifts the
    restriction for a target without one, and keeps it so until another target of this
    process asks otherwise: a worker runs one variant, so this happens once, where entering
    sdpa_kernel per case cost a tenth of a tiny case; the self-tests run several variants
    in one process."""
    if _SDPA_SELECTED["target"] is target:
        return
    if _SDPA_SELECTED["ctx"] is not None:
        _SDPA_SELECTED["ctx"].__exit__(None, None, None)
        _SDPA_SELECTED["ctx"] = None
    if target.sdpa_ctx is not None:
        ctx = target.sdpa_ctx()
        ctx.__enter__()
        _SDPA_SELECTED["ctx"] = ctx
    _SDPA_SELECTED["target"] = target


# The fields of _config an eager module takes per case (its values(cfg)), not at build.
_VALUE_FIELDS = ("scale", "scale_arg", "softcap", "dropout_p")


class Target(_base.Target):
    STACK = STACK
    LAZY_COMPILE = True          # torch.compile compiles on the first call

    def __new__(cls, variant: str):
        # the serving paths have their own worker class (attnfuzz.targets._torch_serving)
        if cls is Target and _base_of(variant)[0] in _torch_serving.KINDS:
            return _torch_serving.ServingTarget(variant)
        return super().__new__(cls)

    def __init__(self, variant: str):
        import torch
        self.torch = torch
        self.base, self.cuda = _base_of(variant)
        self.kind, self.backend = _KIND[self.base]
        self.device = "cuda" if self.cuda else "cpu"
        self.compiled = self.backend == "compile"
        # cuDNN builds an execution plan per shape on its first call (on an H100: 58 ms
        # median for a new shape, 0.06 ms for a repeated one): counted as compiling, so
        # that a batch shares one structure and its plan
        self.PLANS = self.cuda and self.backend == "CUDNN_ATTENTION"
        self._cases = 0
        self._staging = None
        self._download = None
        self._deferred = False  # in a CUDA batch: execute leaves the results on the device
        self._tf32 = None  # the allow_tf32 flags last set (execute sets them when a case changes them)
        self.CACHE_SIZE = 32 if self.compiled else 256
        super().__init__(variant)
        torch.set_num_threads(1)
        if self.compiled:
            import torch._dynamo as dynamo
            # One code object serves every cached module: without this, the ninth structure
            # would silently fall back to eager.
            for name, value in (("recompile_limit", 1 << 20), ("cache_size_limit", 1 << 20),
                                ("accumulated_recompile_limit", 1 << 20),
                                ("accumulated_cache_size_limit", 1 << 20),
                                ("fail_on_recompile_limit_hit", True)):
                if hasattr(dynamo.config, name):
                    setattr(dynamo.config, name, value)
        self.SDPAModule, self.ExplicitModule, self.FlexModule = make_modules()
        self.sdpa_ctx = None
        if self.kind == "sdpa" and self.backend not in (None, "compile"):
            from torch.nn.attention import SDPBackend, sdpa_kernel
            self.sdpa_ctx = lambda: sdpa_kernel([getattr(SDPBackend, self.backend)])
        torch.set_grad_enabled(False)  # inference only, in this process
        # The CUDA flash and cuDNN kernels take f16/bf16 only.
        self.dtypes = (["f16", "bf16"] if (self.cuda and self.base in ("sdpa_flash", "sdpa_cudnn"))
                       else ["f32", "f16", "bf16"])

    # -- declarations ------------------------------------------------------------------
    def libs(self):
        return dict(super().libs(), **_common.torch_libs(self.torch, self.cuda, self.device))

    def declare(self) -> dict:
        caps = ["f32", "f16", "bf16", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal",
                "padding", "window", "strided", "mask_dtype"]
        conventions = {}
        if self.kind == "explicit":
            caps += ["softcap", "dropout"]
            # the module computes in the case dtype: f16/bf16 scores, softcap, and the
            # additive mask cast to the scores' dtype (as its forward says)
            conventions.update(masked_rows="nan", masked_values="ieee", dropout="counter", scores="dtype")
        if self.kind == "flex":
            # the block mask gives masked keys of a partly masked block weight 0, and P @ V
            # runs over them: 0 * NaN leaks (measured by the self-test on torch 2.15 CPU)
            caps.append("softcap")
            conventions["masked_values"] = "ieee"
        if self.kind == "sdpa":
            # Whether P @ V runs over masked keys too, so that a NaN in a masked value row
            # leaks (pytorch#101967): measured per kernel at start where one is forced, known
            # for the compiled module (Inductor's decomposition of the math kernel).
            leaks = self.backend == "compile" or (self.sdpa_ctx is not None and self._masked_values_leak())
            conventions["masked_values"] = "ieee" if leaks else "exclude"
            # The flash kernel's debug mask did not match its output on one random case
            # (B1 H8 S8 D8, p 0.5) on an H100: not declared until that is understood.
            if self.cuda and self.backend == "EFFICIENT_ATTENTION":
                caps.append("dropout")
                conventions["dropout"] = "keep_mask"
        if self.kind == "sdpa" and self.sdpa_ctx is not None and self._masked_rows_nan():
            conventions["masked_rows"] = "nan"
        # SDPA adds a boolean mask as -inf: measured where a kernel is forced, known for the
        # compiled module (Inductor's decomposition adds it as the math kernel does)
        if self.kind == "sdpa" and (self.backend == "compile" or (self.sdpa_ctx is not None and self._masked_keys_leak())):
            conventions["masked_keys"] = "ieee"
        # CUDA kernels that flush subnormal values to zero (measured on a probe)
        if self.cuda and self.kind == "sdpa" and self._flushes_denormals():
            conventions["denormals"] = "flush"
        # the CPU's bf16 GEMM (oneDNN on AVX512_BF16 / AMX: VDPBF16PS) reads subnormal bf16
        # as 0 on larger products: bf16 V of 1e-39 gave 0 from explicit, compile and
        # sdpa_jagged alike (measured on a probe)
        if not self.cuda and "bf16" in self.dtypes and _torch_layouts.cpu_bf16_gemm_flushes():
            conventions["denormals"] = ["bf16"]
        if self.cuda:
            caps.append("tf32")
        limits = {"max_head_dim": 256} if (self.base == "sdpa_flash" and self.cuda) else {}
        if self.decl.backward:
            warm_autograd(self.torch, self.device)
        return {"caps": caps, "dtypes": self.dtypes, "limits": limits, "conventions": conventions}

    def _probe_sdpa(self, **kw):
        """The forced kernel's output on a tiny probe, or None when it refuses it."""
        torch = self.torch
        try:
            with torch.no_grad(), self.sdpa_ctx():
                o = torch.nn.functional.scaled_dot_product_attention(**kw)
            if self.cuda:
                torch.cuda.synchronize()
            return o
        except RuntimeError:
            return None

    def _probe_tensors(self):
        torch = self.torch
        dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[self.dtypes[0]]
        return (torch.ones(1, 1, 2, 16, dtype=dt, device=self.device),
                torch.ones(1, 1, 2, 16, dtype=dt, device=self.device))

    def _masked_rows_nan(self) -> bool:
        """Measured, not assumed (it changed between PyTorch versions): does this kernel
        give NaN for a fully masked row?"""
        q, _ = self._probe_tensors()
        m = self.torch.tensor([[True, True], [False, False]], device=self.device)
        o = self._probe_sdpa(query=q, key=q, value=q, attn_mask=m)
        return o is not None and bool(self.torch.isnan(o[0, 0, 1]).any())

    def _masked_values_leak(self) -> bool:
        """Measured: does a NaN in the value row of a masked key reach the output? Key 1 is
        masked for query 0 by a boolean mask and, for kernels that take no mask, by a
        top-left causal mask."""
        q, v = self._probe_tensors()
        v[0, 0, 1] = float("nan")
        m = self.torch.tensor([[True, False], [True, True]], device=self.device)
        leaked = False
        for kw in ({"attn_mask": m}, {"is_causal": True}):
            o = self._probe_sdpa(query=q, key=q, value=v, **kw)
            leaked |= o is not None and bool(self.torch.isnan(o[0, 0, 0]).any())
        return leaked

    def _masked_keys_leak(self) -> bool:
        """Measured: does an Inf in the key row of a masked key make its query's row NaN
        (the mask added as -inf: Inf + -inf)? Key 1 masked for query 0 by a boolean mask,
        and by a top-left causal mask for kernels that take no mask."""
        q, _ = self._probe_tensors()
        k = q.clone()
        k[0, 0, 1] = float("inf")
        m = self.torch.tensor([[True, False], [True, True]], device=self.device)
        leaked = False
        for kw in ({"attn_mask": m}, {"is_causal": True}):
            o = self._probe_sdpa(query=q, key=k, value=q, **kw)
            leaked |= o is not None and bool(self.torch.isnan(o[0, 0, 0]).any())
        return leaked

    def _flushes_denormals(self) -> bool:
        """Measured: does a V of subnormal values (f32: about 1e-39; bf16 has f32's exponent
        range) come out 0, or, in f32, off by more than a subnormal's rounding (1e-4 of it,
        where the math kernel is within 5e-6)? The memory-efficient kernel's f32 path keeps
        about 11 bits of a subnormal V (0.25% on an H100, 2026-11-28: f32 as TF32 pieces
        whose low part is flushed, by the look of it): a partial flush, which the oracle's
        model of flushing (its room for every flushed product) covers. Only dtypes whose
        subnormals are subnormal in f32 can show it."""
        torch = self.torch
        name = next((d for d in self.dtypes if d != "f16"), "")
        dt = {"f32": torch.float32, "bf16": torch.bfloat16}.get(name)
        if dt is None:
            return False
        q = torch.ones(1, 1, 2, 16, dtype=dt, device=self.device)
        v = _torch_layouts.subnormal_values(torch, (1, 1, 2, 16), dt, self.device)
        try:
            if self.sdpa_ctx is not None:
                with torch.no_grad(), self.sdpa_ctx():
                    o = torch.nn.functional.scaled_dot_product_attention(q, q, v)
            else:
                o = torch.nn.functional.scaled_dot_product_attention(q, q, v)
            torch.cuda.synchronize()
        except RuntimeError:
            return False
        exact = v.double().mean(dim=2, keepdim=True).expand_as(o)   # q = k: equal weights
        return _torch_layouts.flushes_subnormals(o, exact, partial=name == "f32")

    # -- running -----------------------------------------------------------------------
    def refuse(self, case, mask, bool_mask):
        from attnfuzz.worker import Unsupported
        if self.base == "sdpa_flash" and case.head_dim != case.v_head_dim:
            raise Unsupported("the flash kernel needs head_dim == v_head_dim")
        if self.kind == "sdpa" and case.dropout_p >= 1.0 and self.cuda:
            raise Unsupported("dropout p = 1 (the fused kernels take p < 1)")

    def structure(self, case, mask, bool_mask):
        # A compiled module bakes its whole configuration in: every field is in its key. An
        # eager module holds nothing but its configuration, set per case (configure): one
        # module serves every case (building one per case cost a quarter of a millisecond),
        # but for cuDNN, whose plan per structure is timed as compiling (PLANS).
        if not self.compiled and not self.PLANS:
            return ("eager",)
        cfg = _config(case, self.base, self.cuda)
        key = (case.key("shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap", "dropout")
               + (("backward", case.grads),) if self.compiled else case.grads)
        return key, tuple(sorted((k, v) for k, v in cfg.items() if self.compiled or k not in _VALUE_FIELDS))

    def build(self, case, q, k, v, mask, bool_mask):
        if self.compiled and len(self.cache) >= self.cache.capacity:
            import torch._dynamo
            torch._dynamo.reset()          # drop every guard set with the evicted modules
            self.cache.clear()
        cfg = _config(case, self.base, self.cuda)
        cls = {"sdpa": self.SDPAModule, "explicit": self.ExplicitModule, "flex": self.FlexModule}[self.kind]
        mod = cls(cfg).to(self.device).eval()
        if self.compiled:
            mod = self.torch.compile(mod, dynamic=False, fullgraph=True)
        return mod

    def execute(self, mod, case, q, k, v, mask, bool_mask):
        from attnfuzz.worker import Result
        torch = self.torch
        if self.cuda and self._tf32 != bool(case.allow_tf32):
            self._tf32 = bool(case.allow_tf32)
            torch.backends.cuda.matmul.allow_tf32 = self._tf32
            torch.backends.cudnn.allow_tf32 = self._tf32
        cfg = _config(case, self.base, self.cuda)
        if not self.compiled:
            mod.configure(cfg)
        keep = _base.keep_mask(case) if (self.kind == "explicit" and 0.0 < case.dropout_p < 1.0) else None
        args = _arguments(case, cfg, q, k, v, mask, bool_mask, keep, self.device)
        try:
            if self.kind == "sdpa" and case.dropout_p > 0.0:
                return self._run_sdpa_dropout(case, mod, cfg, args)
            _select_sdpa(self)
            if case.grads:
                o, g = backward(case, cfg, lambda a: mod(*a), args, self.device)
                res = Result(o, layout="bhsd", grads=g)
            else:
                res = Result(mod(*args), layout=cfg["out_layout"])
            if self._deferred:
                return res      # run_batch brings the batch's tensors back with one wait
            if self.cuda:
                # a single case synchronized: a device fault shows on the case that caused it
                torch.cuda.synchronize()
            return _host(res)
        except RuntimeError as e:
            if "No available kernel" in str(e):
                from attnfuzz.worker import Unsupported
                raise Unsupported(f"{self.backend} declines the case: {self._why(mod, args)}") from None
            raise
        finally:
            # Many workers share one GPU: what PyTorch's caching allocator keeps after a
            # big case is given back, so that a restarted worker still finds room for its
            # CUDA context.
            # memory_reserved() reads every allocator statistic (0.5 ms on an H100 host,
            # measured): asked every _CUDA_KEEP_EVERY cases, and after a case of 16 MiB
            self._cases += 1
            if self.cuda and (self._cases % _CUDA_KEEP_EVERY == 0 or q.nbytes + k.nbytes + v.nbytes > 1 << 24) \
                    and torch.cuda.memory_reserved() > _CUDA_KEEP_BYTES:
                torch.cuda.empty_cache()

    def run_batch(self, requests):
        """A batch's cases run back to back and their results brought to the host with one
        wait at the end (_torch_batch.Download; on the CPU too, so that the tests run this
        path); on CUDA every input of the batch is uploaded in one copy first
        (_torch_batch.Staging). ATTNFUZZ_TORCH_STAGING=0 and ATTNFUZZ_TORCH_DEFER=0 in the
        worker's environment turn them off, to compare. The cases run without a
        synchronization between them, so a device fault may show on a later case than the
        one that caused it, or only at the batch's wait: unless it shows on the batch's
        first case, the worker exits without answering, and attnfuzz sends the batch's
        cases again one by one (docs/worker-protocol.md, "Batches"), each synchronized."""
        if self.cuda and os.environ.get("ATTNFUZZ_TORCH_STAGING", "1") != "0":
            if self._staging is None:
                self._staging = _torch_batch.Staging(self.torch)
            requests = self._staging.upload(requests, self.device)
        if len(requests) < 2 or os.environ.get("ATTNFUZZ_TORCH_DEFER", "1") == "0":
            return super().run_batch(requests)
        from attnfuzz.worker import Fault, Result
        self._deferred = True
        try:
            outs = super().run_batch(requests)
        finally:
            self._deferred = False
        if outs and isinstance(outs[-1], Fault) and len(outs) > 1:
            _base.fault_exit()          # an earlier case's kernels may have caused it
        if self._download is None:
            self._download = _torch_batch.Download(self.torch)
        t0 = time.perf_counter()
        try:
            self._download.fetch([r for r in outs if isinstance(r, Result)])
        except Exception as e:  # noqa: BLE001
            if self.fatal(e):
                _base.report_fault(e)
                _base.fault_exit()      # which case: unknown
            raise
        waited = (time.perf_counter() - t0) / len(outs)
        for r in outs:
            if isinstance(r, Result):
                r.run_s = (r.run_s or 0.0) + waited
        return outs

    def refusal(self, exc):
        msg = str(exc)
        if self.cuda and any(m in msg for m in _KERNEL_CHECKS.get(self.backend, ())):
            # The kernel's own input checks, run after dispatch chose it: a clean refusal.
            return f"{self.backend}: {msg.splitlines()[0]}"
        if self.kind == "flex" and "NotImplementedError: NYI" in msg:
            # FlexAttention's documented not-yet-implemented shapes (e.g. D < 16 on CUDA).
            return "flex_attention: " + msg.split("NYI:", 1)[1].splitlines()[0].strip()
        return None

    def fatal(self, exc):
        # A device fault leaves the CUDA context unusable: every later case would fail.
        return self.cuda and ("CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError")

    def _why(self, mod, args) -> str:
        """The warnings PyTorch gives for a declined kernel, as the unsupported reason."""
        torch = self.torch
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                with torch.no_grad(), self.sdpa_ctx():
                    mod(*args)
            except RuntimeError:
                pass
        reasons = [str(x.message).split(" (Triggered")[0] for x in w
                   if "kernel not used because" not in str(x.message)]
        return "; ".join(reasons)[:400] or "no reason given"

    def _kernel_accepts(self, q, k, v, bias, p, causal):
        """The op _run_sdpa_dropout calls directly gets no input checks: F.sdpa's own for
        that kernel first (can_use_flash_attention / can_use_efficient_attention), their
        warnings as the refusal. Without them, V rows of 63 bf16 elements reached the
        efficient kernel and faulted the device (misaligned address) on an H100, a fault
        F.sdpa never lets happen."""
        from attnfuzz.worker import Unsupported
        from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention
        can = can_use_flash_attention if self.backend == "FLASH_ATTENTION" else can_use_efficient_attention
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ok = can(SDPAParams(q, k, v, bias, p, causal, False), True)
        if not ok:
            why = "; ".join(str(x.message).split(" (Triggered")[0] for x in w) or "its input checks"
            raise Unsupported(f"{self.backend} declines the case: {why}")

    def _run_sdpa_dropout(self, case, mod, cfg, args):
        """CUDA flash / memory-efficient SDPA with dropout: the kernel's own Philox RNG, its
        keep mask extracted the way PyTorch's tests do (test_transformers.py): the flash
        op's debug mask (negative = dropped), or _fill_mem_eff_dropout_mask_ replaying the
        efficient kernel's uniforms from its seed and offset (kept where u > p). The op is
        called directly (F.sdpa returns no mask); inputs go through the module's layout code
        first."""
        from attnfuzz.worker import Result, Unsupported
        torch = self.torch
        with torch.set_grad_enabled(bool(case.grads)):
            leaves = None
            if case.grads:
                # the kernel's op is differentiable: its backward replays the same seed and
                # offset, so the keep mask extracted below is the backward's too
                args, leaves = grad_leaves(case, args)
            q, k, v = mod._inputs(*args[:3])
            if cfg["hq"] != cfg["hkv"]:
                rep = cfg["hq"] // cfg["hkv"]
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            q, k, v = (t.contiguous() for t in (q, k, v))
            add, bmask, struct = args[3], args[4], args[5]
            p = float(case.dropout_p)
            B, H, Sq, Sk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
            if self.backend == "FLASH_ATTENTION":
                if add is not None or bmask is not None or struct is not None:
                    raise Unsupported("the flash kernel takes no attn_mask")
                self._kernel_accepts(q, k, v, None, p, cfg["is_causal"])
                outs = torch.ops.aten._scaled_dot_product_flash_attention(
                    q, k, v, p, cfg["is_causal"], return_debug_mask=True, scale=cfg["scale_arg"])
                out, dbg = outs[0], outs[-1]
                keep = (dbg[:, :, :Sq, :Sk] >= 0)
            else:
                bias = combine_masks(None if add is None else add.to(q.dtype), bmask, struct, q.dtype)
                if bias is not None and bias.dtype == torch.bool:
                    zero = torch.zeros((), dtype=q.dtype, device=q.device)
                    bias = torch.where(bias, zero, zero - float("inf"))
                if bias is not None:
                    # As F.sdpa does before this kernel: a contiguous bias whose rows are
                    # padded to a multiple of 16 elements (the kernel's alignment rule).
                    pad = (-Sk) % 16
                    full = torch.zeros((B, H, Sq, Sk + pad), dtype=q.dtype, device=q.device)
                    full[..., :Sk] = bias.expand(B, H, Sq, Sk)
                    bias = full[..., :Sk]
                self._kernel_accepts(q, k, v, bias, p, cfg["is_causal"])
                outs = torch.ops.aten._scaled_dot_product_efficient_attention(
                    q, k, v, bias, True, p, cfg["is_causal"], scale=cfg["scale_arg"])
                out, seed, offset = outs[0], int(outs[2].item()), int(outs[3].item())
                # The kernel's uniforms replayed from its seed and offset: kept where u > p.
                with torch.no_grad():
                    m = torch.empty((B, H, Sq, Sk), device=q.device, dtype=torch.float32)
                    m = torch.ops.aten._fill_mem_eff_dropout_mask_(m, p, seed, offset)
                keep = m > p
            out = from_bhsd(out, cfg["out_layout"])
            if case.grads:
                o, g = grads_of(case, cfg, out, leaves, self.device)
                res = Result(o, layout="bhsd", grads=g)
            else:
                res = Result(out, layout=cfg["out_layout"])
        torch.cuda.synchronize()
        res.dropout_keep = keep
        return _host(res)


def repro_snippet(variant: str) -> str:
    """Standalone source: `attention(case, q, k, v, mask=None, bool_mask=None, keep=None)`
    with torch and numpy only (the same module code the worker runs, on the same physical
    inputs); returns the output as [B, Hq, Sq, Dv]."""
    base, cuda = _base_of(variant)
    if base in _torch_serving.KINDS:
        return _torch_serving.repro_snippet_source(variant)
    kind, backend = _KIND[base]
    sdpa_backend = backend if kind == "sdpa" and backend not in (None, "compile") else None
    return _common.snippet(
        ["import torch"],
        _torch_layouts.FUNCTIONS + (combine_masks, grad_leaves, grads_of, backward, struct_input, _config,
                                    _arguments, _Base, make_modules),
        consts={"_KIND": _KIND},
        tail=f'''

def model(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """{variant}'s module on the case's device, its config, its arguments from the physical
    inputs, the device, and the context that forces its SDPA kernel (if any)."""
    import contextlib
    dev = {"'cuda'" if cuda else "'cpu'"}
    if dev == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = bool(case.allow_tf32)
        torch.backends.cudnn.allow_tf32 = bool(case.allow_tf32)
    SDPAModule, ExplicitModule, FlexModule = make_modules()
    cfg = _config(case, {base!r}, {cuda!r})
    cls = {{'sdpa': SDPAModule, 'explicit': ExplicitModule, 'flex': FlexModule}}[{kind!r}]
    mod = cls(cfg).to(dev).eval()
    if {backend == 'compile'!r}:
        mod = torch.compile(mod, dynamic=False, fullgraph=True)
    args = _arguments(case, cfg, q, k, v, mask, bool_mask, keep, dev)
    kernel = {sdpa_backend!r}      # the SDPA kernel this variant forces, if any
    if kernel is None:
        return mod, cfg, args, dev, contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return mod, cfg, args, dev, sdpa_kernel([getattr(SDPBackend, kernel)])


def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """{variant}: q, k, v (and masks) as numpy arrays in the case's physical layout;
    `keep` is the dropout keep mask [B, Hq, Sq, Sk] when the case has dropout. Returns the
    output as [B, Hq, Sq, Dv]."""
    mod, cfg, args, dev, forced = model(case, q, k, v, mask, bool_mask, keep)
    with torch.no_grad(), forced:
        out = mod(*args)
    return layouts.to_bhsd(to_numpy(out), cfg['out_layout'], case.q_heads, case.v_head_dim)


def gradients(case, q, k, v, dout, mask=None, bool_mask=None, keep=None):
    """{variant}, backward as a training step runs it: out.backward(dout) with dout (the
    upstream gradient, numpy, in the output layout) on leaves made from the physical
    inputs. Returns the gradients the case asks for as numpy: dq, dk, dv as
    [B, H, S, D], dmask at the mask's shape."""
    mod, cfg, args, dev, forced = model(case, q, k, v, mask, bool_mask, keep)
    case.dout = dout
    with forced:
        _, g = backward(case, cfg, lambda a: mod(*a), args, dev)
    return {{n: to_numpy(t) for n, t in g.items()}}
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK, Target))
