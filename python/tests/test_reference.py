"""reference.attention against hand values, one test per rule of docs/design.md section 2, and
against a plain loop implementation on random cases with every feature."""

import itertools
import math
import unittest

import _util  # noqa: F401
import numpy as np

from attnfuzz import reference, rng
from attnfuzz.case import Case

NAN, INF = float("nan"), float("inf")
LN3 = math.log(3.0)


def run(case, q, k, v, **kw):
    return reference.attention(Case(case), np.array(q, dtype=np.float64), np.array(k, dtype=np.float64),
                               np.array(v, dtype=np.float64), **kw)


def one(Sq, Sk, **extra):
    """A case with B = H = 1, D = Dv = 1, scale 1 (unless extra says otherwise)."""
    c = {"batch": 1, "q_heads": 1, "q_len": Sq, "kv_len": Sk, "head_dim": 1, "scale": 1.0}
    c.update(extra)
    return c


def vrows(vals):
    return np.array(vals, dtype=np.float64).reshape(1, 1, -1, 1)


class Rules(unittest.TestCase):
    def assertRow(self, got, want, places=12):
        got = np.asarray(got).ravel()
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            if isinstance(w, float) and math.isnan(w):
                self.assertTrue(math.isnan(g), (list(got), want))
            else:
                self.assertAlmostEqual(g, w, places=places, msg=(list(got), want))

    def test_weights_and_scale(self):
        # scores 0 and ln 3 -> weights 1/4, 3/4
        out = run(one(1, 2), [[[[1.0]]]], vrows([0.0, LN3]), vrows([4.0, 8.0]))
        self.assertRow(out, [0.25 * 4 + 0.75 * 8])
        # default scale 1/sqrt(D): D = 4, q . k1 = 4a, times 1/2 = ln 3
        c = {"head_dim": 4, "kv_len": 2}
        a = LN3 / 2
        k = np.array([[0.0] * 4, [a] * 4]).reshape(1, 1, 2, 4)
        out = run(c, np.ones((1, 1, 1, 4)), k, np.array([4.0, 8.0]).reshape(1, 1, 2, 1))
        self.assertRow(out, [7.0])
        # a given scale of 2 halves the key needed
        out = run(one(1, 2, scale=2.0), [[[[1.0]]]], vrows([0.0, LN3 / 2]), vrows([4.0, 8.0]))
        self.assertRow(out, [7.0])
        # a negative scale flips the weights
        out = run(one(1, 2, scale=-1.0), [[[[1.0]]]], vrows([0.0, LN3]), vrows([4.0, 8.0]))
        self.assertRow(out, [0.75 * 4 + 0.25 * 8])

    def test_gqa(self):
        # Hq = 4, Hkv = 2: query heads 0, 1 read kv head 0; 2, 3 read kv head 1
        c = {"q_heads": 4, "kv_heads": 2, "kv_len": 2, "head_dim": 1, "scale": 1.0}
        q = np.zeros((1, 4, 1, 1))
        k = np.zeros((1, 2, 2, 1))
        v = np.array([[1.0, 3.0], [10.0, 30.0]]).reshape(1, 2, 2, 1)
        out = run(c, q, k, v)
        self.assertRow(out, [2.0, 2.0, 20.0, 20.0])

    def test_softcap(self):
        # scores 0 and 100, cap 1: 0 and tanh(100) = 1 -> weights 1/(1+e), e/(1+e)
        out = run(one(1, 2, softcap=1.0), [[[[1.0]]]], vrows([0.0, 100.0]), vrows([0.0, 1.0]))
        self.assertRow(out, [math.e / (1 + math.e)])
        # cap 2, score 2 atanh(0.5) -> 2 * 0.5 = 1
        out = run(one(1, 2, softcap=2.0), [[[[1.0]]]], vrows([0.0, 2 * math.atanh(0.5)]), vrows([0.0, 1.0]))
        self.assertRow(out, [math.e / (1 + math.e)])

    def test_additive_mask(self):
        c = one(1, 3, additive_mask={"full_dims": "qk", "rank": 2})
        v = vrows([4.0, 8.0, 1000.0])
        z = np.zeros((1, 1, 3, 1))
        out = run(c, [[[[1.0]]]], z, v, mask=np.array([[0.0, LN3, -INF]]))
        self.assertRow(out, [7.0])
        # 4-D [1, 1, 1, Sk] and float16 masks broadcast the same way
        out = run(c, [[[[1.0]]]], z, v, mask=np.array([0.0, LN3, -INF], np.float16).reshape(1, 1, 1, 3))
        m16 = float(np.float16(LN3))
        w1 = math.exp(m16) / (1 + math.exp(m16))
        self.assertRow(out, [4 * (1 - w1) + 8 * w1])

    def test_bool_mask(self):
        c = one(2, 3, bool_mask={"full_dims": "qk"})
        bm = np.array([[True, False, True], [False, False, True]]).reshape(1, 1, 2, 3)
        out = run(c, np.zeros((1, 1, 2, 1)), np.zeros((1, 1, 3, 1)), vrows([1.0, 100.0, 3.0]), bool_mask=bm)
        self.assertRow(out, [2.0, 3.0])
        # uint8 masks: nonzero attends
        out = run(c, np.zeros((1, 1, 2, 1)), np.zeros((1, 1, 3, 1)), vrows([1.0, 100.0, 3.0]),
                  bool_mask=bm.astype(np.uint8) * 7)
        self.assertRow(out, [2.0, 3.0])

    def test_causal_each_diagonal(self):
        # Sq = 2, Sk = 3, equal scores: the output is the mean of the live values
        v = vrows([1.0, 10.0, 100.0])
        q, k = np.zeros((1, 1, 2, 1)), np.zeros((1, 1, 3, 1))
        want = {"top_left": [1.0, 5.5], "bottom_right": [5.5, 37.0]}
        for d, w in want.items():
            self.assertRow(run(one(2, 3, causal=True, diagonal=d), q, k, v), w)
        # valid length 2: offset 2 - 2 = 0, and key 2 padded away
        self.assertRow(run(one(2, 3, causal=True, diagonal="bottom_right_valid", key_padding=[2]), q, k, v),
                       [1.0, 5.5])
        # without key padding bottom_right_valid is bottom_right
        self.assertRow(run(one(2, 3, causal=True, diagonal="bottom_right_valid"), q, k, v), [5.5, 37.0])
        # explicit offset -1: row 0 has no live key (0), row 1 sees key 0
        self.assertRow(run(one(2, 3, causal=True, diagonal="explicit", diagonal_offset=-1), q, k, v), [0.0, 1.0])
        self.assertRow(run(one(2, 3, causal=True, diagonal="explicit", diagonal_offset=5), q, k, v), [37.0, 37.0])

    def test_padding(self):
        c = {"batch": 2, "q_len": 1, "kv_len": 3, "head_dim": 1, "scale": 1.0, "key_padding": [1, 3]}
        v = np.array([[1.0, 10.0, 100.0], [1.0, 10.0, 100.0]]).reshape(2, 1, 3, 1)
        out = run(c, np.zeros((2, 1, 1, 1)), np.zeros((2, 1, 3, 1)), v)
        self.assertRow(out, [1.0, 37.0])
        c["key_padding"] = [0, 2]  # no valid key: 0
        v[0, 0, :, 0] = NAN
        self.assertRow(run(c, np.zeros((2, 1, 1, 1)), np.zeros((2, 1, 3, 1)), v), [0.0, 5.5])

    def test_window(self):
        v = vrows([1.0, 10.0, 100.0, 1000.0])
        q, k = np.zeros((1, 1, 4, 1)), np.zeros((1, 1, 4, 1))
        # (1, 0) non-causal: keys i-1..i
        self.assertRow(run(one(4, 4, window=[1, 0]), q, k, v), [1.0, 5.5, 55.0, 550.0])
        # (0, 1): keys i..i+1
        self.assertRow(run(one(4, 4, window=[0, 1]), q, k, v), [5.5, 55.0, 550.0, 1000.0])
        # (-1, 0) is causal; with causal and (1, -1): keys i-1..i
        self.assertRow(run(one(4, 4, window=[-1, 0]), q, k, v), [1.0, 5.5, 37.0, 277.75])
        self.assertRow(run(one(4, 4, window=[1, -1], causal=True), q, k, v), [1.0, 5.5, 55.0, 550.0])
        # window on the bottom-right diagonal, Sq = 1, Sk = 4: d = 3, keys 2..3
        self.assertRow(run(one(1, 4, window=[1, 1], diagonal="bottom_right"), np.zeros((1, 1, 1, 1)), k, v),
                       [550.0])

    def test_fully_masked_row_is_zero(self):
        c = one(1, 2, bool_mask={"full_dims": "qk"})
        out = run(c, [[[[1.0]]]], vrows([0.0, 1.0]), vrows([NAN, INF]), bool_mask=np.zeros((1, 1, 1, 2), bool))
        self.assertRow(out, [0.0])
        # every live score -inf (additive -inf) is a fully masked row too
        c = one(1, 2, additive_mask={"full_dims": "qk", "rank": 2})
        out = run(c, [[[[1.0]]]], vrows([0.0, 1.0]), vrows([5.0, 6.0]), mask=np.array([[-INF, -INF]]))
        self.assertRow(out, [0.0])

    def test_masked_values_do_not_leak(self):
        v = vrows([2.0, NAN, INF])
        q, k = [[[[1.0]]]], vrows([0.0, 0.0, NAN])  # a NaN score at a masked key is ignored too
        out = run(one(1, 3, key_padding=[1]), q, k, v)
        self.assertRow(out, [2.0])
        out = run(one(1, 3, bool_mask={"full_dims": "qk"}), q, k, v,
                  bool_mask=np.array([True, False, False]).reshape(1, 1, 1, 3))
        self.assertRow(out, [2.0])
        # a live NaN value, or a live NaN score, makes the row NaN
        self.assertRow(run(one(1, 3, key_padding=[2]), q, k, v), [NAN])
        self.assertRow(run(one(1, 3), q, k, vrows([1.0, 2.0, 3.0])), [NAN])
        # an infinite score: NaN weights
        self.assertRow(run(one(1, 2), [[[[1.0]]]], vrows([0.0, INF]), vrows([1.0, 2.0])), [NAN])

    def test_zero_weight_keys_do_not_leak(self):
        # docs/design.md section 2 rule 5: every key of weight exactly 0 is excluded, whatever V holds
        one_q = [[[[1.0]]]]
        # an additive -inf
        c = one(1, 2, additive_mask={"full_dims": "qk", "rank": 2})
        self.assertRow(run(c, one_q, vrows([0.0, 1.0]), vrows([2.0, NAN]), mask=np.array([[0.0, -INF]])), [2.0])
        self.assertRow(run(c, one_q, vrows([0.0, 1.0]), vrows([2.0, -INF]), mask=np.array([[0.0, -INF]])), [2.0])
        # a score of -inf (an infinite key against a positive query)
        self.assertRow(run(one(1, 2), one_q, vrows([0.0, -INF]), vrows([2.0, INF])), [2.0])
        # an exp that underflows to 0
        self.assertRow(run(one(1, 2, scale=1.0), one_q, vrows([0.0, -2000.0]), vrows([2.0, NAN])), [2.0])
        # a dropped key (seed 0, p = 0.5: keep F T T T)
        c = one(1, 4, dropout_p=0.5, dropout_seed=0)
        out = run(c, [[[[0.0]]]], np.zeros((1, 1, 4, 1)), vrows([NAN, 10.0, 100.0, 1000.0]))
        self.assertRow(out, [(10.0 + 100.0 + 1000.0) / 4 / 0.5])
        # a key of nonzero weight still meets its value in IEEE arithmetic
        self.assertRow(run(one(1, 2), one_q, vrows([0.0, 0.0]), vrows([2.0, INF])), [INF])

    def test_dropout(self):
        # seed 0, p = 0.5: keep (b, h, i) = 0, j = 0..3 is F T T T (test_rng); equal weights 1/4
        c = one(1, 4, dropout_p=0.5, dropout_seed=0)
        v = vrows([1.0, 10.0, 100.0, 1000.0])
        out = run(c, [[[[0.0]]]], np.zeros((1, 1, 4, 1)), v)
        self.assertRow(out, [(10.0 + 100.0 + 1000.0) / 4 / 0.5])
        # a dropped key's NaN weight is 0: a NaN score row whose live keys are all dropped
        out = run(one(1, 4, dropout_p=0.5, key_padding=[1]), [[[[1.0]]]], vrows([NAN, 0, 0, 0]), v)
        self.assertRow(out, [0.0])
        # a given keep-mask replaces the counter RNG
        keep = np.array([True, False, False, True]).reshape(1, 1, 1, 4)
        out = run(c, [[[[0.0]]]], np.zeros((1, 1, 4, 1)), v, keep=keep)
        self.assertRow(out, [(1.0 + 1000.0) / 4 / 0.5])
        # p = 1 gives zeros
        out = run(one(1, 4, dropout_p=1.0), [[[[0.0]]]], np.zeros((1, 1, 4, 1)), v)
        self.assertRow(out, [0.0])


class Fp8Bound(unittest.TestCase):
    """reference.fp8_bound, the C oracle's bound of declared FP8 roundings, on one e4m3 row by
    hand: scores 1, 0, -1 (q 1, k 1, 0, -1), V 2, -4, 0.5, the third key masked by an
    additive -inf in the second case."""

    def case(self, mask):
        import ml_dtypes
        c = one(1, 3, fp8={"format": "e4m3", "descale": [1.0, 1.0, 1.0]}, dtype="f16")
        f8 = ml_dtypes.float8_e4m3fn
        q = np.array([1.0]).reshape(1, 1, 1, 1).astype(f8)
        k = np.array([1.0, 0.0, -1.0]).reshape(1, 1, 3, 1).astype(f8)
        v = np.array([2.0, -4.0, 0.5]).reshape(1, 1, 3, 1).astype(f8)
        am = np.array([0.0, 0.0, -np.inf if mask else 0.0], dtype=np.float32).reshape(1, 1, 1, 3) if mask else None
        if am is not None:
            c["additive_mask"] = {"rank": 4, "full_dims": "bhqk", "dtype": "f32", "expanded": False}
        return Case(c), q, k, v, am

    def test_by_hand(self):
        u, h = 2.0 ** -4, 2.0 ** -10
        # a weight below h / s max P rounds to 0 at worst: min(h / s max P, P) caps its term
        cs, q, k, v, am = self.case(False)
        e = np.exp([1.0, 0.0, -1.0])
        p = e / e.sum()
        got = reference.fp8_bound(cs, q, k, v, {"fp8_probs": {"e4m3": 2.0 ** -12}})
        want = u * float(p @ np.array([2.0, 4.0, 0.5])) + float(p @ np.array([2.0, 4.0, 0.5]))
        self.assertAlmostEqual(float(got.ravel()[0]), want, places=15)
        for mask in (False, True):
            cs, q, k, v, am = self.case(mask)
            e = np.exp([1.0, 0.0, -math.inf if mask else -1.0])
            p = e / e.sum()
            vabs = np.array([2.0, 4.0, 0.0 if mask else 0.5])     # the live keys' |V|
            o = float(p @ np.array([2.0, -4.0, 0.5]))
            want_p = u * float(p @ np.array([2.0, 4.0, 0.5])) + float(np.minimum(h / 64 * p.max(), p) @ vabs)
            got = reference.fp8_bound(cs, q, k, v, {"fp8_probs": {"e4m3": 64, "e5m2": 16384}}, mask=am)
            self.assertAlmostEqual(float(got.ravel()[0]), want_p, places=15)
            # O through scale_o = 2^floor(log2(256 / 2 / 4)) = 32
            got = reference.fp8_bound(cs, q, k, v, {"fp8_out": "v_amax"}, mask=am)
            self.assertAlmostEqual(float(got.ravel()[0]), u * abs(o) + h / 32, places=15)
            got = reference.fp8_bound(cs, q, k, v, {"fp8_probs": {"e4m3": 64}, "fp8_out": "v_amax"}, mask=am)
            self.assertAlmostEqual(float(got.ravel()[0]), want_p + u * abs(o) + h / 32, places=15)
            # another format's scale, or nothing declared: no room
            for conv in ({"fp8_probs": {"e5m2": 16384}}, {}, None, {"fp8_out": "dtype"}):
                self.assertEqual(float(reference.fp8_bound(cs, q, k, v, conv, mask=am).ravel()[0]), 0.0)


def loop_reference(c, q, k, v, am, bm):
    """The rules written as loops, independently of reference.py."""
    B, Hq, Sq, D = q.shape
    Hkv, Sk, Dv = k.shape[1], k.shape[2], v.shape[3]
    out = np.zeros((B, Hq, Sq, Dv))
    keep = rng.dropout_keep(c.dropout_seed, c.dropout_p, B, Hq, Sq, Sk)
    for b, h, i in itertools.product(range(B), range(Hq), range(Sq)):
        g = h // (Hq // Hkv)
        dg = i + c.diag_offset[b]
        live, s = [], []
        for j in range(Sk):
            lv = j < c.valid_keys[b] and not (c.causal and j > dg)
            lv = lv and not (c.window[0] >= 0 and j < dg - c.window[0])
            lv = lv and not (c.window[1] >= 0 and j > dg + c.window[1])
            lv = lv and (bm is None or bool(bm[b % bm.shape[0], h % bm.shape[1], i % bm.shape[2], j]))
            x = c.scale * float(np.dot(q[b, h, i], k[b, g, j]))
            if c.softcap > 0:
                x = c.softcap * math.tanh(x / c.softcap)
            if am is not None:
                x += float(am[b % am.shape[0], h % am.shape[1], i % am.shape[2], j])
            live.append(lv)
            s.append(x if lv else -INF)
        if not any(live) or max(s) == -INF:
            continue
        m = max(s)
        w = [math.exp(x - m) for x in s]
        tot = sum(w)
        for j in range(Sk):
            wj = w[j] / tot
            if c.dropout_p > 0:
                wj = wj / (1 - c.dropout_p) if keep[b, h, i, j] else 0.0
            if live[j]:
                out[b, h, i] += wj * v[b, g, j]
    return out


class RandomCases(unittest.TestCase):
    def test_against_loops(self):
        r = np.random.default_rng(11)
        for t in range(60):
            B, Hkv, Sq, Sk, D, Dv = (int(x) for x in r.integers(1, 5, 6))
            Hq = Hkv * int(r.integers(1, 4))
            c = {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "q_len": Sq, "kv_len": Sk, "head_dim": D,
                 "v_head_dim": Dv, "causal": bool(r.integers(2)),
                 "diagonal": ["top_left", "bottom_right", "bottom_right_valid", "explicit"][t % 4],
                 "diagonal_offset": int(r.integers(-2, 3)), "softcap": [0.0, 2.5][t % 2],
                 "window": [int(r.integers(-1, 3)), int(r.integers(-1, 3))],
                 "dropout_p": [0.0, 0.3][(t // 2) % 2], "dropout_seed": int(r.integers(1 << 40))}
            if t % 3 == 0:
                c["scale"] = float(r.normal())
            if t % 5 < 2:
                c["key_padding"] = [int(x) for x in r.integers(0, Sk + 1, B)]
            am = bm = None
            if t % 4 < 2:
                am = r.normal(size=(1, Hq, Sq, Sk))
                am[r.random(am.shape) < 0.2] = -INF
                c["additive_mask"] = {"full_dims": "hqk"}
            if t % 4 in (1, 2):
                bm = r.random((B, 1, 1, Sk)) < 0.7
                c["bool_mask"] = {"full_dims": "bk"}
            q, k, v = r.normal(size=(B, Hq, Sq, D)), r.normal(size=(B, Hkv, Sk, D)), r.normal(size=(B, Hkv, Sk, Dv))
            case = Case(c)
            got = reference.attention(case, q, k, v, mask=am, bool_mask=bm)
            want = loop_reference(case, q, k, v, am, bm)
            self.assertTrue(np.allclose(got, want, rtol=1e-12, atol=1e-12), (t, c, np.abs(got - want).max()))
            # long sequences go in blocks of query rows: the same answer
            saved = reference.BLOCK_ELEMS
            reference.BLOCK_ELEMS = 1
            try:
                blocked = reference.attention(case, q, k, v, mask=am, bool_mask=bm)
            finally:
                reference.BLOCK_ELEMS = saved
            self.assertTrue(np.allclose(blocked, got, rtol=1e-13, atol=1e-13), (t, c))


if __name__ == "__main__":
    unittest.main()
