"""The GPU targets' host side on the CPU (no GPU, no flashinfer or cudnn package needed):

- flashinfer's model code (attnfuzz.targets.flashinfer) run through Target.run on the CPU
  against a stand-in `flashinfer` module that computes, in float64, what FlashInfer 0.7.4
  documents for the calls it gets (k_scale folded into sm_scale, the output times v_scale,
  the log-sum-exp in base 2, paged K/V through indptr, indices and last_page_len). The
  stand-in checks what the target hands it (K and V of an FP8 KV case as torch float8 in the
  case's format, the plan's data types, fixed_split_size only for the batch-invariant
  variant); the outputs and statistics are checked against attnfuzz.reference, which
  dequantizes the FP8 inputs itself (an independent computation of the same math).
- cudnn's sdpa_fp8 scalars (fp8_scales): powers of two, descale_s the exact inverse of
  scale_s, scale_o keeping the largest |V| inside the format; its graph built and run through
  a float64 stand-in of the frontend's sdpa_fp8 (Hopper's FP8 O included; the O type the
  declared fp8_out names, a refused one unsupported; the conventions fp8_probs, fp8_out)
  against the reference; cudnn/sdpa's statistics output declared and handed back.
- the declarations the hello carries (cap lse with lse_base 2, batch_invariant, the FP8 caps).
- torch's CUDA LSE variants' forward_lse (attnfuzz.targets._torch_model) with stand-ins of
  the three CUDA ops: what reaches them (K and V at Hq heads, a 16-aligned bias in Q's dtype)
  and the logsumexp cut to [B, Hq, Sq] from each op's shape, against attnfuzz.reference.
"""

import math
import sys
import types
import unittest

import _util  # noqa: F401 (puts python/ on sys.path)
import ml_dtypes
import numpy as np

from attnfuzz import dtypes, reference, rng, testing
from attnfuzz.case import Case
from attnfuzz.request import Request

try:
    import torch
except ImportError:  # pragma: no cover - the venv has torch; elsewhere the test skips
    torch = None


# ---------------------------------------------------------------------------------------
# A stand-in flashinfer: FlashInfer's documented semantics in float64 on the CPU.
# ---------------------------------------------------------------------------------------

def _attend(q, k, v, causal, sm_scale, window_left, logits_soft_cap, k_scale=None, v_scale=None):
    """q [nq, Hq, D], k [nk, Hkv, D], v [nk, Hkv, Dv] (any float dtype, FP8 included): (o
    float64 [nq, Hq, Dv], lse base 2 [nq, Hq]) with FlashInfer's bottom-right causal mask."""
    assert logits_soft_cap is None and window_left == -1, "the stand-in models no soft cap or window"
    qd, kd, vd = (x.to(torch.float64) for x in (q, k, v))
    nq, hq, _ = qd.shape
    nk, hk, _ = kd.shape
    g = hq // hk
    kd, vd = kd.repeat_interleave(g, dim=1), vd.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", qd, kd) * sm_scale * (1.0 if k_scale is None else k_scale)
    if causal:
        i = torch.arange(nq).reshape(-1, 1)
        j = torch.arange(nk).reshape(1, -1)
        s = s.masked_fill(j > i + (nk - nq), -math.inf)
    lse = torch.logsumexp(s, dim=-1)                       # [Hq, nq], natural log
    p = torch.exp(s - lse[..., None])
    p = torch.nan_to_num(p, nan=0.0)
    o = torch.einsum("hqk,khd->qhd", p, vd) * (1.0 if v_scale is None else v_scale)
    return o, (lse / math.log(2.0)).transpose(0, 1)


class FakeFlashInfer(types.ModuleType):
    def __init__(self, kv_dtype):
        super().__init__("flashinfer")
        self.kv_dtype = kv_dtype        # what K and V must arrive as
        self.plans = []
        fake = self

        def single_prefill_with_kv_cache(q, k, v, return_lse=False, o_dtype=None, k_scale=None, v_scale=None,
                                         causal=False, sm_scale=None, window_left=-1, logits_soft_cap=None):
            assert k.dtype == fake.kv_dtype and v.dtype == fake.kv_dtype, (k.dtype, v.dtype, fake.kv_dtype)
            o, lse = _attend(q, k, v, causal, sm_scale, window_left, logits_soft_cap, k_scale, v_scale)
            o = o.to(o_dtype or q.dtype)
            return (o, lse.float()) if return_lse else o

        class BatchPrefillWithPagedKVCacheWrapper:
            def __init__(self, workspace, layout, backend="auto"):
                assert layout == "NHD"
                self.backend = backend

            def plan(self, qo_indptr, indptr, indices, last_page_len, hq, hk, d, page_size, head_dim_vo=None,
                     q_data_type=None, kv_data_type=None, o_data_type=None, causal=False, sm_scale=None,
                     window_left=-1, logits_soft_cap=None, fixed_split_size=None):
                assert kv_data_type == fake.kv_dtype and o_data_type == q_data_type
                fake.plans.append({"fixed_split_size": fixed_split_size, "backend": self.backend})
                self.p = (qo_indptr.tolist(), indptr.tolist(), indices.tolist(), last_page_len.tolist(), page_size,
                          dict(causal=causal, sm_scale=sm_scale, window_left=window_left,
                               logits_soft_cap=logits_soft_cap), o_data_type)

            def run(self, q, kv, return_lse=False, k_scale=None, v_scale=None, out=None):
                kc, vc = kv
                assert kc.dtype == fake.kv_dtype and vc.dtype == fake.kv_dtype
                qo, ind, idx, last, ps, kw, odt = self.p
                os_, ls = [], []
                for b in range(len(qo) - 1):
                    pages = idx[ind[b]:ind[b + 1]]
                    n = (len(pages) - 1) * ps + last[b] if pages else 0
                    kb = kc[pages].reshape(-1, kc.shape[2], kc.shape[3])[:n]
                    vb = vc[pages].reshape(-1, vc.shape[2], vc.shape[3])[:n]
                    o, lse = _attend(q[qo[b]:qo[b + 1]], kb, vb, k_scale=k_scale, v_scale=v_scale, **kw)
                    os_.append(o)
                    ls.append(lse)
                o = torch.cat(os_).to(odt)
                if out is not None:
                    out.copy_(o)
                    o = out
                return (o, torch.cat(ls).float()) if return_lse else o

        self.single_prefill_with_kv_cache = single_prefill_with_kv_cache
        self.BatchPrefillWithPagedKVCacheWrapper = BatchPrefillWithPagedKVCacheWrapper


def _fi_target(variant):
    """A flashinfer Target on the CPU, made without its CUDA workspace."""
    from attnfuzz.targets import _base, flashinfer
    t = flashinfer.Target.__new__(flashinfer.Target)
    t.variant, t.decl, t.cache, t._hello = variant, flashinfer.STACK.variant(variant), _base.LRU(4), None
    t.torch = torch
    t.kind = flashinfer.KIND_OF.get(variant, variant)
    t.fixed_split = flashinfer.FIXED_SPLIT_PAGES if variant == "batch_paged_fixed_split" else None
    t.device, t.workspace = "cpu", None
    return t


def _case(fp8, causal, seed):
    """(case dict, canonical q, k, v float64 holding the case's values): B 2, Hq 4, Hkv 2,
    Sq 3, Sk 21 (two 16-token pages, the second one partly used), D 64, f16 out; with fp8
    ("e4m3"/"e5m2") K and V in the format with descales 0.5 and 2 (an FP8 KV cache)."""
    c = {"batch": 2, "q_heads": 4, "kv_heads": 2, "q_len": 3, "kv_len": 21, "head_dim": 64, "dtype": "f16",
         "q": {"layout": "bshd"}, "k": {"layout": "bhsd"}, "v": {"layout": "bhsd"}, "causal": bool(causal),
         "diagonal": "bottom_right"}   # FlashInfer's (its declared causal convention)
    if fp8:
        c["fp8"] = {"format": fp8, "kv_only": True, "descale": [1.0, 0.5, 2.0]}
    r = np.random.default_rng(seed)
    q = r.standard_normal((2, 4, 3, 64)).astype(np.float16).astype(np.float64)
    kvt = dtypes.DTYPES[fp8] if fp8 else np.float16
    k = (r.standard_normal((2, 2, 21, 64)) * 4).astype(kvt).astype(np.float64)
    v = (r.standard_normal((2, 2, 21, 64)) * 4).astype(kvt).astype(np.float64)
    return c, q, k, v


def _request(c, q, k, v):
    """The run request attnfuzz sends: q f16 in its layout; K, V in the case's format, in a
    strided bhsd view (S and H swapped in memory)."""
    arrays = testing.physical_inputs(c, q, k, v)
    fp8 = (c.get("fp8") or {}).get("format")
    for n, x in (("k", k), ("v", v)):
        t = x.astype(dtypes.DTYPES[fp8] if fp8 else np.float16)
        arrays[n] = np.ascontiguousarray(t.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    cs = Case(c, testing.derived(c))
    return cs, Request.from_arrays(cs, arrays, keep=rng.case_keep, want_lse=True)


@unittest.skipIf(torch is None, "no torch")
class FlashInferOnCPU(unittest.TestCase):
    def run_variant(self, variant, fp8, causal, seed):
        kvt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, None: torch.float16}[fp8]
        fake = FakeFlashInfer(kvt)
        saved = sys.modules.get("flashinfer")
        sys.modules["flashinfer"] = fake
        try:
            c, q, k, v = _case(fp8, causal, seed)
            cs, req = _request(c, q, k, v)
            res = _fi_target(variant).run(req)
        finally:
            if saved is None:
                sys.modules.pop("flashinfer", None)
            else:
                sys.modules["flashinfer"] = saved
        # the reference dequantizes the FP8 inputs itself (descale 0.5 for K, 2 for V)
        qs = q.astype(np.float64)
        ks = k.astype(dtypes.DTYPES[fp8]) if fp8 else k
        vs = v.astype(dtypes.DTYPES[fp8]) if fp8 else v
        ref = reference.attention(cs, qs, ks, vs)
        out = np.asarray(res.out, dtype=np.float64)
        self.assertEqual(res.layout, "bhsd")
        self.assertEqual(out.shape, ref.shape)
        # float64 math rounded once to f16 (and once more by v_scale for FP8 KV)
        tol = 2.0 ** -10 * np.abs(ref) + 2.0 ** -24
        self.assertTrue((np.abs(out - ref) <= 2 * tol).all(), np.abs(out - ref).max())
        lse = reference.lse(cs, qs, ks)
        got = np.asarray(res.lse, dtype=np.float64) * math.log(2.0)     # declared lse_base 2
        self.assertEqual(got.shape, lse.shape)
        self.assertTrue(np.allclose(got, lse, rtol=1e-6, atol=1e-5), np.abs(got - lse).max())
        return fake

    def test_single_prefill_fp8_kv(self):
        for fmt, causal, seed in (("e4m3", False, 1), ("e5m2", True, 2), ("e4m3", True, 3)):
            with self.subTest(fmt=fmt, causal=causal):
                self.run_variant("single_prefill", fmt, causal, seed)

    def test_batch_paged_fp8_kv(self):
        for fmt, causal, seed in (("e4m3", True, 4), ("e5m2", False, 5)):
            with self.subTest(fmt=fmt, causal=causal):
                fake = self.run_variant("batch_paged", fmt, causal, seed)
                self.assertTrue(fake.plans and all(p["fixed_split_size"] is None for p in fake.plans))
                self.assertTrue(all(p["backend"] == "auto" for p in fake.plans))

    def test_fixed_split_plans_fixed_split_size(self):
        from attnfuzz.targets import flashinfer
        fake = self.run_variant("batch_paged_fixed_split", None, True, 6)
        self.assertTrue(fake.plans)
        self.assertTrue(all(p["fixed_split_size"] == flashinfer.FIXED_SPLIT_PAGES for p in fake.plans))
        self.assertTrue(all(p["backend"] == "fa2" for p in fake.plans))   # the backend that takes it

    def test_full_fp8_case_refused(self):
        from attnfuzz.worker import Unsupported
        c, q, k, v = _case("e4m3", False, 7)
        c["fp8"] = {"format": "e4m3", "descale": [1.0, 0.5, 2.0]}
        arrays = testing.physical_inputs(c, q, k, v)
        for n, x in (("q", q), ("k", k), ("v", v)):
            arrays[n] = np.ascontiguousarray(np.asarray(arrays[n], np.float64).astype(dtypes.DTYPES["e4m3"]))
        cs = Case(c, testing.derived(c))
        with self.assertRaises(Unsupported):
            _fi_target("single_prefill").run(Request.from_arrays(cs, arrays, keep=rng.case_keep))

    def test_sink_enters_the_statistics(self):
        from attnfuzz.targets import flashinfer
        lse2 = torch.tensor([[1.0, -math.inf], [0.25, 3.0]], dtype=torch.float32)
        case = types.SimpleNamespace(sinks=np.array([0.5, -2.0], dtype=np.float32))
        got = flashinfer.lse_with_sink(case, lse2).double().numpy()
        z = np.array([0.5, -2.0])
        want = np.log2(2.0 ** lse2.double().numpy() + np.exp(z))   # log2(2^lse + e^z)
        want[0, 1] = -np.inf                                        # a row with no key stays -inf
        self.assertTrue(np.allclose(got, want, rtol=1e-6), (got, want))


@unittest.skipIf(torch is None, "no torch")
class Declarations(unittest.TestCase):
    def test_flashinfer_hello(self):
        from attnfuzz.targets import flashinfer
        for variant in flashinfer.STACK.variants:
            h = _fi_target(variant).hello()
            self.assertIn("lse", h["caps"])
            self.assertEqual(h["lse_base"], 2)
            self.assertEqual(h["batch_invariant"], variant == "batch_paged_fixed_split")
            fp8 = {"e4m3", "e5m2", "fp8_kv"} <= set(h["caps"])
            self.assertEqual(fp8, variant in flashinfer.FP8_KV_KINDS, variant)


class CudnnFp8Scales(unittest.TestCase):
    def test_scales(self):
        from attnfuzz.targets import cudnn
        for fmt, dv in (("e4m3", 2.0), ("e4m3", 2.0 ** -20), ("e5m2", 3.0), ("e5m2", 2.0 ** 30)):
            v = (np.random.default_rng(1).standard_normal((1, 2, 9, 16)) * 50).astype(dtypes.DTYPES[fmt])
            case = types.SimpleNamespace(fp8=fmt, descale={"q": 0.25, "k": 4.0, "v": dv})
            for o_fp8 in (False, True):
                s = cudnn.fp8_scales(case, v, o_fp8)
                self.assertEqual((s["descale_q"], s["descale_k"], s["descale_v"]), (0.25, 4.0, dv))
                self.assertEqual(s["descale_s"] * s["scale_s"], 1.0)            # exact inverses
                self.assertEqual(math.frexp(s["scale_s"])[0], 0.5)              # a power of two
                self.assertLessEqual(s["scale_s"], float(ml_dtypes.finfo(dtypes.DTYPES[fmt]).max))  # P = 1 fits
                if not o_fp8:
                    self.assertEqual(s["scale_o"], 1.0)
                    continue
                amax = float(np.abs(v.astype(np.float64)).max()) * dv
                self.assertEqual(math.frexp(s["scale_o"])[0], 0.5)
                po2 = cudnn.FP8_PO2[fmt]
                # |O| <= amax lands in (po2 / 4, po2 / 2]: inside the format, above its subnormals
                self.assertLessEqual(amax * s["scale_o"], po2 / 2)
                self.assertGreater(amax * s["scale_o"], po2 / 4)


# ---------------------------------------------------------------------------------------
# torch's CUDA LSE variants: SDPAModule.forward_lse with stand-ins of the three CUDA ops.
# ---------------------------------------------------------------------------------------

def _op_math(q, k, v, bias, is_causal, scale):
    """float64 attention and natural-log logsumexp of [B, H, S, D] inputs with Hq heads of K and
    V (what the CUDA ops require), a float bias and top-left is_causal."""
    qd, kd, vd = (x.to(torch.float64) for x in (q, k, v))
    s = qd @ kd.transpose(-1, -2) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if bias is not None:
        s = s + bias.to(torch.float64)
    if is_causal:
        i = torch.arange(q.shape[2]).reshape(-1, 1)
        j = torch.arange(k.shape[2]).reshape(1, -1)
        s = s.masked_fill(j > i, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    return (torch.softmax(s, dim=-1) @ vd).to(q.dtype), lse.float()


class TorchLseOps(unittest.TestCase):
    """forward_lse's CUDA branch (lse_op flash, efficient, cudnn) on the CPU, the ops replaced
    by stand-ins that check what the ops require (Hq heads of K and V, a bias whose rows are
    16-aligned in Q's dtype, no bias for flash) and return the logsumexp in each op's shape."""

    def setUp(self):
        if torch is None:
            self.skipTest("no torch")
        self.saved = {}
        self.seen = []
        test = self

        def flash(q, k, v, p, is_causal, debug, scale=None):
            test.assertEqual(k.shape[1], q.shape[1])
            test.seen.append(("flash", None))
            o, lse = _op_math(q, k, v, None, is_causal, scale)
            return (o, lse) + (None,) * 7

        def efficient(q, k, v, bias, compute_lse, p, is_causal, scale=None):
            test.assertTrue(compute_lse)
            test.assertEqual(k.shape[1], q.shape[1])
            if bias is not None:
                test.assertEqual(bias.dtype, q.dtype)
                test.assertEqual(bias.stride(-2) % 16, 0)
            test.seen.append(("efficient", bias is not None))
            o, lse = _op_math(q, k, v, bias, is_causal, scale)
            pad = -(-q.shape[2] // 32) * 32
            lse = torch.cat([lse, torch.full(lse.shape[:2] + (pad - q.shape[2],), 7.0)], dim=-1)  # junk rows
            return o, lse, None, None

        def cudnn_op(q, k, v, bias, compute_lse, p, is_causal, debug, scale=None):
            test.assertEqual(k.shape[1], q.shape[1])
            test.seen.append(("cudnn", bias is not None))
            o, lse = _op_math(q, k, v, bias, is_causal, scale)
            return (o, lse[..., None]) + (None,) * 7

        for name, fn in (("_scaled_dot_product_flash_attention", flash),
                         ("_scaled_dot_product_efficient_attention", efficient),
                         ("_scaled_dot_product_cudnn_attention", cudnn_op)):
            self.saved[name] = getattr(torch.ops.aten, name)
            setattr(torch.ops.aten, name, fn)

    def tearDown(self):
        for name, fn in self.saved.items():
            setattr(torch.ops.aten, name, fn)

    def check(self, base, c, seed):
        from attnfuzz.targets import _torch_model
        cs = Case(c, testing.derived(c))
        r = np.random.default_rng(seed)
        q = r.standard_normal((2, 4, 5, 16)).astype(np.float32).astype(np.float64)
        k = r.standard_normal((2, 2, 7, 16)).astype(np.float32).astype(np.float64)
        v = r.standard_normal((2, 2, 7, 16)).astype(np.float32).astype(np.float64)
        mask = None
        if cs.amask:
            mask = r.standard_normal((1, 1, 5, 7)).astype(np.float32)
            mask[0, 0, 1, 3] = -np.inf
        arrays = testing.physical_inputs(c, q, k, v, mask=mask)
        req = Request.from_arrays(cs, arrays, keep=rng.case_keep, want_lse=True)
        cfg = _torch_model._config(cs, base, True)
        self.assertEqual(cfg["lse_op"], base[5:-4])
        SDPAModule, _, _ = _torch_model.make_modules()
        args = _torch_model._arguments(req, cfg, "cpu")
        o, lse = SDPAModule(cfg).forward_lse(*args)
        out = testing.layouts.to_bhsd(o.numpy(), cfg["out_layout"], 4, 16)
        ref = reference.attention(cs, q, k, v, mask=mask)
        want = reference.lse(cs, q, k, mask=mask)
        self.assertEqual(tuple(lse.shape), (2, 4, 5))
        self.assertTrue(np.allclose(out, ref, rtol=1e-5, atol=1e-5), np.abs(out - ref).max())
        self.assertTrue(np.allclose(lse.numpy(), want, rtol=1e-5, atol=1e-5), np.abs(lse.numpy() - want).max())

    def test_ops(self):
        base = {"batch": 2, "q_heads": 4, "kv_heads": 2, "q_len": 5, "kv_len": 7, "head_dim": 16, "dtype": "f32",
                "q": {"layout": "bshd"}, "k": {"layout": "bhsd"}, "v": {"layout": "bshd"}}
        self.check("sdpa_flash_lse", dict(base, causal=True), 1)
        mask = {"rank": 4, "full_dims": "qk", "dtype": "f32", "expanded": False}
        self.check("sdpa_efficient_lse", dict(base, additive_mask=mask), 2)
        self.check("sdpa_cudnn_lse", dict(base, additive_mask=mask), 3)
        self.check("sdpa_efficient_lse", dict(base, causal=True), 4)
        self.assertEqual([n for n, _ in self.seen], ["flash", "efficient", "cudnn", "efficient"])
        self.assertEqual([b for _, b in self.seen], [None, True, True, False])


# ---------------------------------------------------------------------------------------
# cudnn/sdpa_fp8 through a stand-in of the frontend's graph API.
# ---------------------------------------------------------------------------------------

class _FakeTensor:
    def __init__(self, uid=None, dim=None, stride=None, data_type=None, name=None):
        self.uid, self.dim, self.stride, self.data_type, self.output = uid, dim, stride, data_type, False

    def set_uid(self, u):
        self.uid = u
        return self

    def set_output(self, b):
        self.output = b
        return self

    def set_dim(self, d):
        self.dim = list(d)
        return self

    def set_stride(self, s):
        self.stride = list(s)
        return self

    def set_data_type(self, t):
        self.data_type = t
        return self


class NotSupported(Exception):
    pass


NotSupported.__name__ = "cudnnGraphNotSupportedError"


def _fake_cudnn(refuse_half_o):
    """A stand-in `cudnn` module whose sdpa_fp8 graph computes, in float64, what the frontend
    documents (the descales applied to Q, K and V, O times scale_o, the statistics as
    natural-log LSE, amax_o the largest |O|) without rounding P, and checks that each tensor
    of the variant pack has the dims and strides its graph tensor declares. With
    refuse_half_o, check_support refuses an f16/bf16 O (as on Hopper)."""
    m = types.ModuleType("cudnn")
    m.data_type = types.SimpleNamespace(HALF="HALF", BFLOAT16="BFLOAT16", FLOAT="FLOAT", INT32="INT32",
                                        INT64="INT64", FP8_E4M3="FP8_E4M3", FP8_E5M2="FP8_E5M2")
    m.heur_mode = types.SimpleNamespace(A="A", FALLBACK="FALLBACK")
    m.cudnnGraphNotSupportedError = NotSupported

    class Graph:
        def __init__(self, io_data_type=None, intermediate_data_type=None, compute_data_type=None, handle=None):
            self.io = io_data_type

        def tensor(self, uid=None, dim=None, stride=None, data_type=None, name=None):
            return _FakeTensor(uid, list(dim), list(stride), data_type)

        def sdpa_fp8(self, q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, attn_scale=None,
                     generate_stats=None, name="", bias=None, use_padding_mask=False, seq_len_q=None,
                     seq_len_kv=None, use_causal_mask=False, use_causal_mask_bottom_right=False):
            self.args = dict(q=q, k=k, v=v, dq=descale_q, dk=descale_k, dv=descale_v, ds=descale_s, ss=scale_s,
                             so=scale_o, bias=bias, seq_kv=seq_len_kv if use_padding_mask else None,
                             causal="tl" if use_causal_mask else "br" if use_causal_mask_bottom_right else None,
                             scale=attn_scale)
            self.outs = [_FakeTensor() for _ in range(4)]
            return self.outs

        def validate(self):
            pass

        def build_operation_graph(self):
            pass

        def create_execution_plans(self, modes):
            pass

        def check_support(self):
            if refuse_half_o and self.outs[0].data_type in ("HALF", "BFLOAT16"):
                raise NotSupported("NOT_SUPPORTED: f16/bf16 O needs Blackwell")

        def build_plans(self):
            pass

        def get_workspace_size(self):
            return 0

        def execute(self, pack, ws, handle=None):
            a = self.args

            def get(t):
                x = pack[t.uid]
                assert list(x.shape) == t.dim and list(x.stride()) == t.stride, (t.uid, x.shape, x.stride(), t.dim,
                                                                                  t.stride)
                return x
            sc = {n: float(get(a[n]).item()) for n in ("dq", "dk", "dv", "ds", "ss", "so")}
            assert sc["ds"] * sc["ss"] == 1.0
            q = get(a["q"]).to(torch.float64) * sc["dq"]
            k = get(a["k"]).to(torch.float64) * sc["dk"]
            v = get(a["v"]).to(torch.float64) * sc["dv"]
            assert get(a["q"]).dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
            H = q.shape[1]
            k, v = (x.repeat_interleave(H // x.shape[1], dim=1) for x in (k, v))
            s = q @ k.transpose(-1, -2) * a["scale"]
            if a["bias"] is not None:
                s = s + get(a["bias"]).to(torch.float64)
            Sq, Sk = s.shape[-2:]
            i = torch.arange(Sq).reshape(-1, 1)
            j = torch.arange(Sk).reshape(1, -1)
            if a["causal"] == "tl":
                s = s.masked_fill(j > i, -math.inf)
            if a["causal"] == "br":
                s = s.masked_fill(j > i + (Sk - Sq), -math.inf)
            if a["seq_kv"] is not None:
                n = get(a["seq_kv"]).reshape(-1, 1, 1, 1)
                s = s.masked_fill(j.reshape(1, 1, 1, -1) >= n, -math.inf)
            o = torch.softmax(s, dim=-1) @ v
            out = get(self.outs[0])
            out.copy_((o * sc["so"]).to(out.dtype))
            get(self.outs[2]).fill_(1.0)
            get(self.outs[3]).fill_(float(o.abs().max()))
            if self.outs[1].output:
                get(self.outs[1]).copy_(torch.logsumexp(s, dim=-1, keepdim=True))

    m.pygraph = Graph
    return m


@unittest.skipIf(torch is None, "no torch")
class CudnnFp8OnCPU(unittest.TestCase):
    def run_case(self, c, refuse_half_o, seed):
        from attnfuzz.targets import _base, cudnn
        fake = _fake_cudnn(refuse_half_o)
        t = cudnn.Target.__new__(cudnn.Target)
        t.variant, t.decl, t.cache, t._hello = "sdpa_fp8", cudnn.STACK.variant("sdpa_fp8"), _base.LRU(4), None
        t.cudnn, t.torch, t.handle, t._amax, t._o_fp8 = fake, torch, None, [], refuse_half_o
        cs = Case(c, testing.derived(c))
        fmt = dtypes.DTYPES[cs.fp8]
        r = np.random.default_rng(seed)
        q, k, v = ((r.standard_normal(s) * 3).astype(fmt) for s in ((2, 4, 5, 16), (2, 2, 9, 16), (2, 2, 9, 16)))
        mask = None
        if cs.amask:
            mask = r.standard_normal((1, 1, 5, 9)).astype(np.float16).astype(np.float32)   # the spec's f16
        arrays = testing.physical_inputs(c, *(x.astype(np.float64) for x in (q, k, v)), mask=mask)
        for n, x in (("q", q), ("k", k), ("v", v)):
            arrays[n] = np.asarray(arrays[n]).astype(fmt)
        from attnfuzz.request import old_form
        cs, qp, kp, vp, m, _ = old_form(Request.from_arrays(cs, arrays, keep=rng.case_keep))  # as execute gets them
        phys = {"q": qp, "k": kp, "v": vp}
        tens = cudnn.fp8_inputs(cs, qp, kp, vp, m, "cpu")
        art = t._build_fp8(cs, tens, True)
        self.assertEqual(art["o_fp8"], refuse_half_o)
        out, stats, _, amax_o = cudnn.run_fp8_graph(None, cs, tens, art, phys["v"], "cpu")
        ref = reference.attention(cs, q, k, v, mask=mask)
        got = out.double().numpy()
        # one rounding of O: to f16/bf16, or to the format (3 or 2 mantissa bits) through scale_o
        rel = {"e4m3": 2.0 ** -4, "e5m2": 2.0 ** -3}[cs.fp8] if refuse_half_o else 2.0 ** -8
        tiny = np.abs(ref).max() * 2.0 ** -8 if refuse_half_o else 0.0   # the format's subnormal step
        self.assertTrue((np.abs(got - ref) <= rel * np.abs(ref) + tiny + 1e-6).all(), np.abs(got - ref).max())
        want = reference.lse(cs, q, k, mask=mask)
        self.assertTrue(np.allclose(stats.numpy(), want, rtol=1e-5, atol=1e-5))
        self.assertTrue(abs(amax_o - np.abs(ref).max()) <= 1e-6 * max(1.0, np.abs(ref).max()))

    def test_declared_roundings(self):
        """The hello's conventions say what sdpa_fp8 rounds: P through FP8_S_SCALE in either
        format, O in the format where it is built so (Hopper), and the worker kit accepts them;
        the probe no longer asks for an environment variable on compute capability 9.0."""
        from attnfuzz import worker
        from attnfuzz.targets import _base, cudnn
        for hopper in (False, True):
            t = cudnn.Target.__new__(cudnn.Target)
            t.variant, t.decl, t._o_fp8 = "sdpa_fp8", cudnn.STACK.variant("sdpa_fp8"), hopper
            conv = t._declare_fp8()["conventions"]
            self.assertEqual(conv, {"fp8_probs": {"e4m3": 4.0, "e5m2": 1024.0},
                                    "fp8_out": "v_amax" if hopper else "dtype", "masked_values": "ieee"})
            worker.check_conventions(dict(_base.DEFAULT_CONVENTIONS, **conv))
        for bad in ({"fp8_probs": {"e4m3": 48.0}}, {"fp8_probs": 64}, {"fp8_out": "e4m3"}):
            with self.assertRaises(ValueError):
                worker.check_conventions(bad)
        cuda = torch.cuda
        saved = (cuda.is_available, cuda.get_device_capability)
        try:
            cuda.is_available = lambda: True
            for cap, why in (((9, 0), None), ((10, 0), None), ((8, 9), "compute capability 9.0")):
                cuda.get_device_capability = lambda *a, cap=cap: cap
                got = cudnn._probe("sdpa_fp8")
                self.assertTrue(got is None if why is None else why in got, (cap, got))
                if cap[0] >= 9:
                    self.assertEqual(cudnn.fp8_o_here(torch), cap[0] == 9)
        finally:
            cuda.is_available, cuda.get_device_capability = saved

    def test_o_type_follows_declaration(self):
        """A graph whose declared O type cuDNN refuses is refused (unsupported), not rebuilt
        with the other type: an f16 O on a stand-in that refuses it, as Hopper does."""
        from attnfuzz.targets import _base, cudnn
        c = {"batch": 1, "q_heads": 2, "kv_heads": 2, "q_len": 3, "kv_len": 5, "head_dim": 16, "dtype": "f16",
             "fp8": {"format": "e4m3", "descale": [1.0, 1.0, 1.0]}}
        cs = Case(c, testing.derived(c))
        t = cudnn.Target.__new__(cudnn.Target)
        t.variant, t.decl, t.cache, t._hello = "sdpa_fp8", cudnn.STACK.variant("sdpa_fp8"), _base.LRU(4), None
        t.cudnn, t.torch, t.handle, t._amax, t._o_fp8 = _fake_cudnn(True), torch, None, [], False
        from attnfuzz.request import old_form
        fmt = dtypes.DTYPES["e4m3"]
        arrays = testing.physical_inputs(c, *(np.ones(s) for s in ((1, 2, 3, 16), (1, 2, 5, 16), (1, 2, 5, 16))))
        for n in "qkv":
            arrays[n] = np.asarray(arrays[n]).astype(fmt)
        cs, qp, kp, vp, m, _ = old_form(Request.from_arrays(cs, arrays, keep=rng.case_keep))
        tens = cudnn.fp8_inputs(cs, qp, kp, vp, m, "cpu")
        with self.assertRaises(NotSupported):
            t._build_fp8(cs, tens, False)

    def test_sdpa_fp8(self):
        base = {"batch": 2, "q_heads": 4, "kv_heads": 2, "q_len": 5, "kv_len": 9, "head_dim": 16, "dtype": "f16",
                "q": {"layout": "bshd"}, "k": {"layout": "bhsd"}, "v": {"layout": "sbhd"}}
        mask = {"rank": 4, "full_dims": "qk", "dtype": "f16", "expanded": False}
        for i, (fmt, more, hopper) in enumerate((
                ("e4m3", {"causal": True}, False),
                ("e5m2", {"causal": True, "diagonal": "bottom_right", "dtype": "bf16"}, True),
                ("e4m3", {"additive_mask": mask, "key_padding": [6, 9]}, True),
                ("e5m2", {"key_padding": [9, 4]}, False))):
            c = dict(base, fp8={"format": fmt, "descale": [0.5, 2.0 ** -3, 3.0]}, **more)
            with self.subTest(fmt=fmt, more=sorted(more), hopper=hopper):
                self.run_case(c, hopper, 10 + i)


@unittest.skipIf(torch is None, "no torch")
class CudnnSdpaStatsOnCPU(unittest.TestCase):
    """cudnn/sdpa's forward graph with generate_stats, through a stand-in graph: the stats
    output declared f32 [B, H, Sq, 1] compact and marked an output, generate_stats passed, and
    run_graph handing back exactly what the graph wrote there as [B, Hq, Sq]."""

    def test_stats(self):
        from attnfuzz.request import old_form
        from attnfuzz.targets import cudnn
        fake = _fake_cudnn(False)
        seen = {}

        class Graph(fake.pygraph):
            def sdpa(self, name="", q=None, k=None, v=None, attn_scale=None, generate_stats=False, **kw):
                seen["generate_stats"] = generate_stats
                self.outs = [_FakeTensor(), _FakeTensor()]
                return self.outs

            def execute(self, pack, ws, handle=None):
                o, st = self.outs
                assert list(pack[st.uid].shape) == st.dim and list(pack[st.uid].stride()) == st.stride
                pack[st.uid].copy_(torch.arange(40, dtype=torch.float32).reshape(st.dim))
                pack[o.uid].zero_()
        fake.pygraph = Graph
        c = {"batch": 2, "q_heads": 4, "kv_heads": 2, "q_len": 5, "kv_len": 9, "head_dim": 16, "dtype": "f16",
             "q": {"layout": "bshd"}, "k": {"layout": "bhsd"}, "v": {"layout": "bshd"}, "causal": True}
        cs = Case(c, testing.derived(c))
        r = np.random.default_rng(3)
        q, k, v = (r.standard_normal(s) for s in ((2, 4, 5, 16), (2, 2, 9, 16), (2, 2, 9, 16)))
        req = Request.from_arrays(cs, testing.physical_inputs(c, q, k, v), keep=rng.case_keep, want_lse=True)
        view, qp, kp, vp, m, _ = old_form(req)
        t = cudnn.cudnn_inputs(view, qp, kp, vp, m, "cpu")
        for stats in (False, True):
            art = cudnn.build_graph(fake, None, view, t, cudnn.band(view), stats=stats)
            self.assertEqual(seen["generate_stats"], stats)
            if not stats:
                self.assertNotIn("stats", art["g"])
                continue
            st = art["g"]["stats"]
            self.assertEqual((st.dim, st.stride, st.data_type, st.output), ([2, 4, 5, 1], [20, 5, 1, 1], "FLOAT", True))
            orig = torch.cuda.synchronize
            torch.cuda.synchronize = lambda: None      # run_graph waits for the device
            try:
                _, _, _, _, got = cudnn.run_graph(None, view, t, art, "cpu")
            finally:
                torch.cuda.synchronize = orig
            self.assertEqual(tuple(got.shape), (2, 4, 5))
            self.assertTrue(torch.equal(got, torch.arange(40, dtype=torch.float32).reshape(2, 4, 5)))


if __name__ == "__main__":
    unittest.main()
