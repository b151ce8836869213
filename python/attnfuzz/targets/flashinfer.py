"""FlashInfer (flashinfer-python) as an attnfuzz target: the serving kernels vLLM and SGLang
call, JIT-compiled with nvcc on first use.

  single_prefill   flashinfer.single_prefill_with_kv_cache per batch row (NHD: [S, H, D]),
                   each row's valid keys sliced as a serving engine hands them
  batch_paged      BatchPrefillWithPagedKVCacheWrapper over a page cache: a paged case's own
                   caches and block table (page sizes from 1 up), a dense or THD case's keys
                   cut into 16-token pages in order
  batch_ragged     BatchPrefillWithRaggedKVCacheWrapper over THD keys and values (qo_indptr,
                   kv_indptr)
  decode           BatchDecodeWithPagedKVCacheWrapper: one query a row over a page cache
  batch_paged_fixed_split
                   batch_paged planned with fixed_split_size (FIXED_SPLIT_PAGES) on the fa2
                   backend (the one that takes it), the mode FlashInfer documents as
                   batch-size invariant: declares batch_invariant, so attnfuzz's
                   batch_split relation requires bitwise equality

Every variant: f16 and bf16, GQA, the causal mask (FlashInfer aligns it to the bottom-right
corner of each row's queries and keys: bottom_right, and bottom_right_valid where a row's keys
are its valid ones), the sliding window's left side (`window_left`: keys
[d - left, d]; a right side only as the causal one), the logits soft cap, and a sink logit
through the returned log-sum-exp (FlashInfer's LSE is in base 2: out * sigmoid(lse ln 2 - z)).
Forward only. The softmax statistics are returned (cap lse, lse_base 2: return_lse's
max + log2 sum exp2), the sink's logit added to them. single_prefill, batch_paged and decode
take FP8 KV caches (fp8_kv, e4m3 and e5m2: K and V in the format, Q in f16/bf16, k_scale and
v_scale the case's descales; FlashInfer folds k_scale into sm_scale and multiplies its f16/bf16
output by v_scale, a second rounding of the output); a case with Q in FP8 too is refused.

Each combination of dtype, head dim, mask mode, window, soft cap and kernel is a JIT build
(tens of seconds with nvcc): the variants are `compiled`, the structure of a case is its
build's key (structure()), the first case of one is timed as compiling (build() runs a tiny
call of that build), and the head dim is one, HEAD_DIM (64; $ATTNFUZZ_FLASHINFER_HEAD_DIM for
another), so that a campaign meets few builds: 3 modules (single prefill, batch prefill, decode)
x 2 dtypes x window x soft cap = 24. The JIT cache is FlashInfer's own, under $FLASHINFER_WORKSPACE_BASE
(default here: ~/.cache/attnfuzz/flashinfer), kept for the machine's life.

Only torch, numpy and flashinfer: repro_snippet copies the model code."""

from __future__ import annotations

import math
import os
import sys

import numpy as np

from attnfuzz import guard, serving
from attnfuzz.targets import _base, _common, _torch_layouts
from attnfuzz.targets._torch_layouts import to_bhsd, to_numpy, to_torch, unpack_qkv

# FlashInfer reads its JIT cache location when it is imported: a persistent one, shared by
# every worker of the machine
os.environ.setdefault("FLASHINFER_WORKSPACE_BASE",
                      os.path.join(os.path.expanduser("~"), ".cache", "attnfuzz", "flashinfer"))

KINDS = ("single_prefill", "batch_paged", "batch_ragged", "decode")
# variants that call one of KINDS another way: the batch-invariant mode of the paged prefill
KIND_OF = {"batch_paged_fixed_split": "batch_paged"}
# plan(fixed_split_size=...) of batch_paged_fixed_split, in pages (DENSE_PAGE tokens for a
# dense case): any fixed split is the batch-invariance contract; 4 splits the longer rows
FIXED_SPLIT_PAGES = 4
# the variants sent FP8 KV cases (fp8_kv: K and V in e4m3/e5m2, k_scale and v_scale)
# (the paged caches FlashInfer documents FP8 for, and the single prefill; not the ragged one)
FP8_KV_KINDS = ("single_prefill", "batch_paged", "decode")
DENSE_PAGE = 16
# the one head dim (Q/K and V) the variants declare: every head dim is a JIT build of each module
HEAD_DIM = int(os.environ.get("ATTNFUZZ_FLASHINFER_HEAD_DIM", "64"))
WORKSPACE_BYTES = 128 << 20


def _probe(variant):
    import torch
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    major, _ = torch.cuda.get_device_capability()
    if major < 8:
        return "FlashInfer's kernels need compute capability 8.0 or newer"
    import shutil
    if not shutil.which("nvcc") and not os.environ.get("CUDA_HOME"):
        return "FlashInfer compiles its kernels with nvcc: none on PATH and no CUDA_HOME"
    return None


_V = _base.Variant
STACK = _base.Stack("flashinfer", imports=("flashinfer", "torch"), gpu_pip=("flashinfer-python==0.7.4",),
                    probe=_probe, variants=(
    _V("single_prefill", "flashinfer.single_prefill_with_kv_cache per batch row (CUDA, JIT)", gpu=True,
       compiled=True, quick=True, serving=("sinks",)),
    _V("batch_paged", "BatchPrefillWithPagedKVCacheWrapper over a page cache (CUDA, JIT)", gpu=True,
       compiled=True, quick=True, serving=("packed", "paged", "sinks")),
    _V("batch_ragged", "BatchPrefillWithRaggedKVCacheWrapper over THD keys (CUDA, JIT)", gpu=True, compiled=True,
       quick=True, serving=("packed", "sinks")),
    _V("decode", "BatchDecodeWithPagedKVCacheWrapper, one query a row (CUDA, JIT)", gpu=True, compiled=True,
       quick=True, serving=("paged", "sinks")),
    _V("batch_paged_fixed_split", "BatchPrefillWithPagedKVCacheWrapper planned with fixed_split_size, its "
       "batch-invariant mode (CUDA, JIT)", gpu=True, compiled=True, quick=True, serving=("packed", "paged", "sinks")),
))


# ---------------------------------------------------------------------------------------
# The model code: flashinfer, torch, numpy only (repro_snippet copies it).
# ---------------------------------------------------------------------------------------

def rows(case):
    """(queries, keys) of each batch row: a packed case's segments, a paged one's key
    lengths, else Sq and the row's valid keys."""
    B = case.batch
    if case.thd or case.paged:
        return [(case.seg_q(b), case.seg_k(b)) for b in range(B)]
    return [(case.q_len, case.valid_keys[b]) for b in range(B)]


def window_left(case):
    """FlashInfer's window_left: the case's left window (-1: none)."""
    return int(case.window[0]) if case.window[0] >= 0 else -1


def dense_bhsd(case, q, k, v, dev):
    """A dense case's q, k, v as torch [B, H, S, D] views (a packed QKV buffer split as models
    do)."""
    if case.packed:
        return unpack_qkv(to_torch(case.qkv, dev), case.layout, case.q_heads, case.head_dim)
    return (to_bhsd(to_torch(q, dev), case.layouts["q"], case.q_heads, case.head_dim),
            to_bhsd(to_torch(k, dev), case.layouts["k"], case.kv_heads, case.head_dim),
            to_bhsd(to_torch(v, dev), case.layouts["v"], case.kv_heads, case.v_head_dim))


def nhd_rows(case, q, k, v, dev):
    """Per batch row: q [nq, Hq, D], k [nk, Hkv, D], v [nk, Hkv, Dv] (torch, contiguous),
    its valid keys only, from the case's physical tensors (THD, page caches or dense)."""
    out = []
    if case.paged or case.thd:   # the serving tensors read as a kernel reads them
        _, kc, vc = serving.gather(case, dict(case.serving_tensors, q=q, k=k, v=v))
        qd = None if case.thd else to_bhsd(to_torch(q, dev), case.layouts["q"], case.q_heads, case.head_dim)
    else:
        qd, kd, vd = dense_bhsd(case, q, k, v, dev)
    for b, (nq, nk) in enumerate(rows(case)):
        if case.thd:
            cu = case.serving_tensors["cu_seqlens_q"]
            qb = to_torch(q, dev)[int(cu[b]):int(cu[b + 1])]
        else:
            qb = qd[b].transpose(0, 1)[:nq]
        if case.paged or case.thd:
            kb = torch_of(kc[b].transpose(1, 0, 2)[:nk], qb)
            vb = torch_of(vc[b].transpose(1, 0, 2)[:nk], qb)
        else:
            kb, vb = kd[b].transpose(0, 1)[:nk], vd[b].transpose(0, 1)[:nk]
        out.append((qb.contiguous(), kb.contiguous(), vb.contiguous()))
    return out


def torch_of(x, like):
    import torch
    return torch.from_numpy(np.ascontiguousarray(x)).to(like.device).to(like.dtype)


def with_sink(case, out, lse):
    """out [T, Hq, Dv] and FlashInfer's base-2 lse [T, Hq] -> the output with the sink logit
    z_h in the denominator: out * e^lse / (e^lse + e^z) = out * sigmoid(lse ln 2 - z)."""
    import torch
    z = torch.from_numpy(np.asarray(case.sinks, dtype=np.float32)).to(out.device).reshape(1, -1)
    w = torch.sigmoid(lse.float() * math.log(2.0) - z)
    return (out.float() * w[..., None]).to(out.dtype)


def paged_cache(case, q, k, v, dev, dt):
    """(k cache, v cache [P, page, Hkv, D] torch, page size, indptr, indices, last_page_len
    int32 torch) of a case: a paged case's own caches and table, else its keys (THD or
    dense rows) cut into DENSE_PAGE-token pages in order."""
    import torch
    lens = [nk for _, nk in rows(case)]
    if case.paged:
        ps = case.page_size
        kc, vc = to_torch(k, dev).contiguous(), to_torch(v, dev).contiguous()
        tab = np.asarray(case.serving_tensors["block_table"])
        pages = [tab[b, :-(-n // ps)] for b, n in enumerate(lens)]
    else:
        ps = DENSE_PAGE
        parts = nhd_rows(case, q, k, v, dev)
        kp, vp, pages, n0 = [], [], [], 0
        for (_, kb, vb), n in zip(parts, lens):
            m = -(-n // ps)
            pad = m * ps - n
            kp.append(torch.nn.functional.pad(kb, (0, 0, 0, 0, 0, pad)).reshape(m, ps, case.kv_heads, case.head_dim))
            vp.append(torch.nn.functional.pad(vb, (0, 0, 0, 0, 0, pad)).reshape(m, ps, case.kv_heads,
                                                                                 case.v_head_dim))
            pages.append(np.arange(n0, n0 + m))
            n0 += m
        kc = torch.cat(kp) if n0 else torch.zeros((1, ps, case.kv_heads, case.head_dim), dtype=dt, device=dev)
        vc = torch.cat(vp) if n0 else torch.zeros((1, ps, case.kv_heads, case.v_head_dim), dtype=dt, device=dev)
    indptr = np.concatenate([[0], np.cumsum([len(p) for p in pages])]).astype(np.int32)
    indices = np.concatenate([np.asarray(p, dtype=np.int32) for p in pages] + [np.zeros(0, np.int32)])
    last = np.asarray([(n - 1) % ps + 1 if n else 0 for n in lens], dtype=np.int32)
    t = [torch.from_numpy(x).to(dev) for x in (indptr, indices, last)]
    return kc, vc, ps, t[0], t[1], t[2]


def flashinfer_attention(case, q, k, v, dev, kind, workspace=None, guards=None, lse_out=False, fixed_split=None):
    """One case through the kind's FlashInfer API: (the output as THD [sum nq, Hq, Dv] (the
    rows' queries in order), the rows' query counts, the statistics THD [sum nq, Hq] f32 in
    base 2 with the sink's logit in them, or None unless lse_out). With a list guards, the
    batch wrappers write into out= inside guard bands (attnfuzz.guard), its guard appended
    there. fixed_split: the paged prefill's fixed_split_size (pages), FlashInfer's
    batch-invariance control, with its fa2 backend. An FP8 KV case (case.fp8_kv) hands K and V in the format
    with k_scale, v_scale = their descales (FlashInfer folds k_scale into sm_scale and
    multiplies the output by v_scale)."""
    import flashinfer
    import torch
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    kvt = kv_dtype(case)
    lens = rows(case)
    kw = dict(causal=bool(case.causal), sm_scale=float(case.scale), window_left=window_left(case),
              logits_soft_cap=float(case.softcap) if case.softcap > 0 else None)
    scales = {}
    if case.fp8:
        if not case.fp8_kv:
            raise NotImplementedError("flashinfer: FP8 here is the KV cache's (fp8_kv), Q in f16/bf16")
        scales = dict(k_scale=float(case.descale["k"]), v_scale=float(case.descale["v"]))
    split = {} if fixed_split is None else {"fixed_split_size": int(fixed_split)}
    want_lse = case.sinks is not None or bool(lse_out)
    if case.fp8:
        # K and V move as their bits (uint8: pads, slices and concatenations of any torch),
        # viewed as the format where FlashInfer takes them (as_kv)
        k, v = fp8_bits(k), fp8_bits(v)

    def as_kv(x):
        return x.view(kvt) if case.fp8 else x
    if workspace is None:
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    if kind == "single_prefill":
        outs, lses = [], []
        for (qb, kb, vb), (nq, nk) in zip(nhd_rows(case, q, k, v, dev), lens):
            if nq == 0:
                continue
            if nk == 0:   # no keys: FlashInfer refuses an empty cache; the row is empty
                outs.append(torch.zeros((nq, case.q_heads, case.v_head_dim), dtype=dt, device=dev))
                lses.append(torch.full((nq, case.q_heads), -math.inf, device=dev))
                continue
            r = flashinfer.single_prefill_with_kv_cache(qb, as_kv(kb), as_kv(vb), return_lse=want_lse, o_dtype=dt,
                                                        **scales, **kw)
            o, lse = r if want_lse else (r, None)
            outs.append(o)
            lses.append(lse)
        out = torch.cat(outs) if outs else torch.zeros((0, case.q_heads, case.v_head_dim), dtype=dt, device=dev)
        lse = torch.cat(lses) if (want_lse and lses) else None
    else:
        parts = nhd_rows(case, q, k, v, dev)
        qt = torch.cat([qb for qb, _, _ in parts]).contiguous()
        qo = torch.tensor(np.concatenate([[0], np.cumsum([nq for nq, _ in lens])]).astype(np.int32), device=dev)
        if kind == "batch_ragged":
            kt = torch.cat([kb for _, kb, _ in parts]).contiguous()
            vt = torch.cat([vb for _, _, vb in parts]).contiguous()
            kv = torch.tensor(np.concatenate([[0], np.cumsum([nk for _, nk in lens])]).astype(np.int32), device=dev)
            w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD")
            w.plan(qo, kv, case.q_heads, case.kv_heads, case.head_dim, head_dim_vo=case.v_head_dim,
                   q_data_type=dt, kv_data_type=kvt, o_data_type=dt, **split, **kw)
            r = w.run(qt, as_kv(kt), as_kv(vt), return_lse=want_lse, **scales, **guarded_out(qt, case, dt, guards))
        else:
            kc, vc, ps, indptr, indices, last = paged_cache(case, q, k, v, dev, torch.uint8 if case.fp8 else dt)
            if kind == "decode":
                w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
                kw.pop("causal")
                w.plan(indptr, indices, last, case.q_heads, case.kv_heads, case.head_dim, ps, q_data_type=dt,
                       kv_data_type=kvt, o_data_type=dt, **kw)
            else:
                # fixed_split_size is FA2's split control (0.7.4 passes it to the fa2 kernels
                # only; "auto" picks fa3 on Hopper): the batch-invariant plan runs fa2
                w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
                    workspace, "NHD", **({"backend": "fa2"} if fixed_split is not None else {}))
                w.plan(qo, indptr, indices, last, case.q_heads, case.kv_heads, case.head_dim, ps,
                       head_dim_vo=case.v_head_dim, q_data_type=dt, kv_data_type=kvt, o_data_type=dt, **split,
                       **kw)
            r = w.run(qt, (as_kv(kc), as_kv(vc)), return_lse=want_lse, **scales, **guarded_out(qt, case, dt, guards))
        out, lse = r if want_lse else (r, None)
    if case.sinks is not None:
        out = with_sink(case, out, lse)
        lse = lse_with_sink(case, lse)
    if out.is_cuda:
        torch.cuda.synchronize()
    return out, [nq for nq, _ in lens], (lse.float() if (lse_out and lse is not None) else None)


def fp8_bits(x):
    """An FP8 input (an ml_dtypes float8 array, or a torch float8 tensor) as its bits, uint8
    with the same shape and strides."""
    import torch
    if isinstance(x, torch.Tensor):
        return x.view(torch.uint8)
    return np.asarray(x).view(np.uint8)


def kv_dtype(case):
    """The torch dtype of the case's K and V as FlashInfer gets them: the FP8 format of an FP8
    KV case, else the case dtype."""
    import torch
    if case.fp8:
        return {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[case.fp8]
    return {"f16": torch.float16, "bf16": torch.bfloat16}[case.dtype]


def lse_with_sink(case, lse):
    """FlashInfer's base-2 statistics [T, Hq] with the sink logit z_h (natural units) in the
    sum: log2(2^lse + e^z) = logaddexp2(lse, z log2 e); a row with no key (-inf) stays -inf,
    the protocol's fully masked row."""
    import torch
    lse = lse.float()
    z = torch.from_numpy(np.asarray(case.sinks, dtype=np.float32)).to(lse.device).reshape(1, -1)
    return torch.where(lse == -math.inf, lse, torch.logaddexp2(lse, z * (1.0 / math.log(2.0))))


def guarded_out(qt, case, dt, guards):
    """{"out": a THD output inside guard bands} for a batch wrapper's run (its guard appended to
    guards), or {} without guards."""
    if guards is None:
        return {}
    guards.append(guard.torch_out((qt.shape[0], case.q_heads, case.v_head_dim), dt, qt.device))
    return {"out": guards[-1].inner}


def thd_to_bhsd(case, out, nqs):
    """THD rows [sum nq, Hq, Dv] -> [B, Hq, Sq, Dv] (rows past a row's queries: 0)."""
    full = np.zeros((case.batch, case.q_heads, case.q_len, case.v_head_dim), dtype=out.dtype)
    c = 0
    for b, n in enumerate(nqs):
        full[b, :, :n] = out[c:c + n].transpose(1, 0, 2)
        c += n
    return full


def lse_to_bhs(case, lse, nqs):
    """THD statistics [sum nq, Hq] -> [B, Hq, Sq] float32 (rows past a row's queries: -inf,
    a row that attends to nothing)."""
    full = np.full((case.batch, case.q_heads, case.q_len), -np.inf, dtype=np.float32)
    c = 0
    for b, n in enumerate(nqs):
        full[b, :, :n] = np.asarray(lse[c:c + n], dtype=np.float32).T
        c += n
    return full


# ---------------------------------------------------------------------------------------
# The worker side.
# ---------------------------------------------------------------------------------------

class Target(_base.Target):
    STACK = STACK
    SCORE_BUDGET = False
    REFUSALS = ("not supported", "Unsupported", "unsupported", "not implemented")

    def __init__(self, variant):
        import torch
        self.torch = torch
        super().__init__(variant)
        self.kind = KIND_OF.get(variant, variant)      # the FlashInfer API the variant calls
        self.fixed_split = FIXED_SPLIT_PAGES if variant == "batch_paged_fixed_split" else None
        torch.set_grad_enabled(False)
        self.device = "cuda"    # python/tests/test_gpu_targets.py runs the model code on "cpu"
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)

    def libs(self):
        return dict(super().libs(), **_common.torch_libs(self.torch, True))

    def declare(self):
        # lse: return_lse, base 2 (the kernels write max + log2 sum exp2: lse_base 2)
        caps = ["f16", "bf16", "gqa", "cross", "causal", "padding", "window", "softcap", "scale", "strided", "lse"]
        if self.variant in FP8_KV_KINDS:
            # FP8 KV caches (k_scale, v_scale); a case with Q in FP8 too is refused
            caps += ["e4m3", "e5m2", "fp8_kv"]
        limits = {"head_dim_multiple": HEAD_DIM, "max_head_dim": HEAD_DIM}
        if self.kind == "decode":
            limits["max_q_len"] = 1
        decl = {"caps": caps, "dtypes": ["f16", "bf16"], "limits": limits, "lse_base": 2,
                # FlashInfer's causal mask and window sit on each row's bottom-right corner;
                # P V runs over whole key tiles, a masked key's weight 0 times a non-finite V
                # included (0 * Inf = NaN); its sm90 kernels read bf16 subnormals as 0 (both
                # measured on the H200: docs/findings-campaigns.md)
                "conventions": {"causal": ["bottom_right", "bottom_right_valid"], "masked_values": "ieee",
                                "denormals": ["bf16"]},
                # a JIT build per dtype, head dim, mask, window and soft cap: 78 s for the
                # first prefill build with nvcc on a 16-core H200 host, so a first build gets
                # ten minutes (regress's default 60 s killed it each time, and the JIT cache
                # never filled)
                "compile_key": ["shapes", "dtype", "causal", "softcap"], "compile_timeout": 600}
        if self.variant == "batch_paged_fixed_split":
            # plan(fixed_split_size=...): "deterministic softmax score reduction in the
            # merge_states kernel, and therefore batch-size invariant outputs" (0.7.4's docstring)
            decl["batch_invariant"] = True
        return decl

    def refuse(self, case, mask, bool_mask):
        from attnfuzz.worker import Unsupported
        if case.head_dim != case.v_head_dim and self.variant in ("single_prefill", "decode"):
            raise Unsupported("flashinfer: %s takes one head dim for Q/K and V" % self.variant)
        left, right = case.window
        if right >= 0 and not case.causal:
            raise Unsupported("flashinfer: a window's right side only as the causal mask")
        if (case.causal or case.has_window) and case.diagonal == "bottom_right" and not (case.thd or case.paged) \
                and case.key_padding is not None and any(n != case.kv_len for n in case.valid_keys):
            raise Unsupported("flashinfer: the causal diagonal sits on each row's valid keys (bottom_right_valid)")
        if self.kind == "decode" and any(nq != 1 for nq, _ in rows(case) if nq):
            raise Unsupported("flashinfer decode: one query a row")
        if case.fp8 and not case.fp8_kv:
            raise Unsupported("flashinfer: FP8 only as the KV cache (fp8_kv); Q in f16/bf16")

    def structure(self, case, mask, bool_mask):
        """The JIT build a case needs: dtype, the KV cache's FP8 format, head dims, mask mode,
        window, soft cap, sink (the LSE output), and the kernel."""
        return (self.variant, case.dtype, case.fp8, case.head_dim, case.v_head_dim, bool(case.causal),
                window_left(case) >= 0, case.softcap > 0, case.sinks is not None)

    def build(self, case, q, k, v, mask, bool_mask):
        # the build's first call compiles it (nvcc): run the case once here, timed as compiling
        # (with the statistics: return_lse is a separate kernel instance in some backends)
        flashinfer_attention(case, q, k, v, self.device, self.kind, self.workspace, lse_out=True,
                             fixed_split=self.fixed_split)
        return True

    def execute(self, art, req):
        from attnfuzz.request import old_form
        from attnfuzz.worker import Result
        case, q, k, v, _, _ = old_form(req)
        guards = []
        out, nqs, lse = flashinfer_attention(case, q, k, v, self.device, self.kind, self.workspace, guards,
                                             lse_out=req.want_lse, fixed_split=self.fixed_split)
        out = to_numpy(out)
        if case.thd:
            return Result(out, layout="thd", guard_writes=guard.writes(*guards))
        return Result(thd_to_bhsd(case, out, nqs), layout="bhsd", guard_writes=guard.writes(*guards),
                      lse=None if lse is None else lse_to_bhs(case, lse.cpu().numpy(), nqs))

    def fatal(self, exc):
        return "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError"


def repro_snippet(variant):
    split = FIXED_SPLIT_PAGES if variant == "batch_paged_fixed_split" else None
    return _common.snippet(
        ["import torch", "import flashinfer"],
        _torch_layouts.FUNCTIONS + (rows, window_left, dense_bhsd, nhd_rows, torch_of, with_sink, paged_cache,
                                    guarded_out, flashinfer_attention, fp8_bits, kv_dtype, lse_with_sink,
                                    thd_to_bhsd),
        consts={"DENSE_PAGE": DENSE_PAGE, "WORKSPACE_BYTES": WORKSPACE_BYTES},
        namespaces={"serving": [serving.cu_seqlens, serving.gather]},
        tail=f'''

def attention(case, q, k, v, mask=None, bool_mask=None, keep=None):
    """flashinfer/{variant}: q, k, v as the worker kit hands them (THD or page caches for a
    serving case, its tables on case.serving_tensors). Returns the output as [B, Hq, Sq, Dv]."""
    out, nqs, _ = flashinfer_attention(case, q, k, v, "cuda", {KIND_OF.get(variant, variant)!r},
                                       fixed_split={split!r})
    return thd_to_bhsd(case, to_numpy(out), nqs)
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK, Target))
