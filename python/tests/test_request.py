"""attnfuzz.request: a request holds one run's tensors (nothing on the case), replace()
makes another and leaves the first as it was, the keep mask is computed once and only when
read, the old positional form is told by signature and its case answers qkv, dout and
serving_tensors from the request."""

import unittest

import _util  # noqa: F401
import numpy as np

from attnfuzz import rng
from attnfuzz.case import Case
from attnfuzz.request import CaseView, Request, caller, old_form, takes_request


def _case(**kw):
    c = {"batch": 1, "q_heads": 2, "q_len": 3, "kv_len": 4, "head_dim": 2, "dtype": "f32"}
    c.update(kw)
    return Case(c)


class Form(unittest.TestCase):
    def test_signatures(self):
        def new(req):
            return "new", req

        def new_opt(req, verbose=False):
            return "new", req

        def old(case, q, k, v, mask=None, bool_mask=None):
            return "old", case, q, k, v, mask, bool_mask

        def star(*a, **kw):
            return "star", a, kw

        class T:
            def run(self, req):
                return req
        self.assertEqual([takes_request(f) for f in (new, new_opt, old, star, T().run)],
                         [True, True, False, False, True])
        q, k, v, m = (np.full((1, 2, 3, 2), x) for x in (1.0, 2.0, 3.0, 4.0))
        req = Request(_case(), q, k, v, mask=m)
        self.assertIs(caller(new), new)
        self.assertIs(caller(new)(req)[1], req)
        tag, case, q2, k2, v2, m2, b2 = caller(old)(req)
        self.assertEqual(tag, "old")
        self.assertIsInstance(case, CaseView)
        self.assertTrue(q2 is q and k2 is k and v2 is v and m2 is m and b2 is None)
        tag, args, kw = caller(star)(req)
        self.assertEqual((tag, len(args), sorted(kw)), ("star", 4, ["bool_mask", "mask"]))


class Fields(unittest.TestCase):
    def test_case_holds_no_tensors(self):
        c = _case()
        for name in ("qkv", "dout", "serving_tensors"):
            self.assertFalse(hasattr(c, name), name)
            with self.assertRaises(AttributeError):
                setattr(c, name, 1)

    def test_case_view_answers_from_the_request(self):
        qkv = np.arange(24.0).reshape(1, 2, 3, 2, 2)
        do = np.ones((1, 2, 3, 2))
        tab = {"seqlens_k": np.array([4], np.int32)}
        req = Request(_case(), qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dout=do, qkv=qkv, tables=tab)
        view = old_form(req)[0]
        self.assertIs(view.qkv, qkv)
        self.assertIs(view.dout, do)
        self.assertEqual(list(view.serving_tensors), ["seqlens_k"])
        self.assertEqual((view.q_heads, view.kv_len), (2, 4))
        self.assertAlmostEqual(view.scale, 2 ** -0.5, places=15)
        view.dout = None                     # an old repro snippet's `case.dout = dout`
        self.assertIsNone(req.dout)
        with self.assertRaises(AttributeError):
            view.q_len = 7

    def test_replace_is_another_request(self):
        q, k, v = (np.zeros((1, 2, 3, 2)) for _ in range(3))
        req = Request(_case(), q, k, v, tables={"sinks": np.zeros(2, np.float32)})
        q2 = np.ones_like(q)
        other = req.replace(q=q2)
        self.assertIs(other.q, q2)
        self.assertIs(req.q, q)
        self.assertIs(other.case, req.case)
        self.assertIs(other.k, k)
        self.assertEqual(list(other.tables), ["sinks"])
        self.assertEqual(sorted(req.tensors()), ["k", "q", "sinks", "v"])

    def test_from_arrays(self):
        a = {n: np.zeros(1) for n in ("q", "k", "v", "mask", "do", "qkv", "cu_seqlens_q", "block_table")}
        req = Request.from_arrays(_case(), a)
        self.assertIs(req.dout, a["do"])
        self.assertIs(req.qkv, a["qkv"])
        self.assertIsNone(req.bool_mask)
        self.assertEqual(sorted(req.tables), ["block_table", "cu_seqlens_q"])

    def test_serving_tables_by_form(self):
        c = _case(serving={"forms": ["alibi"]})
        s = np.array([0.5, 0.25], np.float32)
        req = Request(c, None, None, None, tables={"alibi_slopes": s})
        self.assertIs(req.alibi_slopes, s)
        self.assertIsNone(req.sinks)                   # not a form of this case
        with self.assertRaises(ValueError):
            Request(c, None, None, None).alibi_slopes  # the form without its table


class Keep(unittest.TestCase):
    def test_keep_is_computed_once_when_read(self):
        calls = []

        def rule(case):
            calls.append(case)
            return rng.case_keep(case)
        c = _case(dropout_p=0.5, dropout_seed=11, q_len=16, kv_len=16)
        req = Request(c, None, None, None, keep=rule)
        self.assertEqual(calls, [])
        k = req.keep
        self.assertIs(req.keep, k)
        self.assertEqual(len(calls), 1)
        np.testing.assert_array_equal(k, rng.dropout_keep(11, 0.5, 1, 2, 16, 16))
        self.assertIsNone(Request(_case(), None, None, None, keep=rng.case_keep).keep)   # no dropout
        self.assertFalse(rng.case_keep(_case(dropout_p=1.0)).any())                      # p = 1 keeps nothing


if __name__ == "__main__":
    unittest.main()
