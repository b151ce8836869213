"""The serving forms in Python (attnfuzz.serving, the serving part of attnfuzz.reference):

- reference.attention on random cases of every combination of forms against an independent
  computation: each segment alone through torch's float64 scaled_dot_product_attention, its
  masks, ALiBi's bias and the causal alignment written here from docs/design.md, a sink as
  one more key of score z and value 0;
- the physical tensors and the way back: gather(physical(...)) is the padded view (rows past
  a segment 0), and the reference on the gathered tensors is the reference;
- block tables, sinks and slopes against hand rules."""

import math
import unittest

import numpy as np

import _util  # noqa: F401

from attnfuzz import dtypes, reference, serving
from attnfuzz.case import Case

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the independent check needs torch
    torch = None


def random_case(r, forms=None):
    """A random serving case (a dict) of small shapes: forms (a subset of serving.FORMS, at
    least one), per-row lengths 0..view, page geometry, sinks, slopes, causal alignments,
    windows, GQA, softcap."""
    if forms is None:
        forms = [f for f in serving.FORMS if r.random() < 0.5] or [str(r.choice(serving.FORMS))]
    B = int(r.integers(1, 5))
    hkv = int(r.integers(1, 3))
    hq = hkv * int(r.integers(1, 3))
    sq, sk = int(r.integers(1, 9)), int(r.integers(1, 12))
    d = int(r.integers(1, 9))
    c = {"batch": B, "q_heads": hq, "kv_heads": hkv, "q_len": sq, "kv_len": sk, "head_dim": d,
         "v_head_dim": int(r.integers(1, 9)), "dtype": str(r.choice(["f32", "f16", "bf16"]))}
    if r.random() < 0.5:
        c["causal"] = True
    c["diagonal"] = str(r.choice(["top_left", "bottom_right", "bottom_right_valid", "explicit"]))
    if c["diagonal"] == "explicit":
        c["diagonal_offset"] = int(r.integers(-3, 5))
    if r.random() < 0.25:
        c["window"] = [int(r.integers(-1, 4)), int(r.integers(-1, 4))]
    if r.random() < 0.2:
        c["softcap"] = float(r.choice([1.0, 5.0]))
    if r.random() < 0.3:
        c["scale"] = float(r.choice([0.1, 0.5, 1.0]))
    sv = {"forms": sorted(forms)}
    if "packed" in forms:
        sv["q_lens"] = [int(r.integers(0, sq + 1)) for _ in range(B)]
        for n in ("q", "k", "v"):
            c[n] = {"layout": "bshd", "perm": int(r.integers(0, 6)), "pad": int(r.integers(0, 3))}
    if "packed" in forms or "paged" in forms:
        sv["kv_lens"] = [int(r.integers(0, sk + 1)) for _ in range(B)]
    if "paged" in forms:
        sv["page_size"] = int(r.choice([1, 2, 3, 4, 16]))
        sv["shared_pages"] = int(r.integers(0, 3))
        sv["page_seed"] = int(r.integers(0, 1 << 32))
    if "sinks" in forms:
        sv["sink_log10_magnitude"] = float(r.choice([0.0, 0.5, 1.0]))
        sv["sink_seed"] = int(r.integers(0, 1 << 32))
    if "alibi" in forms:
        sv["alibi_symmetric"] = bool(r.random() < 0.5)
        if r.random() < 0.5:
            sv["alibi_slopes"] = "random"
            sv["alibi_log10_magnitude"] = -0.5
            sv["alibi_seed"] = int(r.integers(0, 1 << 32))
    c["serving"] = sv
    return c


def inputs(c, r):
    """Canonical q, k, v (float64 values of the case dtype) and the Case with the physical
    tensors' tables on it, as a worker gets it."""
    cs = Case(c)
    dt = dtypes.DTYPES[cs.dtype]
    q = r.standard_normal((cs.batch, cs.q_heads, cs.q_len, cs.head_dim)).astype(dt).astype(np.float64)
    k = r.standard_normal((cs.batch, cs.kv_heads, cs.kv_len, cs.head_dim)).astype(dt).astype(np.float64)
    v = r.standard_normal((cs.batch, cs.kv_heads, cs.kv_len, cs.v_head_dim)).astype(dt).astype(np.float64)
    if cs.paged:
        k, v = serving.share(cs, k, v)
    phys = serving.physical(cs, q, k, v, dtype_of=dtypes.DTYPES.__getitem__)
    return cs, q, k, v, phys


def segment_by_torch(c, q, k, v, b, sinks, slopes):
    """Segment b of case dict c on its own, [Hq, nq, Dv] float64, written from
    docs/design.md section 2: the segment's own lengths and diagonal, torch's SDPA."""
    sv = c["serving"]
    forms = sv["forms"]
    nq = min(sv["q_lens"][b], c["q_len"]) if "packed" in forms else c["q_len"]
    nk = min(sv["kv_lens"][b], c["kv_len"]) if ("packed" in forms or "paged" in forms) else c["kv_len"]
    hq, hkv = c["q_heads"], c["kv_heads"]
    dv = c["v_head_dim"]
    if nq == 0:
        return np.zeros((hq, 0, dv))
    diag = c.get("diagonal", "top_left")
    off = {"top_left": 0, "bottom_right": nk - nq, "bottom_right_valid": nk - nq,
           "explicit": c.get("diagonal_offset", 0)}[diag]
    i = np.arange(nq).reshape(-1, 1)
    j = np.arange(nk).reshape(1, -1)
    dd = i + off
    ok = np.ones((nq, nk), dtype=bool)
    if c.get("causal"):
        ok &= j <= dd
    left, right = c.get("window", [-1, -1])
    if left >= 0:
        ok &= j >= dd - left
    if right >= 0:
        ok &= j <= dd + right
    qs = torch.tensor(q[b, :, :nq])
    ks = torch.tensor(k[b, :, :nk]).repeat_interleave(hq // hkv, dim=0)
    vs = torch.tensor(v[b, :, :nk]).repeat_interleave(hq // hkv, dim=0)
    scale = c.get("scale", 1.0 / math.sqrt(c["head_dim"]))
    cap = c.get("softcap", 0.0)
    mask = torch.where(torch.tensor(ok), 0.0, -math.inf).to(torch.float64).expand(hq, nq, nk).clone()
    if "alibi" in forms:
        dist = torch.tensor((dd - j).astype(np.float64))
        for h in range(hq):
            mask[h] -= float(slopes[h]) * (dist.abs() if sv.get("alibi_symmetric") else dist)
    if "sinks" in forms:  # one more key: a score of z (q . 0 + z) and a value row of 0
        ks = torch.cat([ks, torch.zeros((hq, 1, ks.shape[2]), dtype=torch.float64)], dim=1)
        vs = torch.cat([vs, torch.zeros((hq, 1, dv), dtype=torch.float64)], dim=1)
        z = torch.tensor([float(x) for x in sinks], dtype=torch.float64).reshape(hq, 1, 1).expand(hq, nq, 1)
        mask = torch.cat([mask, z], dim=2)
    live = torch.isfinite(mask).any(dim=2)  # [Hq, nq]
    if cap > 0:  # softcap comes before the mask: SDPA has no place for it, so its math by hand
        s = cap * torch.tanh((qs @ ks.transpose(1, 2)) * scale / cap) + mask
        o = torch.softmax(s, dim=2) @ vs
    else:
        o = F.scaled_dot_product_attention(qs[None], ks[None], vs[None], attn_mask=mask[None], scale=scale)[0]
    o[~live] = 0.0  # a row without a live key: 0
    return o.numpy()


@unittest.skipIf(torch is None, "torch is not installed")
class ReferenceVsTorch(unittest.TestCase):
    def test_random_cases_every_form(self):
        r = np.random.default_rng(20260505)
        checked = {}
        combos = [[f for k, f in enumerate(serving.FORMS) if m >> k & 1] for m in range(1, 16)]
        for t in range(600):
            c = random_case(r, combos[t % len(combos)])
            cs, q, k, v, phys = inputs(c, r)
            ref = reference.attention(cs, q, k, v)     # the case's own sinks and slopes
            for b in range(cs.batch):
                want = segment_by_torch(c, q, k, v, b, phys.get("sinks"), phys.get("alibi_slopes"))
                nq = want.shape[1]
                got = ref[b, :, :nq]
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12,
                                           err_msg="case %r segment %d" % (c, b))
                self.assertTrue((ref[b, :, nq:] == 0).all(), "rows past segment %d are not 0" % b)
            key = tuple(c["serving"]["forms"])
            checked[key] = checked.get(key, 0) + 1
        self.assertEqual(len(checked), 15)

    def test_sdpa_agrees_on_a_plain_segment(self):
        """The hand softmax above is SDPA's math: one check that torch's own kernel agrees."""
        r = np.random.default_rng(3)
        q, k, v = (torch.tensor(r.standard_normal((1, 2, 5, 4))) for _ in range(3))
        bias = torch.tensor(r.standard_normal((5, 5)))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.5)
        s = (q @ k.transpose(-1, -2)) * 0.5 + bias
        np.testing.assert_allclose(o.numpy(), (torch.softmax(s, -1) @ v).numpy(), rtol=1e-12, atol=1e-12)


class PhysicalAndBack(unittest.TestCase):
    def test_gather_of_physical_is_the_padded_view(self):
        r = np.random.default_rng(11)
        for t in range(300):
            c = random_case(r)
            cs, q, k, v, phys = inputs(c, r)
            if not (cs.thd or cs.paged):
                continue
            t_all = dict(phys)
            for n, x in (("q", q), ("k", k), ("v", v)):
                t_all.setdefault(n, x.astype(dtypes.DTYPES[cs.dtype]))
            qb, kb, vb = serving.gather(cs, t_all)
            for b in range(cs.batch):
                nq, nk = cs.seg_q(b), cs.seg_k(b)
                np.testing.assert_array_equal(qb[b, :, :nq], q[b, :, :nq])
                np.testing.assert_array_equal(kb[b, :, :nk], k[b, :, :nk])
                np.testing.assert_array_equal(vb[b, :, :nk], v[b, :, :nk])
                self.assertTrue((kb[b, :, nk:] == 0).all())
            np.testing.assert_array_equal(reference.attention(cs, qb, kb, vb), reference.attention(cs, q, k, v))

    def test_block_table(self):
        c = Case({"batch": 3, "kv_len": 11, "q": {"layout": "bhsd"},
                  "serving": {"forms": ["paged"], "kv_lens": [9, 11, 0], "page_size": 4, "shared_pages": 2,
                              "page_seed": 5}})
        tab, ids, null = serving.block_table(c)
        P, W = serving.page_count(c)
        self.assertEqual((P, W), (3 + 3 - 2 + 0 + 1, 3))
        self.assertEqual(sorted(ids.tolist()), list(range(P)))
        self.assertEqual(tab[1, 0], tab[0, 0])          # shared
        self.assertEqual(tab[1, 1], tab[0, 1])
        self.assertNotEqual(tab[1, 2], tab[0, 2])       # row 1's own third page
        self.assertTrue((tab[2] == null).all())         # no keys: the null page
        used = [int(x) for b in range(3) for x in tab[b, :serving.pages(c, b)]]
        self.assertEqual(len(set(used)), P - 1)          # every page but the null one, shared once

    def test_slopes_and_sinks(self):
        for H, exps in ((8, [-1, -2, -3, -4, -5, -6, -7, -8]), (6, [-2, -4, -6, -8, -1, -3]), (1, [-8])):
            c = Case({"q_heads": H, "serving": {"forms": ["alibi"]}})
            self.assertEqual(serving.slopes(c).tolist(), [2.0 ** e for e in exps])
        c = Case({"q_heads": 4, "dtype": "bf16", "serving": {"forms": ["sinks"], "sink_seed": 7,
                                                             "sink_log10_magnitude": 1}})
        z = serving.sinks(c, dtype_of=dtypes.DTYPES.__getitem__)
        self.assertEqual(z.dtype, np.float32)
        np.testing.assert_array_equal(z, z.astype(dtypes.DTYPES["bf16"]).astype(np.float32))
        self.assertTrue(np.abs(z).max() < 100)

    def test_request_needs_its_tables(self):
        from attnfuzz.request import Request
        c = Case({"serving": {"forms": ["sinks"]}})
        with self.assertRaises(ValueError):
            Request(c, None, None, None).sinks
        self.assertIsNone(Request(c, None, None, None).alibi_slopes)   # not a form of the case


if __name__ == "__main__":
    unittest.main()
