"""The model code of the torch targets (attnfuzz.targets.torch): the nn.Modules fed Q, K, V
in the case's physical layout (SDPA, the explicit graph, FlexAttention), their configuration
per case, their arguments from a request, and the backward a training step runs. Only torch,
numpy and math and the host helpers of _common: repro_snippet (attnfuzz.targets.torch) copies
these functions verbatim into a standalone repro script, whose copies get a repro's request."""

from __future__ import annotations

import math

import numpy as np

from attnfuzz import masks
from attnfuzz.targets import _common
from attnfuzz.targets._torch_layouts import band, from_bhsd, to_bhsd, to_numpy, to_torch, unpack_qkv

# The module kind and SDPA backend of each variant (without the cuda_ prefix).
_KIND = {
    "sdpa_math": ("sdpa", "MATH"),
    "sdpa_flash": ("sdpa", "FLASH_ATTENTION"),
    "sdpa_flash_lse": ("sdpa", "FLASH_ATTENTION"),  # the flash op called directly (SDPAModule.forward_lse)
    "sdpa_efficient_lse": ("sdpa", "EFFICIENT_ATTENTION"),   # the CUDA ops called directly, likewise
    "sdpa_cudnn_lse": ("sdpa", "CUDNN_ATTENTION"),
    "sdpa_efficient": ("sdpa", "EFFICIENT_ATTENTION"),
    "sdpa_cudnn": ("sdpa", "CUDNN_ATTENTION"),
    "explicit": ("explicit", None),
    "compile": ("explicit", "compile"),
    "compile_sdpa": ("sdpa", "compile"),
    "flex": ("flex", "compile"),
}


# The variants that call an SDPA kernel's op directly and return its logsumexp (cap lse), and
# the op forward_lse calls for each (cfg "lse_op").
LSE_BASES = ("sdpa_flash_lse", "sdpa_efficient_lse", "sdpa_cudnn_lse")


def _lse_op(base: str, cuda: bool):
    if base not in LSE_BASES:
        return None
    return "cpu_flash" if not cuda else base[5:-4]      # flash, efficient, cudnn


def _base_of(variant: str) -> tuple:
    cuda = variant.startswith("cuda_")
    return (variant[5:] if cuda else variant), cuda



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
            self._setup(cfg, scale=cfg["scale_arg"], is_causal=cfg["is_causal"], gqa=cfg["hq"] != cfg["hkv"],
                        lse_op=cfg.get("lse_op"))

        def forward(self, q, k, v, add=None, bool_mask=None, struct=None):
            q, k, v = self._inputs(q, k, v)
            if add is not None and add.dtype not in (torch.float32, q.dtype):
                add = add.float()     # SDPA takes bool, float32 or Q's dtype; f32 holds the rest exactly
            m = combine_masks(add, bool_mask, struct, q.dtype)
            kw = {"enable_gqa": True} if self.gqa else {}
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=self.is_causal,
                                               scale=self.scale, **kw)
            return from_bhsd(o, self.out_layout)

        def forward_lse(self, q, k, v, add=None, bool_mask=None, struct=None):
            """The same inputs through an SDPA kernel's op itself, which returns the output
            and its logsumexp (float32, natural log: PyTorch's FlashAttention convention):
            (out in the output layout, logsumexp [B, Hq, Sq]). lse_op "cpu_flash":
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu; "flash", "efficient",
            "cudnn": the CUDA ops _scaled_dot_product_flash_attention (no attn_mask: is_causal
            only), _scaled_dot_product_efficient_attention (its log_sumexp has Sq padded to a
            multiple of 32: cut), _scaled_dot_product_cudnn_attention. The ops take no
            boolean mask (SDPA converts one to 0 / -inf first: done here in float32 for the
            CPU op, in Q's dtype for the CUDA ones, exact either way). The CPU op takes GQA
            as it comes (Hkv heads); the CUDA ones get K and V repeated to Hq heads, as SDPA
            does before calling the memory-efficient one. The ops read the last dimension as
            contiguous without checking (a channels-first or stride-0 view gave garbage on
            torch 2.15): such a view is copied first, as SDPA hands the ops only tensors
            whose last dimension has stride 1. The CUDA ops get contiguous copies: with the
            case's strides (a stride-0 K, rows padded off 16 bytes) they crash on a misaligned
            address or return NaN, as SDPA's own kernels do (known entries
            torch-cuda-flash-padded-stride-misaligned, torch-cuda-cudnn-misaligned-crash,
            torch-cuda-efficient-padded-value-misaligned): these variants are for the
            statistics, the strides are the plain variants'. The memory-efficient op wants its bias rows
            16-aligned: the bias is copied into a buffer whose rows are padded to a multiple
            of 16 elements and viewed back (SDPA's own preprocessing)."""
            q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in self._inputs(q, k, v))
            op = self.lse_op
            if add is not None and add.dtype not in (torch.float32, q.dtype):
                add = add.float()
            m = combine_masks(add, bool_mask, struct, q.dtype)
            if m is not None and m.dtype == torch.bool:
                m = torch.zeros(m.shape, dtype=torch.float32 if op == "cpu_flash" else q.dtype,
                                device=m.device).masked_fill(~m, float("-inf"))
            if op == "cpu_flash":
                o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k, v, 0.0, self.is_causal, attn_mask=m, scale=self.scale)
                return from_bhsd(o, self.out_layout), lse
            q, k, v = (x.contiguous() for x in (q, k, v))
            B, H, Sq = q.shape[0], q.shape[1], q.shape[2]
            if k.shape[1] != H:
                k, v = (x.repeat_interleave(H // x.shape[1], dim=1) for x in (k, v))
            if m is not None:
                Sk = k.shape[2]
                buf = torch.empty((B, H, Sq, Sk + (-Sk) % 16), dtype=m.dtype, device=m.device)
                buf[..., :Sk] = m.expand(B, H, Sq, Sk)
                m = buf[..., :Sk]
            if op == "flash":
                if m is not None:
                    raise ValueError("not supported: the CUDA flash op takes no attn_mask (is_causal only)")
                r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, self.is_causal, False,
                                                                       scale=self.scale)
            elif op == "efficient":
                r = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, m, True, 0.0, self.is_causal,
                                                                           scale=self.scale)
            else:
                r = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, m, True, 0.0, self.is_causal, False,
                                                                       scale=self.scale)
            o, lse = r[0], r[1]
            # [B, H, Sq] (flash), [B, H, 32 ceil(Sq / 32)] (efficient), [B, H, Sq, 1] (cuDNN)
            return from_bhsd(o, self.out_layout), lse.reshape(B, H, -1)[..., :Sq]

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


def grads_of(case, dout, cfg, out, leaves, dev):
    """out.backward(dout) (dO as sent: the output layout, its own strides): (out, {name:
    gradient}) for the gradients the case asks for, out and dq, dk, dv as canonical
    [B, H, S, D] tensors, dmask at the mask's shape as sent."""
    import torch
    do = to_torch(dout, dev)
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


def backward(case, dout, cfg, forward, args, dev):
    """forward(args) with gradients: grads_of's (out, {name: gradient})."""
    import torch
    with torch.enable_grad():
        args, leaves = grad_leaves(case, args)
        return grads_of(case, dout, cfg, forward(args), leaves, dev)


def struct_input(case, cfg):
    """The structural-mask input of a module: None, bool [B, 1, Sq, Sk] (True = attend), or
    for FlexAttention's mask_mod int64 [2, B]: the diagonal offset and valid keys per row."""
    if not cfg["struct"]:
        return None
    if cfg["kind"] == "flex":
        return np.array([case.diag_offset, case.valid_keys], dtype=np.int64)
    return _common.structural_allowed(case)


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
        "lse_op": _lse_op(base, cuda),
    }


def _arguments(req, cfg, dev):
    """The module's arguments from a request: q, k, v (or the packed buffer), the masks as
    sent, the structural input, and for the explicit module the keep mask (0 < p < 1; p = 1
    drops every weight without one)."""
    import torch
    case = req.case
    if case.packed:
        args = [to_torch(req.qkv, dev), None, None]
    else:
        args = [to_torch(req.q, dev), to_torch(req.k, dev), to_torch(req.v, dev)]
    args.append(None if req.mask is None else to_torch(req.mask, dev))
    args.append(None if req.bool_mask is None else to_torch(req.bool_mask, dev))
    struct = struct_input(case, cfg)
    args.append(None if struct is None else torch.from_numpy(struct).to(dev))
    if cfg["kind"] == "explicit":
        keep = req.keep if 0.0 < case.dropout_p < 1.0 else None
        args.append(None if keep is None else torch.from_numpy(np.ascontiguousarray(keep)).to(dev))
    return args


def _host(res):
    """A Result whose tensors (output, gradients, keep mask) may still be on the device, with
    numpy arrays instead."""
    def host(t):
        return t if t is None or isinstance(t, np.ndarray) else to_numpy(t)
    res.out = host(res.out)
    res.dropout_keep = host(res.dropout_keep)
    res.lse = host(res.lse)
    if res.grads:
        res.grads = {n: host(t) for n, t in res.grads.items()}
    return res


# The fields of _config an eager module takes per case (its values(cfg)), not at build.
_VALUE_FIELDS = ("scale", "scale_arg", "softcap", "dropout_p")
