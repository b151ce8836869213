"""PyTorch's serving paths as attnfuzz targets (docs/design.md section 2, "Serving forms"):
the variants of attnfuzz.targets.torch whose kind is here.

  sdpa_jagged, cuda_sdpa_jagged   F.scaled_dot_product_attention on nested jagged tensors
                                  (torch.nested.nested_tensor_from_jagged of THD values and
                                  cu_seqlens offsets)
  flex_paged, cuda_flex_paged     FlexAttention over a page cache with
                                  torch.nn.attention.experimental._paged_attention.PagedAttention:
                                  the case's block table as its page table, the logical block
                                  mask converted to physical pages, ALiBi and softcap as a
                                  score_mod, a sink through the returned log-sum-exp (CUDA)
  cuda_flex_decode                the same with at most 16 queries a row: FlexAttention's
                                  decode (split-KV) kernel
  cuda_varlen                     torch.nn.attention.varlen.varlen_attn (FlashAttention varlen)
                                  with cu_seqlens; paged KV through its block_table where the
                                  installed torch has it

A dense case is served the way a serving stack would batch it: each batch row a segment of
Sq queries and its valid keys (THD for jagged and varlen; a page cache of 16-token pages in
order for the flex variants). Outputs: THD for a packed case (jagged, varlen), else the
padded [B, Hq, Sq, Dv] view (rows past a segment are ignored by attnfuzz).

Conventions (torch 2.15 CPU; the CUDA ones are written from the APIs and run by
scripts/gpu_campaign.sh): NJT's is_causal is CUDA only (the CPU math path refuses it) and sent
only where top-left and bottom-right agree (every segment's diagonal at 0); FlexAttention gives weight 0 to masked keys inside
a block but multiplies them (masked_values "ieee"); CPU FlexAttention cannot return the
log-sum-exp a sink needs (no cap sinks there)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np

from attnfuzz import serving
from attnfuzz.targets import _base, _common, _torch_layouts, _torch_probes
from attnfuzz.targets._torch_layouts import band, to_bhsd, to_numpy, to_torch, unpack_qkv
from attnfuzz.targets.torch import SERVING_KINDS as KINDS
from attnfuzz.targets.torch import STACK
# The pages a flex variant cuts a dense case's keys into, and its query block: on CUDA
# FlexAttention's Triton kernel tiles (BLOCK_M, BLOCK_N up to 128) must divide the block
# mask's blocks, so there both are PyTorch's default 128 (with 16, f16 has no kernel
# config: Inductor's NoValidChoicesError)
DENSE_PAGE = 16
CUDA_BLOCK = 128


# ---------------------------------------------------------------------------------------
# The model code: torch, numpy and math only (repro_snippet copies it).
# ---------------------------------------------------------------------------------------

def segment_lengths(case):
    """(nq, nk) per batch row: a packed case's segments, else Sq and the valid keys."""
    return [(case.seg_q(b), case.valid_keys[b] if case.kv_lens is None else case.seg_k(b)) for b in range(case.batch)]


def dense_thd(x, lens):
    """[B, H, S, D] torch -> THD [sum(lens), H, D]: row b's first lens[b] positions."""
    return torch_cat([x[b, :, :n].transpose(0, 1) for b, n in enumerate(lens)], x.shape[1], x.shape[3], x)


def torch_cat(parts, H, D, like):
    import torch
    return torch.cat(parts) if parts else torch.empty((0, H, D), dtype=like.dtype, device=like.device)


def dense_bhsd(req, dev):
    """A request's dense inputs as torch [B, H, S, D] views (a packed QKV buffer split as
    models do)."""
    case, q, k, v = req.case, req.q, req.k, req.v
    if case.packed:
        return unpack_qkv(to_torch(req.qkv, dev), case.layout, case.q_heads, case.head_dim)
    return (to_bhsd(to_torch(q, dev), case.layouts["q"], case.q_heads, case.head_dim),
            to_bhsd(to_torch(k, dev), case.layouts["k"], case.kv_heads, case.head_dim),
            to_bhsd(to_torch(v, dev), case.layouts["v"], case.kv_heads, case.v_head_dim))


def thd_inputs(req, dev):
    """THD q, k, v (torch, contiguous) and cu_seqlens_q, cu_seqlens_k (int32 torch) of a
    request: a packed case's own tensors (its paged K and V gathered to THD), else its batch
    rows."""
    import torch
    case, q, k, v = req.case, req.q, req.k, req.v
    lens = segment_lengths(case)
    cu_q = torch.tensor(serving.cu_seqlens([a for a, _ in lens]), device=dev)
    cu_k = torch.tensor(serving.cu_seqlens([b for _, b in lens]), device=dev)
    dense = None if (case.thd or case.paged) else dense_bhsd(req, dev)
    if case.thd:
        qt = to_torch(q, dev)
    else:
        qb = dense[0] if dense else to_bhsd(to_torch(q, dev), case.layouts["q"], case.q_heads,
                                                           case.head_dim)
        qt = dense_thd(qb, [a for a, _ in lens])
    if case.thd and not case.paged:
        kt, vt = to_torch(k, dev), to_torch(v, dev)
    else:
        if case.paged:
            _, kb, vb = serving.gather(case, dict(req.tables, k=k, v=v))
            kb, vb = (torch.from_numpy(x).to(dev).to(qt.dtype) for x in (kb, vb))
        else:
            kb, vb = dense[1], dense[2]
        kt, vt = dense_thd(kb, [b for _, b in lens]), dense_thd(vb, [b for _, b in lens])
    return qt.contiguous(), kt.contiguous(), vt.contiguous(), cu_q, cu_k


def jagged_attention(case, qt, kt, vt, cu_q, cu_k, causal, scale):
    """F.scaled_dot_product_attention on nested jagged tensors [B, H, j, D] made from THD
    values and their cu_seqlens offsets; the output's values as THD [Tq, Hq, Dv]."""
    import torch
    import torch.nn.functional as F
    if case.q_heads != case.kv_heads:  # GQA as user code writes it for NJT: repeat the heads
        rep = case.q_heads // case.kv_heads
        kt, vt = kt.repeat_interleave(rep, dim=1), vt.repeat_interleave(rep, dim=1)
    nq = torch.nested.nested_tensor_from_jagged(qt, cu_q.to(torch.int64)).transpose(1, 2)
    nk = torch.nested.nested_tensor_from_jagged(kt, cu_k.to(torch.int64)).transpose(1, 2)
    nv = torch.nested.nested_tensor_from_jagged(vt, cu_k.to(torch.int64)).transpose(1, 2)
    o = F.scaled_dot_product_attention(nq, nk, nv, is_causal=causal, scale=scale)
    return o.transpose(1, 2).values()


def flex_paged_attention(req, dev, cfg):
    """FlexAttention over a page cache: q padded [B, Hq, Sq, D]; the case's caches and block
    table (a dense case: its keys cut into cfg["dense_page"]-token pages in order); PagedAttention
    maps logical key blocks to pages; ALiBi and softcap in the score_mod; a sink through the
    log-sum-exp: out * sigmoid(lse - z). Returns [B, Hq, Sq, Dv] and its log-sum-exp use."""
    import torch
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    case, q, k, v = req.case, req.q, req.k, req.v
    B, Hq, Hkv, Sq = case.batch, case.q_heads, case.kv_heads, case.q_len
    if case.thd:
        qb = torch.zeros((B, Hq, Sq, case.head_dim), dtype=cfg["dtype"], device=dev)
        qt, cu = to_torch(q, dev), serving.cu_seqlens([case.seg_q(b) for b in range(B)])
        for b in range(B):
            qb[b, :, :cu[b + 1] - cu[b]] = qt[cu[b]:cu[b + 1]].transpose(0, 1)
    elif case.paged:  # K and V are page caches: only Q is in the case's dense layout
        qb = to_bhsd(to_torch(q, dev), case.layouts["q"], case.q_heads, case.head_dim)
    else:
        qb = dense_bhsd(req, dev)[0]
    lens = [nk for _, nk in segment_lengths(case)]
    if case.paged:
        ps = case.page_size
        table = torch.from_numpy(np.asarray(req.tables["block_table"], dtype=np.int64)).to(dev)
        kc, vc = to_torch(k, dev), to_torch(v, dev)                        # [P, ps, Hkv, D]
    else:  # a dense case's (or THD) keys, paged in order
        ps = cfg["dense_page"]
        if case.thd:
            _, kb, vb = serving.gather(case, dict(req.tables, k=k, v=v))
            kb, vb = (torch.from_numpy(x).to(dev).to(cfg["dtype"]) for x in (kb, vb))
        else:
            _, kb, vb = dense_bhsd(req, dev)
        W = max(1, -(-case.kv_len // ps))
        pad = W * ps - case.kv_len
        kc = torch.nn.functional.pad(kb, (0, 0, 0, pad)).transpose(1, 2).reshape(B * W, ps, Hkv, case.head_dim)
        vc = torch.nn.functional.pad(vb, (0, 0, 0, pad)).transpose(1, 2).reshape(B * W, ps, Hkv, case.v_head_dim)
        table = torch.arange(B * W, device=dev).reshape(B, W)
    P, W = kc.shape[0], table.shape[1]
    paged = PagedAttention(n_pages=P, page_size=ps, max_batch_size=B, device=dev)
    paged.page_table[:, :W] = table
    for b in range(B):
        n = -(-lens[b] // ps)
        paged.physical_to_logical[b, table[b, :n]] = torch.arange(n, device=dev)
    # PagedAttention's cache: [1, H, pages * page_size, D], its batch broadcast by
    # flex_attention (a block mask given) as PyTorch's paged-attention tests call it
    kf = kc.permute(2, 0, 1, 3).reshape(1, Hkv, P * ps, case.head_dim)
    vf = vc.permute(2, 0, 1, 3).reshape(1, Hkv, P * ps, case.v_head_dim)
    kv_len = torch.tensor(lens, device=dev)
    q_len = torch.tensor([case.seg_q(b) for b in range(B)], device=dev)
    off = torch.tensor(case.diag_offset, device=dev)
    causal, (left, right) = bool(case.causal), case.window

    def mask_mod(b, h, qi, kv):
        return band((kv < kv_len[b]) & (qi < q_len[b]), kv, qi + off[b], causal, left, right)

    cap = cfg["softcap"]
    slopes = None if req.alibi_slopes is None else torch.from_numpy(np.asarray(req.alibi_slopes)).to(dev)
    symmetric = case.alibi_symmetric

    def score_mod(score, b, h, qi, kv):
        if cap > 0:
            score = cap * torch.tanh(score / cap)
        if slopes is not None:
            dist = (qi + off[b] - kv).to(torch.float32)
            score = score - slopes[h] * (dist.abs() if symmetric else dist)
        return score

    block_mask = create_block_mask(mask_mod, B, None, Sq, W * ps, device=dev, BLOCK_SIZE=(cfg["q_block"], ps))
    block_mask = paged.convert_logical_block_mask(block_mask, kv_len=kv_len)
    mod = paged.get_score_mod(score_mod, kv_len) if (cap > 0 or slopes is not None) else None
    fn = cfg["flex"] or flex_attention
    if req.sinks is None:
        return fn(qb, kf, vf, score_mod=mod, block_mask=block_mask, scale=cfg["scale_arg"],
                  enable_gqa=Hq != Hkv)
    from torch.nn.attention.flex_attention import AuxRequest
    out, aux = fn(qb, kf, vf, score_mod=mod, block_mask=block_mask, scale=cfg["scale_arg"], enable_gqa=Hq != Hkv,
                  return_aux=AuxRequest(lse=True))
    z = torch.from_numpy(np.asarray(req.sinks)).to(dev).reshape(1, Hq, 1)
    w = torch.sigmoid(aux.lse.float() - z)  # e^lse / (e^lse + e^z): a row without keys has lse -inf, weight 0
    return (out.float() * w[..., None]).to(out.dtype)


def varlen_window(case):
    """FlashAttention's window (left, right) around each segment's bottom-right diagonal: the
    case's window, right capped at 0 by causal; (-1, -1) for neither."""
    left, right = case.window
    if case.causal:
        right = 0
    return (int(left), int(right))


def varlen_attention(req, dev, cfg):
    """torch.nn.attention.varlen.varlen_attn on THD tensors (paged K and V through its
    block_table and seqused_k where the installed torch takes them); THD [Tq, Hq, Dv]."""
    import torch
    from torch.nn.attention.varlen import varlen_attn
    case, q, k, v = req.case, req.q, req.k, req.v
    params = inspect.signature(varlen_attn).parameters
    kw = {}
    if "scale" in params:
        kw["scale"] = cfg["scale_arg"]
    window = varlen_window(case)
    if "window_size" in params:
        kw["window_size"] = window
    elif "is_causal" in params:
        kw["is_causal"] = window == (-1, 0)
    if "enable_gqa" in params and case.q_heads != case.kv_heads:
        kw["enable_gqa"] = True
    lens = segment_lengths(case)
    max_q, max_k = max([a for a, _ in lens] + [1]), max([b for _, b in lens] + [1])
    if case.paged and "block_table" in params:
        qt = to_torch(q, dev).contiguous() if case.thd else thd_inputs(req, dev)[0]
        cu_q = torch.tensor(serving.cu_seqlens([a for a, _ in lens]), device=dev)
        t = req.tables
        kw.update(seqused_k=torch.from_numpy(np.asarray(t["seqlens_k"])).to(dev),
                  block_table=torch.from_numpy(np.asarray(t["block_table"])).to(dev))
        return varlen_attn(qt, to_torch(k, dev).contiguous(), to_torch(v, dev).contiguous(), cu_q, None, max_q,
                           max_k, **kw)
    qt, kt, vt, cu_q, cu_k = thd_inputs(req, dev)
    return varlen_attn(qt, kt, vt, cu_q, cu_k, max_q, max_k, **kw)


def serving_config(case, base, cuda):
    """What a serving variant's call of one case depends on."""
    import torch
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    return {"kind": KINDS[base], "dtype": dt, "scale": float(case.scale),
            "scale_arg": float(case.scale) if case.scale_given else None, "softcap": float(case.softcap),
            "q_block": CUDA_BLOCK if cuda else 16, "dense_page": CUDA_BLOCK if cuda else DENSE_PAGE,
            "flex": None}


def serving_attention(req, dev, cfg):
    """One request through the variant's API: (output as numpy, its layout)."""
    case, kind = req.case, cfg["kind"]
    if kind == "flex_paged":
        return to_numpy(flex_paged_attention(req, dev, cfg)), "bhsd"
    if kind == "jagged":
        qt, kt, vt, cu_q, cu_k = thd_inputs(req, dev)
        out = jagged_attention(case, qt, kt, vt, cu_q, cu_k, bool(case.causal), cfg["scale_arg"])
    else:
        out = varlen_attention(req, dev, cfg)
    out = to_numpy(out)
    if case.thd:
        return out, "thd"
    # a dense case's segments back to [B, Hq, Sq, Dv] (rows past the valid ones: 0)
    full = np.zeros((case.batch, case.q_heads, case.q_len, case.v_head_dim), dtype=out.dtype)
    cu = serving.cu_seqlens([a for a, _ in segment_lengths(case)])
    for b in range(case.batch):
        full[b, :, :cu[b + 1] - cu[b]] = out[cu[b]:cu[b + 1]].transpose(1, 0, 2)
    return full, "bhsd"


# ---------------------------------------------------------------------------------------
# The worker side.
# ---------------------------------------------------------------------------------------

_COMMON = ["f32", "f16", "bf16", "gqa", "cross", "scale", "causal", "padding", "strided"]


class ServingTarget(_base.Target):
    """A serving variant of the torch stack (its declaration in attnfuzz.targets.torch names
    this class)."""
    STACK = STACK
    LAZY_COMPILE = True
    SCORE_BUDGET = False   # none of these forms the [B, Hq, Sq, Sk] scores

    def __init__(self, variant):
        import torch
        self.torch = torch
        self.cuda = variant.startswith("cuda_")
        self.base = variant[5:] if self.cuda else variant
        self.kind = KINDS[self.base]
        self.device = "cuda" if self.cuda else "cpu"
        super().__init__(variant)
        torch.set_num_threads(1)
        torch.set_grad_enabled(False)
        self._flex = None
        if self.kind == "flex_paged":
            import torch._dynamo as dynamo
            for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                         "accumulated_cache_size_limit"):
                if hasattr(dynamo.config, name):
                    setattr(dynamo.config, name, 1 << 20)

    def libs(self):
        return dict(super().libs(), **_common.torch_libs(self.torch, self.cuda, self.device))

    def declare(self):
        conv = {}
        limits = {}
        if self.kind == "jagged":
            # NJT's math path (the CPU one) refuses is_causal=True (_can_use_math_sdpa_jagged);
            # on CUDA the flash and efficient kernels take it
            caps = _COMMON + ["dv"] if self.cuda else [c for c in _COMMON if c != "causal"] + ["dv"]
            # NJT's math path (all of the CPU's, and CUDA's cases the fused kernels refuse)
            # hands the strided nested tensors to _scaled_dot_product_attention_math, which
            # computes Q K^T and the softmax in the case dtype: f16 scores past 65504 are Inf,
            # the row NaN (where dense SDPA is right), and bf16 errors 20x dense SDPA's
            # (measured on torch 2.15's CPU; 133 f16 bundles of an H100 campaign, each NaN on
            # the CPU variant too). pytorch#119131 is the dense math kernel's same class.
            conv["scores"] = ["f16", "bf16"]
        elif self.kind == "flex_paged":
            caps = _COMMON + ["dv", "softcap", "window"]
            conv["masked_values"] = "ieee"
            if self.base == "flex_decode":
                limits["max_q_len"] = 16
        else:  # varlen: FlashAttention, f16/bf16, head dims multiples of 8 up to 256, bottom-right windows
            caps = [c for c in _COMMON if c != "f32"] + ["window"]
            limits.update(max_head_dim=256, head_dim_multiple=8)
            conv["causal"] = ["bottom_right", "bottom_right_valid"]
        # the CPU's bf16 GEMM may read subnormal bf16 as 0 (as the dense variants declare)
        if not self.cuda and "bf16" in caps and _torch_layouts.cpu_bf16_gemm_flushes():
            conv["denormals"] = ["bf16"]
        if self.cuda:
            self._warm()
            if self.kind == "jagged" and self._f32_flushes_denormals():
                conv["denormals"] = ["f32"]
            if self.kind in ("jagged", "varlen") and self._masked_values_leak():
                conv["masked_values"] = "ieee"
        elif self.kind == "jagged" and self._masked_values_leak():
            conv["masked_values"] = "ieee"
        decl = {"caps": caps, "limits": limits, "conventions": conv}
        if self.decl.compiled:
            decl["compile_timeout"] = _common.INDUCTOR_COMPILE_TIMEOUT
        return decl

    def _warm(self):
        """One tiny call of the variant's op before the hello: its first call imports and
        registers what the op needs (torch.fx's symbolic shapes, the custom ops and their
        Triton wrappers: 17 s of an H200 worker's first minute, measured), which a worker
        started ahead of a fault (a spare) should have done before it takes over. A
        warm-up that fails leaves that to the first case."""
        torch = self.torch
        try:
            x = torch.ones(4, 1, 8, dtype=torch.float16, device=self.device)
            cu = torch.tensor([0, 1, 4], dtype=torch.int32, device=self.device)
            if self.kind == "jagged":
                jagged_attention(SimpleNamespace(q_heads=1, kv_heads=1), x, x, x, cu, cu, False, None)
            elif self.kind == "varlen":
                from torch.nn.attention.varlen import varlen_attn
                varlen_attn(x, x, x, cu, cu, 3, 3)
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a warm-up only
            pass

    def _masked_values_leak(self):
        """Measured, as the dense SDPA variants measure it: does a NaN in the value row of a
        key of weight 0 reach query 0's output (P @ V over that key too: 0 * NaN)? On CUDA
        the key is one a causal mask hides from query 0 (40 masked_value_leak bundles of the
        H100 run of 2026-11-28, causal, a NaN or Inf in V, asked for it); the CPU's NJT path
        takes no causal mask, so there the key's score is -inf (a -inf K against a positive
        query: a stock CPU bundle, NaN where the reference excludes the key, asked for it)."""
        torch = self.torch
        dt = torch.float16 if self.cuda else torch.float32
        x = torch.ones(2, 1, 16, dtype=dt, device=self.device)
        v, k = x.clone(), x.clone()
        v[1] = float("nan")
        if not self.cuda:
            k[1] = float("-inf")
        cu = torch.tensor([0, 2], dtype=torch.int32, device=self.device)

        def attend():
            if self.kind == "jagged":
                return jagged_attention(SimpleNamespace(q_heads=1, kv_heads=1), x, k, v, cu, cu, self.cuda, None)
            from torch.nn.attention.varlen import varlen_attn
            params = inspect.signature(varlen_attn).parameters
            kw = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
            return varlen_attn(x, x, v, cu, cu, 2, 2, **kw)
        o = _torch_probes.output(torch, self.cuda, attend, errors=(Exception,))   # a probe only
        return o is not None and bool(torch.isnan(o[0]).any())

    def _f32_flushes_denormals(self):
        """Measured: do NJT's f32 calls (CUDA's memory-efficient kernel) give a V of
        subnormal values with more than its rounding's error (1e-4 of it)? That kernel keeps
        about 11 bits of a subnormal V (torch.py's Target._flushes_denormals)."""
        torch = self.torch
        q = torch.ones(2, 1, 16, dtype=torch.float32, device=self.device)
        v = _torch_layouts.subnormal_values(torch, (2, 1, 16), torch.float32, self.device)
        cu = torch.tensor([0, 2], dtype=torch.int32, device=self.device)

        def attend(q, k, v):
            return jagged_attention(SimpleNamespace(q_heads=1, kv_heads=1), q, k, v, cu, cu, False, None)
        return _torch_probes.flushes_denormals(torch, attend, q, v, 0, True, errors=(Exception,))

    def hello(self):
        h = super().hello()
        # CPU FlexAttention returns no log-sum-exp under torch.compile: no sinks there
        if self.kind == "flex_paged" and not self.cuda and "sinks" in h["caps"]:
            h["caps"].remove("sinks")
        return h

    def refuse(self, req):
        from attnfuzz.worker import Unsupported
        case = req.case
        if self.kind == "jagged":
            lens = segment_lengths(case)
            # NJT's SDPA pads through to_padded_tensor, which raises "at least one constituent
            # tensor should have non-zero numel" when every query or every key segment is empty
            if not any(nq for nq, _ in lens) or not any(nk for _, nk in lens):
                raise Unsupported("sdpa_jagged: nested tensors need a non-empty query and key segment")
        if self.kind == "jagged" and case.causal:
            # NJT's is_causal: top-left per sequence on the math path (the CPU's), bottom-right
            # on the fused kernels CUDA picks (by dtype and shape): on the CPU sent where the
            # diagonal starts at 0, on CUDA only where a segment has as many queries as keys
            # (the two alignments agree; an H100 campaign gave 22 diverging bundles of top-left
            # cases with Sq != Sk before)
            for b, (nq, nk) in enumerate(segment_lengths(case)):
                if nq and (case.diag_offset[b] != 0 or (self.cuda and nq != nk)):
                    raise Unsupported("sdpa_jagged: is_causal only where every segment's diagonal starts at 0"
                                      + (" and it has as many queries as keys" if self.cuda else ""))
        if self.kind == "varlen":
            if case.head_dim != case.v_head_dim:
                raise Unsupported("varlen_attn needs head_dim == v_head_dim")
            # a causal mask or a window: aligned to each sequence's valid keys (the padded
            # batch's bottom-right is another diagonal; windowed cases of it diverged on the H100)
            if case.key_padding is not None and (case.causal or tuple(case.window) != (-1, -1)) \
                    and case.diagonal == "bottom_right":
                raise Unsupported("varlen aligns causal and window masks to each sequence's valid keys "
                                  "(bottom_right_valid)")
        if self.kind == "flex_paged" and case.paged and self.cuda and case.page_size % 16:
            raise Unsupported("FlexAttention's kernels take key blocks (pages) of a multiple of 16 tokens")

    def structure(self, req):
        # a compiled flex kernel per shape of its inputs (the page cache's and the table's
        # included) and per score_mod and mask_mod
        if self.kind != "flex_paged":
            return None
        return (_base.dense_structure(req.case, req.mask, req.bool_mask), req.case.key("serving"))

    def build(self, req):
        if self.kind == "flex_paged" and self._flex is None:
            from torch.nn.attention.flex_attention import flex_attention
            self._flex = self.torch.compile(flex_attention, dynamic=False)
        return self._flex

    def execute(self, art, req):
        from attnfuzz.worker import Result
        cfg = serving_config(req.case, self.base, self.cuda)
        cfg["flex"] = art
        out, lay = serving_attention(req, self.device, cfg)
        if self.cuda:
            self.torch.cuda.synchronize()
        return Result(out, layout=lay)

    def refusal(self, exc):
        msg = str(exc)
        # NoValidChoicesError: Inductor has no FlexAttention kernel config whose tiles divide
        # the block mask's blocks (a case's page size) for this dtype and head dim
        # "No viable backend": SDPA's dispatcher found no kernel that takes the nested case;
        # "must have contiguous last dimension": FlashAttention varlen's input check;
        # "is not correctly aligned", "cutlassF/B: no kernel found": the memory-efficient
        # kernel's own input checks, which NJT's dispatch reaches on packed strided inputs
        # as dense F.sdpa does (the dense variants answer them unsupported too: torch.py
        # _KERNEL_CHECKS)
        for pat in ("NotImplementedError: NYI", "not supported", "must be a multiple", "does not support",
                    "NoValidChoicesError", "No viable backend for scaled_dot_product_attention",
                    "must have contiguous last dimension", "is not correctly aligned",
                    "cutlassF: no kernel found", "cutlassB: no kernel found"):
            if pat in msg:
                return "torch/%s: %s" % (self.variant, msg.strip().splitlines()[0][:300])
        return None

    def fatal(self, exc):
        return self.cuda and ("CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError")


def repro_snippet(variant):
    """Standalone source of `attention(req)` for a serving variant (the request's tables on
    req.tables, as the worker kit puts them)."""
    from attnfuzz.targets import _common
    cuda = variant.startswith("cuda_")
    base = variant[5:] if cuda else variant
    return _common.snippet(
        ["import inspect", "import torch"],
        _torch_layouts.FUNCTIONS + (segment_lengths, dense_thd, torch_cat, dense_bhsd, thd_inputs, jagged_attention,
                                    flex_paged_attention, varlen_window, varlen_attention, serving_config,
                                    serving_attention),
        consts={"KINDS": KINDS, "DENSE_PAGE": DENSE_PAGE, "CUDA_BLOCK": CUDA_BLOCK},
        namespaces={"serving": [serving.cu_seqlens, serving.gather]},
        tail=f'''

def attention(req):
    """{variant}: req.q, req.k, req.v as the worker kit hands them (THD or page caches for a
    serving case, its tables on req.tables). Returns the output as [B, Hq, Sq, Dv]."""
    case = req.case
    dev = {"'cuda'" if cuda else "'cpu'"}
    cfg = serving_config(case, {base!r}, {cuda!r})
    out, lay = serving_attention(req, dev, cfg)
    if lay == "thd":
        full = np.zeros((case.batch, case.q_heads, case.q_len, case.v_head_dim), dtype=out.dtype)
        cu = serving.cu_seqlens([case.seg_q(b) for b in range(case.batch)])
        for b in range(case.batch):
            full[b, :, :cu[b + 1] - cu[b]] = out[cu[b]:cu[b + 1]].transpose(1, 0, 2)
        return full
    return out
''')
