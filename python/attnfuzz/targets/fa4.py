"""FlashAttention-4 (flash-attn-4, `flash_attn.cute`: CuTe DSL kernels over nvidia-cutlass-dsl,
compiled per configuration on first use) as an attnfuzz target.

  func     flash_attn_func on [B, S, H, D] tensors: causal (bottom-right), windows
           (window_size, around the bottom-right diagonal), softcap, a learnable sink per
           head (the sinks form), the backward through autograd (dQ, dK, dV); the softmax
           statistics through return_lse=True (cap lse, natural log; none for a sink's case)
  varlen   flash_attn_varlen_func: THD tensors with cu_seqlens (packed), paged K/V through
           page_table and seqused_k (paged), key padding through seqused_k; forward only

FA4 runs on compute capability 8.x to 12.x; its SM90 (Hopper: H100, H200) path takes head
dims 8 to 256 (multiples of 8, interface.py _validate_head_dims) and paged KV, its backward
9.x and up (flash-attn-4 4.0.0b36). `probe` names what the GPU lacks; `attnfuzz backends`
prints it. Its kernels compile per dtype, head dims, causal/window, softcap and sink
(CuTe DSL JIT, seconds): the variants are `compiled`, keyed by that structure.

Only torch, numpy and flash_attn.cute: repro_snippet copies the model code."""

from __future__ import annotations

import sys

import numpy as np

from attnfuzz import serving
from attnfuzz.targets import _base, _common, _torch_layouts
from attnfuzz.targets._torch_layouts import to_bhsd, to_numpy, to_torch, unpack_qkv

# the compute capabilities (major) flash_attn.cute's forward asserts, and its backward's
FORWARD_MAJORS = (8, 9, 10, 11, 12)
BACKWARD_MAJORS = (9, 10, 11, 12)


def _probe(variant):
    import torch
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if major not in FORWARD_MAJORS:
        return "FlashAttention-4 runs on compute capability 8.x to 12.x (this GPU: %d.%d)" % (major, minor)
    return None


_V = _base.Variant
STACK = _base.Stack("fa4", imports=("flash_attn.cute", "torch"), version_of="flash_attn",
                    gpu_pip=("flash-attn-4==4.0.0b36",), probe=_probe, trains=True, variants=(
    _V("func", "flash_attn.cute.flash_attn_func, forward and backward (CUDA, CuTe DSL JIT)", gpu=True,
       compiled=True, quick=True, serving=("sinks",)),
    _V("varlen", "flash_attn.cute.flash_attn_varlen_func: THD, paged KV, seqused_k (CUDA, CuTe DSL JIT)", gpu=True,
       compiled=True, quick=True, backward=False, serving=("packed", "paged", "sinks")),
))


# ---------------------------------------------------------------------------------------
# The model code: flash_attn.cute, torch, numpy only (repro_snippet copies it).
# ---------------------------------------------------------------------------------------

def fa_window(case):
    """FlashAttention's window_size (left, right) around the bottom-right diagonal: the case's
    window, None for an unbounded side; causal is its own flag."""
    left, right = case.window
    return (int(left) if left >= 0 else None, int(right) if right >= 0 else None)


def bshd_inputs(case, q, k, v, dev):
    """A dense case's q, k, v as torch [B, S, H, D] views of its physical tensors."""
    if case.packed:
        qb, kb, vb = unpack_qkv(to_torch(case.qkv, dev), case.layout, case.q_heads, case.head_dim)
    else:
        qb = to_bhsd(to_torch(q, dev), case.layouts["q"], case.q_heads, case.head_dim)
        kb = to_bhsd(to_torch(k, dev), case.layouts["k"], case.kv_heads, case.head_dim)
        vb = to_bhsd(to_torch(v, dev), case.layouts["v"], case.kv_heads, case.v_head_dim)
    return qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2)


def fa4_attention(case, q, k, v, dev, variant, want_lse=False):
    """One case through flash_attn.cute: (out, its layout "bhsd" or "thd", {gradient: torch
    [B, H, S, D]} for a backward case, the softmax statistics or None). want_lse (func,
    forward, no sink): flash_attn_func(return_lse=True)'s lse, float32 [B, Hq, Sq], natural
    log (FlashAttention's convention); a sink's case gets none (whether FA4's lse counts the
    sink is not documented)."""
    import torch
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    kw = dict(softmax_scale=float(case.scale), causal=bool(case.causal), window_size=fa_window(case),
              softcap=float(case.softcap))
    if case.sinks is not None:
        kw["learnable_sink"] = torch.from_numpy(np.asarray(case.sinks, dtype=np.float32)).to(dev)
    if variant == "func":
        qb, kb, vb = (x.contiguous() for x in bshd_inputs(case, q, k, v, dev))
        if not case.grads and want_lse and case.sinks is None:
            r = flash_attn_func(qb, kb, vb, return_lse=True, **kw)
            if not (isinstance(r, tuple) and len(r) >= 2 and r[1] is not None):
                raise RuntimeError("fa4: flash_attn_func(return_lse=True) returned no lse")
            return r[0].transpose(1, 2), "bhsd", {}, r[1]
        if not case.grads:
            r = flash_attn_func(qb, kb, vb, **kw)
            return (r[0] if isinstance(r, tuple) else r).transpose(1, 2), "bhsd", {}, None
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_(True) for x in (qb, kb, vb)]
            out = flash_attn_func(*leaves, **kw)
            out = out[0] if isinstance(out, tuple) else out
            do = to_bhsd(to_torch(case.dout, dev), case.out_layout, case.q_heads, case.v_head_dim)
            out.backward(do.transpose(1, 2).to(out.dtype))
        g = dict(zip(("dq", "dk", "dv"), (x.grad.transpose(1, 2) for x in leaves)))
        return out.detach().transpose(1, 2), "bhsd", {n: g[n] for n in case.grads}, None
    B = case.batch
    lens_k = [case.seg_k(b) if (case.thd or case.paged) else case.valid_keys[b] for b in range(B)]
    seqused_k = torch.tensor(lens_k, dtype=torch.int32, device=dev)
    st = case.serving_tensors
    if case.thd:
        qt = to_torch(q, dev).contiguous()
        kw.update(cu_seqlens_q=torch.from_numpy(np.asarray(st["cu_seqlens_q"], dtype=np.int32)).to(dev),
                  max_seqlen_q=case.q_len)
    else:
        qt = bshd_inputs(case, q, k, v, dev)[0].contiguous() if not case.paged else \
            to_bhsd(to_torch(q, dev), case.layouts["q"], case.q_heads, case.head_dim).transpose(1, 2).contiguous()
    if case.paged:
        kt, vt = to_torch(k, dev).contiguous(), to_torch(v, dev).contiguous()       # [P, page, Hkv, D]
        kw.update(page_table=torch.from_numpy(np.asarray(st["block_table"], dtype=np.int32)).to(dev),
                  seqused_k=seqused_k)
    elif case.thd:
        kt, vt = to_torch(k, dev).contiguous(), to_torch(v, dev).contiguous()
        kw.update(cu_seqlens_k=torch.from_numpy(np.asarray(st["cu_seqlens_k"], dtype=np.int32)).to(dev),
                  max_seqlen_k=case.kv_len)
    else:
        _, kt, vt = (x.contiguous() for x in bshd_inputs(case, q, k, v, dev))
        kw["seqused_k"] = seqused_k
    out = flash_attn_varlen_func(qt, kt, vt, **kw)
    if isinstance(out, tuple):
        out = out[0]
    return (out, "thd", {}, None) if case.thd else (out.transpose(1, 2), "bhsd", {}, None)


# ---------------------------------------------------------------------------------------
# The worker side.
# ---------------------------------------------------------------------------------------

class Target(_base.Target):
    STACK = STACK
    SCORE_BUDGET = False
    LAZY_COMPILE = True        # a configuration's first call compiles its kernels
    REFUSALS = ("is not supported", "not supported on", "Unsupported compute capability", "must be between")

    def __init__(self, variant):
        import torch
        self.torch = torch
        super().__init__(variant)
        torch.set_grad_enabled(False)
        major, _ = torch.cuda.get_device_capability()
        self.major = major

    def libs(self):
        return dict(super().libs(), **_common.torch_libs(self.torch, True))

    def declare(self):
        caps = ["f16", "bf16", "gqa", "cross", "scale", "causal", "window", "softcap", "strided"]
        if self.variant == "varlen":
            caps.append("padding")
        else:
            caps.append("lse")      # flash_attn_func(return_lse=True): natural log
        return {"caps": caps, "dtypes": ["f16", "bf16"],
                "limits": {"head_dim_multiple": 8, "max_head_dim": 256},
                # FlashAttention's causal mask and windows sit on the bottom-right diagonal
                # (of each row's valid keys where seqused_k gives them)
                "conventions": {"causal": ["bottom_right", "bottom_right_valid"] if self.variant == "func"
                                else ["bottom_right_valid"],
                                # its masks are -inf fills of whole score tiles and P V is a dense
                                # product: 0 * Inf of a masked key's V, and NaN + -inf of a masked
                                # key's non-finite score, leak (H200 campaign, 2026-12-02)
                                "masked_values": "ieee", "masked_keys": "ieee"},
                "compile_key": ["shapes", "dtype", "causal", "softcap"]}

    def refuse(self, case, mask, bool_mask):
        from attnfuzz.worker import Unsupported
        if case.grads and self.major not in BACKWARD_MAJORS:
            raise Unsupported("fa4: the backward runs on compute capability 9.x to 12.x")
        if self.variant == "varlen" and case.paged and case.thd:
            raise Unsupported("fa4: page_table is not supported with cu_seqlens_k (a THD query with paged KV "
                              "needs cu_seqlens_q only: not built here)")
        if self.variant == "varlen" and case.paged and (case.head_dim % 16 or case.v_head_dim % 16):
            # flash_fwd_sm90.py: a page size other than the kernel's tile_n reads K/V without TMA,
            # which asserts "Paged KV does not support irregular head dim" (not a multiple of 16)
            raise Unsupported("fa4: paged KV needs head dims that are multiples of 16")

    def structure(self, case, mask, bool_mask):
        return (self.variant, case.dtype, case.head_dim, case.v_head_dim, case.q_heads // case.kv_heads,
                bool(case.causal), fa_window(case), case.softcap > 0, case.sinks is not None, case.grads,
                tuple(sorted(case.forms)))

    def build(self, case, q, k, v, mask, bool_mask):
        return True         # the kernels compile on the structure's first call (LAZY_COMPILE)

    def execute(self, art, req):
        from attnfuzz.request import old_form
        from attnfuzz.worker import Result
        case, q, k, v, _, _ = old_form(req)
        out, lay, grads, lse = fa4_attention(case, q, k, v, "cuda", self.variant, want_lse=req.want_lse)
        self.torch.cuda.synchronize()
        return Result(to_numpy(out), layout=lay, grads={n: to_numpy(x) for n, x in grads.items()} or None,
                      lse=None if lse is None else lse.float().cpu().numpy())

    def fatal(self, exc):
        return "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError"


def repro_snippet(variant):
    return _common.snippet(
        ["import torch"],
        _torch_layouts.FUNCTIONS + (fa_window, bshd_inputs, fa4_attention),
        namespaces={"serving": [serving.cu_seqlens, serving.seg_q, serving.padded_out]},
        tail=f'''

def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """fa4/{variant}: q, k, v as the worker kit hands them. Returns [B, Hq, Sq, Dv]."""
    out, lay, _, _ = fa4_attention(case, q, k, v, "cuda", {variant!r})
    out = to_numpy(out)
    return serving.padded_out(case, out, "thd") if lay == "thd" else out
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK, Target))
