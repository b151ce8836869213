"""_torch_batch.Staging and Download. Staging: a batch's inputs staged as one buffer give views equal to the numpy
inputs (values, shapes, element strides, dtypes: permuted, stride-0, packed and bf16 views),
each span at a 256-byte boundary, packed views inside their buffer's slot, and an input whose
offset cannot be expressed in elements left as numpy. Download: a batch's result tensors
(permuted, broadcast, bf16, bool, empty, in gradient dicts) come back as contiguous numpy
arrays equal to them, other items left alone, one buffer reused. torch's batches with one
wait: results equal the case-by-case ones, a fault after the first case ends the worker
unanswered. On the CPU (the buffers copied, not sent to a GPU); skipped without torch."""

import unittest

import _util  # noqa: F401
import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - the venv has torch; a bare one may not
    torch = None

import ml_dtypes
from attnfuzz.request import Request


def as_f64(x):
    """numpy or torch -> float64 numpy of the same shape (bool as 0/1)."""
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
    return np.asarray(x, dtype=np.float64)


@unittest.skipIf(torch is None, "torch is not installed")
class Staging(unittest.TestCase):
    def setUp(self):
        from attnfuzz.targets import _torch_batch
        self.mod = _torch_batch
        rng = np.random.default_rng(7)
        self.payload = bytearray(1 << 16)
        fill = np.frombuffer(self.payload, np.uint8)
        fill[:] = rng.integers(0, 256, fill.size, dtype=np.uint8)
        # keep the float views finite: rewrite each view's bytes with values after building it
        self.rng = rng

    def view(self, off, shape, dtype, strides=None):
        return np.ndarray(shape, dtype, buffer=self.payload, offset=off, strides=strides)

    def finite(self, a):
        """Writes finite values through view a (every element it can reach)."""
        vals = self.rng.standard_normal(a.shape).astype(np.float64)
        a.flags.writeable = True
        a[...] = vals.astype(a.dtype)
        return a

    def test_views_match_and_align(self):
        # case 0: f16 q permuted (bshd memory of a bhsd view), k stride-0 over heads, v plain, dO
        q = self.finite(self.view(10, (2, 3, 4, 8), np.float16, strides=(3 * 4 * 8 * 2, 8 * 2, 3 * 8 * 2, 2)))
        base_k = self.finite(self.view(1000, (2, 1, 4, 8), np.float16))
        k = np.lib.stride_tricks.as_strided(base_k, shape=(2, 3, 4, 8), strides=(base_k.strides[0], 0) + base_k.strides[2:])
        v = self.finite(self.view(1400, (2, 3, 4, 8), np.float16))
        dout = self.finite(self.view(2000, (2, 3, 4, 8), np.float16))
        mask = self.finite(self.view(2799, (4, 4), np.float32))       # odd offset: a whole number of bytes, not of floats
        # case 1: a packed bf16 buffer [B, S, 3, H, D] and its three views, a bool mask
        qkv = self.finite(self.view(4096, (1, 5, 3, 2, 4), ml_dtypes.bfloat16))
        pq, pk, pv = (qkv[:, :, w].transpose(0, 2, 1, 3) for w in range(3))
        bmask = self.view(5000, (1, 1, 5, 5), np.bool_)
        bmask.flags.writeable = True
        bmask[...] = self.rng.random(bmask.shape) > 0.5
        reqs = [Request(None, q, k, v, mask, None, dout=dout), Request(None, pq, pk, pv, None, bmask, qkv=qkv)]
        expect = {"q": q, "k": k, "v": v, "do": dout, "qkv": qkv, "pq": pq, "pk": pk, "pv": pv, "bmask": bmask}
        expect = {n: (a.copy(), a.shape, tuple(s // a.itemsize for s in a.strides)) for n, a in expect.items()}
        out = self.mod.Staging(torch).upload(reqs, "cpu")
        got = {"q": out[0].q, "k": out[0].k, "v": out[0].v, "do": out[0].dout, "qkv": out[1].qkv,
               "pq": out[1].q, "pk": out[1].k, "pv": out[1].v, "bmask": out[1].bool_mask}
        # the requests given are left as they were (a request is a value)
        self.assertIs(reqs[0].q, q)
        self.assertIs(reqs[1].qkv, qkv)
        for n, t in got.items():
            self.assertIsInstance(t, torch.Tensor, n)
            want, shape, strides = expect[n]
            self.assertEqual(tuple(t.shape), shape, n)
            self.assertEqual(tuple(t.stride()), strides, n)
            np.testing.assert_array_equal(as_f64(t), as_f64(want), err_msg=n)
        self.assertEqual(got["q"].dtype, torch.float16)
        self.assertEqual(got["qkv"].dtype, torch.bfloat16)
        self.assertEqual(got["bmask"].dtype, torch.bool)
        # spans start at 256-byte boundaries (the mask at an odd byte offset of the payload
        # too: its slot is its own)
        for n in ("q", "k", "v", "do", "qkv", "bmask"):
            t = got[n]
            self.assertEqual(t.storage_offset() * t.element_size() % self.mod.ALIGN, 0, n)
        self.assertIsInstance(out[0].mask, torch.Tensor)
        self.assertEqual(out[0].mask.storage_offset() * 4 % self.mod.ALIGN, 0)
        # the packed views lie inside the packed buffer's slot, at their offsets in it
        qkv_t = got["qkv"]
        for n, w in (("pq", 0), ("pk", 1), ("pv", 2)):
            self.assertEqual(got[n].storage_offset() - qkv_t.storage_offset(), w * 2 * 4, n)
        # one buffer: every staged view shares one storage
        ptrs = {t.untyped_storage().data_ptr() for t in got.values()}
        self.assertEqual(len(ptrs), 1)

    def test_overlap_without_containment_and_leftovers(self):
        # two views whose spans overlap without one holding the other: each gets a slot; an
        # array of a dtype it does not stage (complex), an empty one, and a float32 view two
        # bytes into a float16 array's span (no whole number of floats from the slot's
        # start) stay numpy
        a = self.finite(self.view(0, (4, 8), np.float32))
        b = np.ndarray((4, 8), np.float32, buffer=self.payload, offset=64)
        c = np.zeros((2, 2), np.complex64)
        e = np.ndarray((0, 8), np.float32, buffer=self.payload, offset=0)
        h = self.finite(self.view(8192, (64,), np.float16))
        f = np.ndarray((4,), np.float32, buffer=self.payload, offset=8194)
        out = self.mod.Staging(torch).upload([Request(None, a, b, c, e, None), Request(None, h, f, h, None, None)], "cpu")
        np.testing.assert_array_equal(out[0].q.numpy(), a)
        np.testing.assert_array_equal(out[0].k.numpy(), b)
        self.assertIs(out[0].v, c)
        self.assertIs(out[0].mask, e)
        np.testing.assert_array_equal(out[1].q.numpy(), h)
        self.assertIs(out[1].k, f)

    def test_to_torch_takes_a_staged_tensor_as_it_is(self):
        from attnfuzz.targets._torch_layouts import to_torch
        t = torch.arange(6.0).reshape(2, 3).t()
        self.assertIs(to_torch(t, "cpu"), t)


class FakeResult:
    def __init__(self, out=None, dropout_keep=None, grads=None):
        self.out, self.dropout_keep, self.grads = out, dropout_keep, grads


@unittest.skipIf(torch is None, "torch is not installed")
class Download(unittest.TestCase):
    def test_results_come_back_equal(self):
        from attnfuzz.targets import _torch_batch
        g = torch.Generator().manual_seed(3)
        out0 = torch.randn(2, 5, 3, 4, generator=g).permute(0, 2, 1, 3)      # not contiguous
        keep = torch.rand(2, 3, 5, 7, generator=g) > 0.5
        dq = torch.randn(1, 2, 3, 8, generator=g).to(torch.bfloat16)
        dk = torch.randn(1, 1, 3, 8, generator=g).expand(1, 2, 3, 8)         # stride 0
        out1 = torch.randn(3, 1, generator=g, dtype=torch.float64)[:, :1].t()
        empty = torch.empty(0, 4, dtype=torch.float16)
        already = np.arange(4.0)
        refused = ValueError("not run")
        res = [FakeResult(out0, keep), refused, FakeResult(out1, grads={"dq": dq, "dk": dk, "dv": empty}),
               FakeResult(already)]
        want = [out0.clone(), keep.clone(), out1.clone(), dq.clone(), dk.clone(), empty.clone()]
        dl = _torch_batch.Download(torch)
        got = dl.fetch(res)
        self.assertIs(got, res)
        self.assertIs(res[1], refused)
        self.assertIs(res[3].out, already)
        arrays = [res[0].out, res[0].dropout_keep, res[2].out, res[2].grads["dq"], res[2].grads["dk"],
                  res[2].grads["dv"]]
        for a, w in zip(arrays, want):
            self.assertIsInstance(a, np.ndarray)
            self.assertTrue(a.flags.c_contiguous)
            self.assertEqual(a.shape, tuple(w.shape))
            np.testing.assert_array_equal(as_f64(a), as_f64(w))
        self.assertEqual(res[2].grads["dq"].dtype, ml_dtypes.bfloat16)
        self.assertEqual(res[0].dropout_keep.dtype, np.bool_)
        # each array a view of the one buffer, at a 64-byte boundary
        base = dl.pinned.numpy().__array_interface__["data"][0]
        for a in arrays[:5]:
            off = a.__array_interface__["data"][0] - base
            self.assertTrue(0 <= off < dl.pinned.numel() and off % 64 == 0, off)
        # the buffer is reused by the next fetch (the arrays handed out before are overwritten)
        before = dl.pinned
        small = FakeResult(torch.full((2, 2), 9.0))
        dl.fetch([small])
        self.assertIs(dl.pinned, before)
        np.testing.assert_array_equal(small.out, np.full((2, 2), 9.0, np.float32))


def _torch_case(n):
    from attnfuzz.case import Case
    return Case({"batch": 1, "q_heads": 2, "q_len": n, "kv_len": n + 1, "head_dim": 4, "dtype": "f32"})


def _requests(seed=5):
    rng = np.random.default_rng(seed)
    reqs = []
    for n in (2, 3, 5, 3):
        c = _torch_case(n)
        q = rng.standard_normal((1, 2, n, 4)).astype(np.float32)
        k = rng.standard_normal((1, 2, n + 1, 4)).astype(np.float32)
        v = rng.standard_normal((1, 2, n + 1, 4)).astype(np.float32)
        reqs.append(Request(c, q, k, v))
    return reqs


class _FaultExit(Exception):
    pass


@unittest.skipIf(torch is None, "torch is not installed")
class DeferredBatch(unittest.TestCase):
    """torch's run_batch with one wait at the end (the CPU takes the same path as CUDA): the
    results equal the case-by-case ones; a fault on the batch's first case is that case's
    Fault, one on a later case ends the worker unanswered (_base.fault_exit)."""

    def setUp(self):
        from attnfuzz.targets import _base
        from attnfuzz.targets import torch as tt
        self.tt, self.base = tt, _base

    def test_results_equal_case_by_case(self):
        t = self.tt.Target("sdpa_math")
        got = t.run_batch(_requests())
        want = [t.run(r) for r in _requests()]
        self.assertEqual(len(got), 4)
        for g, w in zip(got, want):
            self.assertIsInstance(g.out, np.ndarray)
            np.testing.assert_array_equal(g.out, np.asarray(w.out))
            self.assertGreaterEqual(g.run_s, 0.0)

    def _faulting(self, at):
        from attnfuzz.worker import Fault
        t = self.tt.Target("sdpa_math")
        t.fatal = lambda e: "device lost" in str(e)
        real = t.execute
        calls = []

        def execute(art, req):
            calls.append(req.case.q_len)
            if len(calls) == at + 1:
                raise RuntimeError("CUDA error: device lost")
            return real(art, req)
        t.execute = execute
        saved = self.base.fault_exit

        def fault_exit():
            raise _FaultExit()
        self.base.fault_exit = fault_exit
        try:
            return t.run_batch(_requests()), Fault
        finally:
            self.base.fault_exit = saved

    def test_fault_on_the_first_case_is_that_case_s(self):
        out, Fault = self._faulting(0)
        self.assertEqual(len(out), 1)
        self.assertIsInstance(out[0], Fault)

    def test_fault_on_a_later_case_ends_the_worker_unanswered(self):
        with self.assertRaises(_FaultExit):
            self._faulting(2)


if __name__ == "__main__":
    unittest.main()
