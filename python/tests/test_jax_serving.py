"""The jax serving targets' conversion code (attnfuzz.targets._jax_serving) against
attnfuzz.serving's tensors, and their model code on a CPU:

- the index construction (numpy only): the padded batch gathered from THD rows is the
  padded view (rows past a segment 0), the THD rows gathered back are the segments, the
  segment ids name each token's segment, the key ranges are the structural masks' live
  keys row by row, the page caches read through the (widened) block table are the padded
  K and V, and the kernels' geometry meets their asserts;
- xla_seqlens on random packed and dense cases against the float64 reference (rows that
  are not fully masked: masked_rows "mean" is the oracle's to judge);
- the pallas variants in pallas's interpret mode (the kernels as jax programs on the CPU)
  on a few cases of each form they run.

The jax parts skip where jax (or a pallas module) does not import."""

import importlib
import unittest

import numpy as np

import _util  # noqa: F401
from test_serving import inputs, random_case

from attnfuzz import dtypes, layouts, masks, reference, serving, testing
from attnfuzz.case import Case
from attnfuzz.request import Request
from attnfuzz.targets import _jax_serving as js
from attnfuzz.targets import jax as jx

try:
    import jax  # noqa: F401
except ImportError:
    jax = None


def packed_case(r, forms=("packed",), **kw):
    c = random_case(r, list(forms))
    c.update(kw)
    return c


def padded_with_zero_row(x, idx):
    """numpy twin of thd_to_padded."""
    x = np.concatenate([x, np.zeros((1,) + x.shape[1:], x.dtype)])
    return x[idx]


class Indices(unittest.TestCase):
    def test_pad_index_and_thd_rows(self):
        r = np.random.default_rng(1)
        for _ in range(200):
            c = packed_case(r)
            cs, q, k, v, phys = inputs(c, r)
            lens = js.segment_lengths(cs)
            qi = js.pad_index([a for a, _ in lens], cs.q_len)
            ki = js.pad_index([b for _, b in lens], cs.kv_len)
            self.assertEqual(qi.dtype, np.int32)
            qb = padded_with_zero_row(np.asarray(phys["q"], dtype=np.float64), qi)   # [B, Sq, H, D]
            kb = padded_with_zero_row(np.asarray(phys["k"], dtype=np.float64), ki)
            vb = padded_with_zero_row(np.asarray(phys["v"], dtype=np.float64), ki)
            want = serving.gather(cs, dict(phys))                                     # [B, H, S, D]
            for got, w in zip((qb, kb, vb), want):
                np.testing.assert_array_equal(got.transpose(0, 2, 1, 3), w)
            # and back: the THD rows of the padded batch are the THD tensor
            b, s = js.thd_rows([a for a, _ in lens])
            np.testing.assert_array_equal(qb[b, s], np.asarray(phys["q"], dtype=np.float64))
            self.assertEqual(len(b), int(serving.cu_seqlens([a for a, _ in lens])[-1]))

    def test_segment_ids(self):
        lens = [3, 0, 2, 4]
        ids = js.segment_ids(lens, 16)
        self.assertEqual(ids.tolist(), [0, 0, 0, 2, 2, 3, 3, 3, 3] + [-1] * 7)
        cu = serving.cu_seqlens(lens)
        for b in range(len(lens)):
            self.assertTrue((ids[cu[b]:cu[b + 1]] == b).all())
        for T in (0, 1, 15, 16, 17, 100, 129):
            L = js.segments_length(T)
            self.assertTrue(L >= max(T, 16) and js.is_pow2(L) and L % min(128, L) == 0, T)

    def test_key_bounds_are_the_structural_masks(self):
        r = np.random.default_rng(2)
        for t in range(300):
            if t % 3 == 0:
                c = packed_case(r)
            else:    # dense, with key padding and every diagonal
                c = {k: v for k, v in packed_case(r).items() if k not in ("serving", "q", "k", "v")}
                if r.random() < 0.5:
                    c["key_padding"] = [int(r.integers(0, c["kv_len"] + 1)) for _ in range(c["batch"])]
                elif c.get("diagonal") == "bottom_right_valid":
                    c["diagonal"] = "bottom_right"
            cs = Case(c)
            b, i = js.query_rows(cs)
            start, end = js.key_bounds(cs, b, i)
            ok = masks.allowed(cs)[:, 0]                                  # [B, Sq, Sk]
            for n in range(len(b)):
                row = ok[b[n], i[n]]
                want = np.zeros(cs.kv_len, dtype=bool)
                want[start[n]:max(end[n], start[n])] = True
                np.testing.assert_array_equal(row, want, err_msg="case %r row %d %d" % (c, b[n], i[n]))
                if not row.any():   # paged_attention reads only the end: keys [0, end)
                    self.assertEqual((start[n], end[n]), (0, 0), "case %r row %d %d" % (c, b[n], i[n]))
            if cs.thd:   # THD order: the segments' queries
                self.assertEqual(len(b), sum(cs.seg_q(x) for x in range(cs.batch)))

    def test_key_bounds_of_a_window_past_every_key(self):
        """A window that starts past the last key (a stock GPU bundle: window (2, -1) at an
        explicit offset of 32, one key) leaves no key, also to a kernel that reads only the
        end: (0, 0), not (1, 1)."""
        cs = Case({"batch": 1, "q_heads": 1, "kv_heads": 1, "q_len": 1, "kv_len": 1, "head_dim": 64,
                   "dtype": "f32", "diagonal": "explicit", "diagonal_offset": 32, "window": [2, -1]})
        start, end = js.key_bounds(cs, *js.query_rows(cs))
        self.assertEqual((start.tolist(), end.tolist()), ([0], [0]))

    def test_decode_geometry(self):
        for S in list(range(1, 600)) + [1000, 4096, 4603, 8191]:
            S_pad, splits, block_k = js.decode_geometry(S)
            split = S_pad // splits
            self.assertTrue(S_pad >= S and S_pad % splits == 0 and split >= 16 and block_k >= 16, S)
            self.assertTrue(splits <= 16 and js.is_pow2(split) and split % min(block_k, split) == 0, S)
            self.assertTrue(S_pad < 2 * S + 32, S)

    def test_paged_geometry(self):
        for ps in (1, 2, 4, 8, 16, 32, 64, 1024):
            for W in range(1, 70):
                W_pad, splits, per_block = js.paged_geometry(W, ps)
                part = W_pad // splits
                self.assertTrue(W_pad >= W and W_pad % splits == 0 and part % min(part, per_block) == 0, (W, ps))
                self.assertTrue(per_block * ps >= 16 and js.is_pow2(per_block) and splits <= 16, (W, ps))

    def test_pages_through_the_widened_table(self):
        """The cache with a zero page appended, read through padded_table_with, is the padded
        K and V; a dense case's keys cut into DENSE_PAGE-token pages in order too."""
        r = np.random.default_rng(4)
        for t in range(150):
            c = packed_case(r, ("paged",) if t % 2 else ("packed", "paged"))
            cs, q, k, v, phys = inputs(c, r)
            tab = np.asarray(phys["block_table"])
            P, ps = phys["k"].shape[0], cs.page_size
            W_pad, _, _ = js.paged_geometry(tab.shape[1], ps)
            wide = js.padded_table_with(tab, W_pad, P)
            for name, x in (("k", k), ("v", v)):
                cache = np.concatenate([np.asarray(phys[name], dtype=np.float64),
                                        np.zeros((1,) + phys[name].shape[1:])])
                flat = cache[wide].reshape(cs.batch, W_pad * ps, *cache.shape[2:])  # [B, S, H, D]
                for b in range(cs.batch):
                    n = cs.seg_k(b)
                    np.testing.assert_array_equal(flat[b, :n].transpose(1, 0, 2), x[b, :, :n])
                self.assertTrue((cache[wide[:, tab.shape[1]:]] == 0).all())
        # a dense case: pages in order
        B, Sk, H, D = 2, 37, 3, 4
        kb = r.standard_normal((B, Sk, H, D))
        W = -(-Sk // js.DENSE_PAGE)
        pages = np.pad(kb, ((0, 0), (0, W * js.DENSE_PAGE - Sk), (0, 0), (0, 0))).reshape(-1, js.DENSE_PAGE, H, D)
        pages = np.concatenate([pages, np.zeros((1, js.DENSE_PAGE, H, D))])
        W_pad, _, _ = js.paged_geometry(W, js.DENSE_PAGE)
        wide = js.padded_table_with(np.arange(B * W).reshape(B, W), W_pad, B * W)
        np.testing.assert_array_equal(pages[wide].reshape(B, -1, H, D)[:, :Sk], kb)


def run_target(variant, c, r, interpret=False):
    """(output [B, Hq, Sq, Dv] as attnfuzz reads it, reference, dead rows, Case)."""
    cs0 = Case(c)
    dt = dtypes.DTYPES[cs0.dtype]
    shp = lambda H, S, D: (cs0.batch, H, S, D)  # noqa: E731
    q = r.standard_normal(shp(cs0.q_heads, cs0.q_len, cs0.head_dim)).astype(dt).astype(np.float64)
    k = r.standard_normal(shp(cs0.kv_heads, cs0.kv_len, cs0.head_dim)).astype(dt).astype(np.float64)
    v = r.standard_normal(shp(cs0.kv_heads, cs0.kv_len, cs0.v_head_dim)).astype(dt).astype(np.float64)
    if cs0.paged:
        k, v = serving.share(cs0, k, v)
    arrays = testing.physical_inputs(c, q, k, v)
    cs = Case(c, testing.derived(c))
    t = js.ServingTarget(variant, interpret=interpret)
    res = t.run(Request.from_arrays(cs, arrays))
    out = np.asarray(res.out, dtype=np.float64)
    if cs.forms:
        out = serving.padded_out(cs, out, res.layout)
    else:
        out = np.asarray(layouts.to_bhsd(out, res.layout, cs.q_heads, cs.v_head_dim))
    ref = reference.attention(cs, q, k, v)
    ok = masks.live(cs)
    full = (cs.batch, cs.q_heads, cs.q_len, cs.kv_len)
    dead = ~np.broadcast_to(ok if ok is not None else np.ones(full, bool), full).any(-1)
    return out, ref, dead, cs


def close(test, out, ref, dead, dtype, what):
    tol = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}[dtype]
    live = ~dead
    np.testing.assert_allclose(out[live], ref[live], rtol=tol, atol=tol * 4, err_msg=what)


@unittest.skipIf(jax is None, "jax is not installed")
class XlaSeqlens(unittest.TestCase):
    def test_random_packed_and_dense(self):
        r = np.random.default_rng(7)
        seen = {"packed": 0, "dense": 0, "masked": 0}
        for t in range(40):
            c = packed_case(r)
            c["dtype"] = str(r.choice(["f32", "bf16"]))
            c["v_head_dim"] = c["head_dim"]          # dot_product_attention: D == Dv
            c["kv_len"] = max(c["kv_len"], 2)        # not bf16's one-element heads (a known jax bug)
            c.pop("softcap", None)
            if t % 4 == 3:
                c = {k: x for k, x in c.items() if k not in ("serving", "q", "k", "v")}
            if t % 5 == 0:
                c["bool_mask"] = {"rank": 2, "full_dims": "qk"}
            out, ref, dead, cs = run_target("xla_seqlens", c, r)
            close(self, out, ref, dead, cs.dtype, repr(c))
            if cs.thd:   # rows past a segment: 0 (no row), whatever jax gave there
                for b in range(cs.batch):
                    self.assertTrue((out[b, :, cs.seg_q(b):] == 0).all())
            seen["packed" if cs.thd else "dense"] += 1
            seen["masked"] += int(dead.any())
        self.assertTrue(all(seen.values()), seen)

    def test_fully_masked_rows_are_the_padded_batch_mean(self):
        """The convention the variant declares (masked_rows "mean", the oracle's serving
        form): the mean over the view's Sk keys with 0 past a segment; a keyless row 0."""
        r = np.random.default_rng(8)
        c = {"batch": 3, "q_heads": 2, "kv_heads": 2, "q_len": 4, "kv_len": 6, "head_dim": 8, "dtype": "f32",
             "causal": True, "diagonal": "explicit", "diagonal_offset": -1,
             "q": {"layout": "bshd"}, "k": {"layout": "bshd"}, "v": {"layout": "bshd"},
             "serving": {"forms": ["packed"], "q_lens": [3, 2, 4], "kv_lens": [5, 0, 6]}}
        cs = Case(c, testing.derived(c))
        q = r.standard_normal((3, 2, 4, 8)).astype(np.float32).astype(np.float64)
        k = r.standard_normal((3, 2, 6, 8)).astype(np.float32).astype(np.float64)
        v = r.standard_normal((3, 2, 6, 8)).astype(np.float32).astype(np.float64)
        arrays = testing.physical_inputs(c, q, k, v)
        res = js.ServingTarget("xla_seqlens").run(Request.from_arrays(cs, arrays))
        out = serving.padded_out(cs, res.out, res.layout)
        np.testing.assert_allclose(out[0, :, 0], v[0, :, :5].sum(axis=1) / 6, rtol=1e-5, atol=1e-6)
        self.assertTrue((out[1] == 0).all())


@unittest.skipIf(jax is None, "jax is not installed")
class PackedSequence(unittest.TestCase):
    def test_q_k_v_of_other_capacities_meet_at_one_length(self):
        """mha takes one sequence length for Q, K and V. A packed case's Q comes padded to
        its query capacity (B x Sq) and K, V to the key capacity (B x Sk): a stock GPU
        bundle (one segment of 2 tokens, Sq 2, Sk 3) gave K 17 rows to Q's 16, which Triton
        refused. Each is cut or padded to T_pad, its real tokens kept first."""
        r = np.random.default_rng(4)
        for tq, tk, t_pad in ((2, 3, 16), (3, 2, 16), (16, 24, 16), (5, 5, 32)):
            q, k = (r.standard_normal((t, 1, 8)).astype(np.float32) for t in (tq, tk))
            pq, pk = np.asarray(js.packed_sequence(q, t_pad)), np.asarray(js.packed_sequence(k, t_pad))
            self.assertEqual((pq.shape, pk.shape), ((1, t_pad, 1, 8), (1, t_pad, 1, 8)))
            n = min(tk, t_pad)
            np.testing.assert_array_equal(pk[0, :n], k[:n])
            self.assertFalse(pk[0, n:].any())


@unittest.skipIf(jax is None, "jax is not installed")
class Structure(unittest.TestCase):
    def test_lengths_do_not_recompile(self):
        """Two packed draws of one shape with other lengths share the jitted function (the
        THD tensors padded to the capacities); another native diagonal does not."""
        t = js.ServingTarget("xla_seqlens")
        r = np.random.default_rng(9)
        base = {"batch": 3, "q_heads": 2, "kv_heads": 1, "q_len": 5, "kv_len": 7, "head_dim": 8, "dtype": "f32",
                "causal": True, "q": {"layout": "bshd"}, "k": {"layout": "bshd"}, "v": {"layout": "bshd"}}
        runs = []
        for lens in (([5, 0, 2], [7, 3, 2]), ([1, 4, 5], [6, 7, 0]), ([5, 5, 5], [5, 5, 5])):
            c = dict(base, serving={"forms": ["packed"], "q_lens": lens[0], "kv_lens": lens[1]})
            cs, q, k, v, phys = inputs(c, r)
            cs = Case(c, testing.derived(c))
            res = t.run(Request.from_arrays(cs, phys))
            runs.append(res)
            ref = reference.attention(cs, q, k, v)
            out = serving.padded_out(cs, res.out, res.layout)
            np.testing.assert_allclose(out[:, :, :1], ref[:, :, :1], rtol=2e-5, atol=1e-5)
        self.assertEqual(len(t.cache), 1)
        self.assertTrue(runs[0].compile_s > 0 and runs[1].compile_s == 0 and runs[2].compile_s == 0)
        c = dict(base, diagonal="bottom_right", serving={"forms": ["packed"], "q_lens": [2, 1, 5], "kv_lens": [7, 3, 5]})
        cs, q, k, v, phys = inputs(c, r)
        cs = Case(c, testing.derived(c))
        t.run(Request.from_arrays(cs, phys))
        self.assertEqual(len(t.cache), 2)   # bottom-right offsets != 0: the structural mask as an input


def pallas_available(kind):
    try:
        importlib.import_module(jx.PALLAS_MODULES[kind])
        return True
    except Exception:  # noqa: BLE001
        return False


@unittest.skipIf(jax is None, "jax is not installed")
class PallasInterpret(unittest.TestCase):
    """The GPU variants' conversion code and kernels in pallas's interpret mode."""

    def check(self, variant, c, seed):
        if not pallas_available(js.KINDS[variant]):
            self.skipTest("%s does not import" % jx.PALLAS_MODULES[js.KINDS[variant]])
        out, ref, dead, cs = run_target(variant, c, np.random.default_rng(seed), interpret=True)
        # the kernels multiply masked keys' values (masked_values "ieee"): a row whose pages or
        # table reach the cache's poison (serving.poison_reach) may be NaN
        out = np.array(out, dtype=np.float64)
        for b in range(cs.batch):
            if serving.poison_reach(cs, b):
                out[b][np.isnan(out[b])] = np.asarray(ref, dtype=np.float64)[b][np.isnan(out[b])]
        close(self, out, ref, dead, cs.dtype, "%s %r" % (variant, c))
        self.assertTrue((out[dead] == 0).all() or variant == "pallas_mha")

    def test_mha_segments(self):
        self.check("pallas_mha", {"batch": 3, "q_heads": 4, "kv_heads": 2, "q_len": 9, "kv_len": 9, "head_dim": 16,
                                  "dtype": "f32", "causal": True, "q": {"layout": "bshd", "perm": 2},
                                  "k": {"layout": "bshd"}, "v": {"layout": "bshd", "pad": 1},
                                  "serving": {"forms": ["packed"], "q_lens": [9, 0, 5], "kv_lens": [9, 0, 5]}}, 1)

    def test_decode_packed_with_sinks(self):
        self.check("pallas_decode", {"batch": 3, "q_heads": 4, "kv_heads": 1, "q_len": 2, "kv_len": 300,
                                     "head_dim": 16, "dtype": "f32", "causal": True, "diagonal": "bottom_right",
                                     "window": [40, -1], "q": {"layout": "bshd"}, "k": {"layout": "bshd"},
                                     "v": {"layout": "bshd"},
                                     "serving": {"forms": ["packed", "sinks"], "q_lens": [2, 1, 0],
                                                 "kv_lens": [300, 0, 17], "sink_seed": 3}}, 2)

    def test_paged(self):
        self.check("pallas_paged", {"batch": 3, "q_heads": 2, "kv_heads": 2, "q_len": 3, "kv_len": 45,
                                    "head_dim": 32, "dtype": "bf16", "causal": True, "diagonal": "bottom_right",
                                    "softcap": 5.0, "scale": 0.3,
                                    "serving": {"forms": ["paged"], "kv_lens": [45, 2, 0], "page_size": 4,
                                                "shared_pages": 1, "page_seed": 9}}, 3)


if __name__ == "__main__":
    unittest.main()
