"""Guard bands (attnfuzz.guard) and the result member guard_writes: a kernel that writes only
its output leaves no entry; one that writes an element or a row past it, or before it, or into
a paged cache's null page or a page's unused tail, gets an entry naming the buffer, the band,
the offset of the first changed element in the band and how many changed, all worked out here
by hand from where the test wrote. numpy buffers in every float dtype, torch CPU ones where
torch is installed."""

import ctypes
import math
import unittest

import _util  # noqa: F401
import numpy as np

from attnfuzz import dtypes, guard, serving, worker
from attnfuzz.case import Case

try:
    import torch
except ImportError:
    torch = None

M = guard.MARGIN


def write_flat(inner, index, value):
    """What a buggy kernel does: stores value at element index counted from the inner view's
    first element by pointer arithmetic (negative: before it), whatever lies there."""
    es = inner.dtype.itemsize
    cell = (ctypes.c_char * es).from_address(inner.ctypes.data + index * es)
    np.frombuffer(cell, dtype=inner.dtype)[0] = value


class Numpy(unittest.TestCase):
    SHAPE = (2, 3, 4, 5)  # an output [B, Hq, Sq, Dv]: a row is 5 elements

    def test_honest(self):
        for dt in (np.float32, np.float16, np.float64, dtypes.DTYPES["bf16"]):
            g = guard.numpy_out(self.SHAPE, dt)
            self.assertEqual(g.inner.shape, self.SHAPE)
            self.assertTrue(g.inner.flags.c_contiguous)
            g.inner[...] = np.arange(120).reshape(self.SHAPE).astype(dt)
            g.inner[0, 0, 0, 0] = np.nan  # the kernel's own NaN in its output is no guard write
            self.assertEqual(guard.writes(g), [], dt)

    def test_one_element_past(self):
        for dt in (np.float32, np.float16, dtypes.DTYPES["bf16"]):
            g = guard.numpy_out(self.SHAPE, dt)
            g.inner[...] = 1
            write_flat(g.inner, 120, 0.0)
            self.assertEqual(guard.writes(g), [{"buffer": "out", "margin": "after", "offset": 0, "count": 1}])

    def test_one_row_past_and_a_nan(self):
        g = guard.numpy_out(self.SHAPE, np.float32, name="dq")
        for i in range(5):  # the row after the last: 5 elements
            write_flat(g.inner, 120 + 3 + i, 2.0)
        self.assertEqual(guard.writes(g), [{"buffer": "dq", "margin": "after", "offset": 3, "count": 5}])
        g = guard.numpy_out(self.SHAPE, np.float32)
        write_flat(g.inner, 130, np.nan)  # an ordinary NaN is not the band's NaN
        self.assertEqual(guard.writes(g), [{"buffer": "out", "margin": "after", "offset": 10, "count": 1}])

    def test_before(self):
        g = guard.numpy_out(self.SHAPE, np.float16)
        write_flat(g.inner, -1, 0.0)
        write_flat(g.inner, -2, 0.0)
        write_flat(g.inner, 120, 0.0)
        self.assertEqual(guard.writes(g), [{"buffer": "out", "margin": "before", "offset": M - 2, "count": 2},
                                           {"buffer": "out", "margin": "after", "offset": 0, "count": 1}])

    def test_bands_are_nan(self):
        g = guard.numpy_out((3,), np.float32)
        cells = (ctypes.c_char * (4 * (M + 3 + M))).from_address(g.inner.ctypes.data - 4 * M)
        whole = np.frombuffer(cells, dtype=np.float32)
        self.assertTrue(np.isnan(whole[:M]).all() and np.isnan(whole[M + 3:]).all())


@unittest.skipIf(torch is None, "torch is not installed")
class Torch(unittest.TestCase):
    def test_torch_cpu(self):
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            g = guard.torch_out((2, 4, 3), dt)
            g.inner.copy_(torch.ones(2, 4, 3, dtype=dt))
            self.assertEqual(guard.writes(g), [])
            g = guard.torch_out((2, 4, 3), dt, name="out")
            whole = g.inner.reshape(-1)
            past = torch.as_strided(whole, (M + 24,), (1,))  # from inner[0] into the after band
            past[24 + 7] = 1.0
            past[24 + 8] = 1.0
            self.assertEqual(guard.writes(g), [{"buffer": "out", "margin": "after", "offset": 7, "count": 2}])

    def test_torch_kernel_out(self):
        # torch.matmul(out=) into the inner view: an honest kernel with an out= argument
        g = guard.torch_out((3, 5), torch.float32)
        torch.matmul(torch.ones(3, 2), torch.ones(2, 5), out=g.inner)
        self.assertEqual(guard.writes(g), [])
        self.assertTrue(bool((g.inner == 2).all()))


def paged_case(seed):
    """Two rows of 5 and 8 keys in pages of 4 (row 0's last page has 3 unused slots)."""
    c = {"batch": 2, "q_heads": 2, "kv_heads": 1, "q_len": 2, "kv_len": 8, "head_dim": 3, "v_head_dim": 3,
         "dtype": "f16", "serving": {"forms": ["paged"], "kv_lens": [5, 8], "page_size": 4, "page_seed": seed}}
    cs = Case(c)
    r = np.random.default_rng(seed)
    q = r.standard_normal((2, 2, 2, 3))
    k, v = r.standard_normal((2, 1, 8, 3)), r.standard_normal((2, 1, 8, 3))
    return cs, serving.physical(cs, q, k, v, dtype_of=dtypes.DTYPES.__getitem__)


class Pages(unittest.TestCase):
    def test_poisoned_and_checked(self):
        kinds = set()
        for seed in range(40):
            cs, t = paged_case(seed)
            tab, _, null = serving.block_table(cs)
            p = serving.poison(cs)
            kinds.add("nan" if math.isnan(p) else "+inf" if p > 0 else "-inf")
            k = np.array(t["k"])
            # the null page and row 0's slots 1..3 of its second page hold the poison
            for x in (k[null].astype(np.float64), k[tab[0, 1], 1:].astype(np.float64)):
                self.assertTrue(np.all(np.isnan(x)) if math.isnan(p) else np.all(x == p))
            self.assertTrue(np.isfinite(k[tab[0, 1], 0].astype(np.float64)).all())   # key 4 is live
            self.assertTrue(np.isfinite(k[tab[1, 1]].astype(np.float64)).all())      # row 1's pages are full
            g = guard.pages(cs, "k", k, tab)
            self.assertEqual(guard.writes(g), [])
            if seed == 0:
                k[tab[0, 1], 2, 0, 1] = 0.5   # tail slot 2 of row 0 (tail slot index 1), dim 1
                k[null, 3, 0, 2] = 0.25       # null page slot 3, dim 2: element 3 * 3 + 2
                self.assertEqual(guard.writes(g), [{"buffer": "k", "margin": "null_page", "offset": 11, "count": 1},
                                                   {"buffer": "k", "margin": "page_tail", "offset": 4, "count": 1}])
        self.assertEqual(kinds, {"nan", "+inf", "-inf"})

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_cache(self):
        cs, t = paged_case(3)
        tab, _, null = serving.block_table(cs)
        k = torch.from_numpy(np.array(t["k"]))
        g = guard.pages(cs, "k_cache", k, tab)
        k[tab[0, 1], 3] = 1.0  # the last tail slot, its 3 dims
        self.assertEqual(guard.writes(g), [{"buffer": "k_cache", "margin": "page_tail", "offset": 6, "count": 3}])


class Answer(unittest.TestCase):
    """The result frame's header carries guard_writes when a run reports some."""

    def case(self):
        return Case({"batch": 1, "q_heads": 1, "kv_heads": 1, "q_len": 2, "kv_len": 2, "head_dim": 2,
                     "v_head_dim": 2})

    def test_member(self):
        c = self.case()
        g = guard.numpy_out((1, 1, 2, 2), np.float32)
        g.inner[...] = 0
        h, _ = worker._answer(7, c, worker.Result(g.inner, guard_writes=guard.writes(g)), 0.1)
        self.assertNotIn("guard_writes", h)
        write_flat(g.inner, 4, 1.0)
        h, _ = worker._answer(7, c, worker.Result(g.inner, guard_writes=guard.writes(g)), 0.1)
        self.assertEqual(h["guard_writes"], [{"buffer": "out", "margin": "after", "offset": 0, "count": 1}])

    def test_checked(self):
        c = self.case()
        out = np.zeros((1, 1, 2, 2), np.float32)
        bad = [{"buffer": "out", "margin": "beside", "offset": 0, "count": 1}]
        with self.assertRaises(ValueError):
            worker._answer(1, c, worker.Result(out, guard_writes=bad), 0.1)
        many = [{"buffer": "out", "margin": "after", "offset": i, "count": 1} for i in range(9)]
        with self.assertRaises(ValueError):
            worker._answer(1, c, worker.Result(out, guard_writes=many), 0.1)
        self.assertEqual(len(guard.writes(*[_Fake(3)] * 4)), guard.MAX_WRITES)


class _Fake:
    def __init__(self, n):
        self.n = n

    def writes(self):
        return [{"buffer": "out", "margin": "after", "offset": i, "count": 1} for i in range(self.n)]


if __name__ == "__main__":
    unittest.main()
