"""serve() end to end over pipes: a worker process, hand-built run frames (header text and
payload bytes written here), the result frames read back byte by byte; Unsupported,
exceptions, stray prints, bye and end of input; the same worker in the old positional form
run(case, q, k, v, ...) and in the request form run(req) answering alike, and the README's
worker as printed there. Then numpy_ref over every layout with permuted, padded and
stride-0 tensors against the reference on canonical inputs."""

import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import _util
import numpy as np

from attnfuzz import layouts, protocol, reference, testing, worker
from attnfuzz.case import Case
from attnfuzz.worker import mask_grad

WORKER = r'''
import sys
sys.path.insert(0, %(pydir)r)
import numpy as np
from attnfuzz import layouts
from attnfuzz.worker import serve, Unsupported, Result

def run(case, q, k, v, mask=None, bool_mask=None):
    print("a stray print")                       # must not reach the frame stream
    if case.head_dim == 3:
        raise Unsupported("head_dim 3 is not a multiple of 2")
    if case.head_dim == 5:
        raise ValueError("five is right out")
    if case.head_dim == 7:
        return np.zeros((2, 2))
    assert not q.flags.writeable
    if case.packed:
        assert np.shares_memory(q, case.qkv) and np.shares_memory(v, case.qkv)
        qb, kb, vb = layouts.case_inputs_bhsd(case, q, k, v)
        return (qb.astype(np.float32) + 10 * kb.astype(np.float32) + 100 * vb.astype(np.float32))
    out = 2 * q.astype(np.float32) + v.astype(np.float32)
    if mask is not None:
        assert mask.strides == (0, 0, 0, 4), mask.strides
        out = out + mask
    if case.head_dim == 6:
        return Result(layouts.from_bhsd(out.astype(np.float16), "bshd"), layout="bshd", compile_s=1.5, run_s=0.25)
    return out

serve(run, name="echo", version="0.1", caps=["f32", "f16", "amask"], layouts=["bhsd", "qkv_bs3hd"],
      variant="plain", limits={"max_head_dim": 8})
'''


# A batching worker whose batch function meets a device fault on head_dim 3: what a GPU
# target's run_batch answers (attnfuzz.targets._base.main) when the CUDA context is lost.
FAULT_WORKER = r'''
import sys
sys.path.insert(0, %(pydir)r)
from attnfuzz.worker import serve, Fault

def run(case, q, k, v, mask=None, bool_mask=None):
    sys.stderr.write("case %%d ran\\n" %% case.head_dim)
    return v

def run_batch(requests):
    out = []
    for case, q, k, v, mask, bool_mask in requests:
        if case.head_dim == 3:
            return out + [Fault(RuntimeError("CUDA error: misaligned address"))]
        out.append(run(case, q, k, v))
    return out

serve(run, name="faulty", version="0.1", caps=["f32"], layouts=["bhsd"], batch=8, run_batch=run_batch)
'''


# The same two workers in the request form: run(req), run_batch([req, ...]).
REQUEST_WORKER = (WORKER.replace("def run(case, q, k, v, mask=None, bool_mask=None):",
                                 "def run(req):\n    case, q, k, v, mask = req.case, req.q, req.k, req.v, req.mask")
                  .replace("case.qkv", "req.qkv"))
REQUEST_FAULT_WORKER = (FAULT_WORKER.replace("def run(case, q, k, v, mask=None, bool_mask=None):",
                                             "def run(req):\n    case, v = req.case, req.v")
                        .replace("for case, q, k, v, mask, bool_mask in requests:",
                                 "for req in requests:\n        case = req.case")
                        .replace("run(case, q, k, v)", "run(req)"))


def hand_frame(header_text, payload):
    body = header_text.encode() + b"\n" + payload
    return struct.pack("<I", len(body)) + body


def read_result(stream):
    n = struct.unpack("<I", stream.read(4))[0]
    body = stream.read(n)
    text, _, payload = body.partition(b"\n")
    return json.loads(text), payload


CASE2 = '{"batch":1,"q_heads":1,"q_len":2,"kv_len":2,"head_dim":%d,"dtype":"f32"}'


def run_header(rid, head_dim, nbytes_each, extra_entries=""):
    d = head_dim
    ents = ",".join('{"name":"%s","dtype":"f32","shape":[1,1,2,%d],"strides":[%d,%d,%d,4],"offset":%d}'
                    % (n, d, 8 * d, 8 * d, 4 * d, w * nbytes_each) for w, n in enumerate("qkv"))
    return ('{"type":"run","id":%d,"case":%s,"derived":{"scale":1.0,"diag_offset":[0],"valid_keys":[2]},'
            '"tensors":[%s%s]}' % (rid, CASE2 % d, ents, extra_entries))


class Conventions(unittest.TestCase):
    """hello_header checks the conventions against docs/worker-protocol.md's list."""

    def test_known_values_pass(self):
        from attnfuzz.worker import hello_header
        conv = {"masked_rows": "mean", "masked_keys": "ieee", "denormals": "flush", "scores": ["bf16"],
                "tf32": "always", "causal": ["top_left"], "dropout": "none", "masked_values": "ieee"}
        self.assertEqual(hello_header("x", "1", ["f32"], ["bhsd"], conventions=conv)["conventions"], conv)
        by_dtype = {"masked_rows": {"f16": "unmasked", "bf16": "mean"}}
        self.assertEqual(hello_header("x", "1", ["f16"], ["bhsd"], conventions=by_dtype)["conventions"], by_dtype)

    def test_typos_fail_in_the_worker(self):
        from attnfuzz.worker import hello_header
        for conv in ({"masked_row": "nan"}, {"masked_rows": "mean_v"}, {"scores": ["f64"]}, {"causal": ["left"]},
                     {"masked_rows": {"f64": "nan"}}, {"masked_rows": {"f16": "mean_v"}}):
            with self.assertRaises(ValueError):
                hello_header("x", "1", ["f32"], ["bhsd"], conventions=conv)


class Libs(unittest.TestCase):
    """hello_header's libs: versions as strings, None left out, absent when not given."""

    def test_libs(self):
        from attnfuzz.worker import hello_header
        h = hello_header("x", "1", ["f32"], ["bhsd"], libs={"torch": "2.11.0", "sm": 90, "cudnn": None})
        self.assertEqual(h["libs"], {"torch": "2.11.0", "sm": "90"})
        self.assertNotIn("libs", hello_header("x", "1", ["f32"], ["bhsd"]))


class Traits(unittest.TestCase):
    """hello_header's deterministic and batch_invariant: sent as given, absent by default,
    a malformed declaration refused in the worker."""

    def test_traits(self):
        from attnfuzz.worker import hello_header
        h = hello_header("x", "1", ["f32"], ["bhsd"], deterministic={"forward": True, "backward": False},
                         batch_invariant=True)
        self.assertEqual((h["deterministic"], h["batch_invariant"]), ({"forward": True, "backward": False}, True))
        plain = hello_header("x", "1", ["f32"], ["bhsd"])
        self.assertNotIn("deterministic", plain)
        self.assertNotIn("batch_invariant", plain)
        for bad in ({"forwards": True}, {"backward": "no"}):
            with self.assertRaises(ValueError):
                hello_header("x", "1", ["f32"], ["bhsd"], deterministic=bad)


class Serve(unittest.TestCase):
    """The workers in the old positional form (run(case, q, k, v, mask=, bool_mask=),
    case.qkv: attnfuzz.request.CaseView); ServeRequestForm runs the same tests on them in
    the request form."""
    SOURCE, FAULT_SOURCE = WORKER, FAULT_WORKER

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.script = os.path.join(cls.tmp.name, "echo_worker.py")
        with open(cls.script, "w") as f:
            f.write(cls.SOURCE % {"pydir": _util.PYDIR})

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def start(self):
        p = subprocess.Popen([sys.executable, self.script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        hello, payload = read_result(p.stdout)
        return p, hello, payload

    def send(self, p, data):
        p.stdin.write(data)
        p.stdin.flush()

    def test_session(self):
        p, hello, payload = self.start()
        self.assertEqual(payload, b"")
        self.assertEqual((hello["type"], hello["protocol"], hello["name"], hello["version"], hello["variant"]),
                         ("hello", 1, "echo", "0.1", "plain"))
        self.assertEqual(hello["caps"], ["f32", "f16", "amask"])
        self.assertEqual(hello["dtypes"], ["f32", "f16"])  # the float caps
        self.assertEqual(hello["layouts"], ["bhsd", "qkv_bs3hd"])
        self.assertEqual(hello["limits"], {"max_head_dim": 8})

        # q = 1 2 3 4, k = 0, v = 10 20 30 40 (f32, [1, 1, 2, 2]): out = 2 q + v
        q = struct.pack("<4f", 1, 2, 3, 4)
        kv = struct.pack("<4f", 0, 0, 0, 0) + struct.pack("<4f", 10, 20, 30, 40)
        self.send(p, hand_frame(run_header(17, 2, 16), q + kv))
        h, out = read_result(p.stdout)
        self.assertEqual((h["type"], h["id"], h["status"], h["layout"]), ("result", 17, "ok", "bhsd"))
        self.assertEqual(h["tensors"], [{"name": "out", "dtype": "f32", "shape": [1, 1, 2, 2],
                                         "strides": [16, 16, 8, 4], "offset": 0}])
        self.assertEqual(h["timings"]["compile_s"], 0.0)
        self.assertGreaterEqual(h["timings"]["run_s"], 0.0)
        self.assertEqual(struct.unpack("<4f", out), (12.0, 24.0, 36.0, 48.0))

        # an additive mask sent once with stride 0 over b, h and q
        mask_entry = ',{"name":"mask","dtype":"f32","shape":[1,1,2,2],"strides":[0,0,0,4],"offset":48}'
        self.send(p, hand_frame(run_header(18, 2, 16, mask_entry), q + kv + struct.pack("<2f", 0.5, -0.25)))
        h, out = read_result(p.stdout)
        self.assertEqual(h["status"], "ok", h)
        self.assertEqual(struct.unpack("<4f", out), (12.5, 23.75, 36.5, 47.75))

        # a Result in another layout, dtype and with timings
        q6 = struct.pack("<12f", *range(12))
        z6 = struct.pack("<12f", *([0.0] * 12))
        self.send(p, hand_frame(run_header(19, 6, 48), q6 + z6 + z6))
        h, out = read_result(p.stdout)
        self.assertEqual((h["status"], h["layout"], h["timings"]), ("ok", "bshd", {"compile_s": 1.5, "run_s": 0.25}))
        self.assertEqual(h["tensors"][0]["dtype"], "f16")
        self.assertEqual(h["tensors"][0]["shape"], [1, 2, 1, 6])
        self.assertEqual(list(np.frombuffer(out, np.float16)), [2.0 * x for x in range(12)])

        # Unsupported, an exception, a wrong output shape, an unknown frame type
        z3 = struct.pack("<6f", *([0.0] * 6))
        self.send(p, hand_frame(run_header(20, 3, 24), z3 * 3))
        h, out = read_result(p.stdout)
        self.assertEqual(h, {"type": "result", "id": 20, "status": "unsupported",
                             "reason": "head_dim 3 is not a multiple of 2"})
        self.assertEqual(out, b"")
        z5 = struct.pack("<10f", *([0.0] * 10))
        self.send(p, hand_frame(run_header(21, 5, 40), z5 * 3))
        h, _ = read_result(p.stdout)
        self.assertEqual(h, {"type": "result", "id": 21, "status": "error", "message": "ValueError: five is right out"})
        z7 = struct.pack("<14f", *([0.0] * 14))
        self.send(p, hand_frame(run_header(22, 7, 56), z7 * 3))
        h, _ = read_result(p.stdout)
        self.assertEqual((h["id"], h["status"]), (22, "error"))
        self.assertIn("shape [2, 2]", h["message"])
        self.send(p, hand_frame('{"type":"ping","id":23}', b""))
        h, _ = read_result(p.stdout)
        self.assertEqual((h["id"], h["status"]), (23, "error"))
        # a tensor outside the payload: an error naming it, and the worker goes on
        self.send(p, hand_frame(run_header(24, 2, 16), q + kv[:16]))
        h, _ = read_result(p.stdout)
        self.assertEqual((h["id"], h["status"]), (24, "error"))
        self.assertIn("tensor v", h["message"])

        # bye: exit 0, nothing more on stdout; the stray prints and the traceback on stderr
        self.send(p, hand_frame('{"type":"bye"}', b""))
        self.assertEqual(p.wait(10), 0)
        self.assertEqual(p.stdout.read(), b"")
        err = p.stderr.read().decode()
        self.assertIn("a stray print", err)
        self.assertIn("ValueError: five is right out", err)
        p.stdout.close(), p.stderr.close(), p.stdin.close()

    def test_batch(self):
        """A batch frame: ok, unsupported, error and ok again, answered in one result frame,
        each ok item's out at its own offset in the one payload."""
        p, hello, _ = self.start()

        def item(rid, d, base):
            ents = ",".join('{"name":"%s","dtype":"f32","shape":[1,1,2,%d],"strides":[%d,%d,%d,4],"offset":%d}'
                            % (n, d, 8 * d, 8 * d, 4 * d, base + w * 8 * d) for w, n in enumerate("qkv"))
            return ('{"id":%d,"case":%s,"derived":{"scale":1.0,"diag_offset":[0],"valid_keys":[2]},'
                    '"tensors":[%s]}' % (rid, CASE2 % d, ents))
        q = struct.pack("<4f", 1, 2, 3, 4)
        k = struct.pack("<4f", 0, 0, 0, 0)
        v = struct.pack("<4f", 10, 20, 30, 40)
        v2 = struct.pack("<4f", 1, 1, 1, 1)
        z3, z5 = struct.pack("<6f", *([0.0] * 6)), struct.pack("<10f", *([0.0] * 10))
        payload = q + k + v + z3 * 3 + z5 * 3 + q + k + v2
        offs = [0, 48, 48 + 72, 48 + 72 + 120]
        header = '{"type":"run","batch":[%s]}' % ",".join(
            (item(30, 2, offs[0]), item(31, 3, offs[1]), item(32, 5, offs[2]), item(33, 2, offs[3])))
        self.send(p, hand_frame(header, payload))
        h, out = read_result(p.stdout)
        self.assertEqual(h["type"], "result")
        self.assertNotIn("id", h)
        items = h["batch"]
        self.assertEqual([(it["id"], it["status"]) for it in items],
                         [(30, "ok"), (31, "unsupported"), (32, "error"), (33, "ok")])
        self.assertEqual(items[1]["reason"], "head_dim 3 is not a multiple of 2")
        self.assertEqual(items[2]["message"], "ValueError: five is right out")
        for it, want in ((items[0], (12.0, 24.0, 36.0, 48.0)), (items[3], (3.0, 5.0, 7.0, 9.0))):
            e = it["tensors"][0]
            self.assertEqual((e["name"], e["shape"]), ("out", [1, 1, 2, 2]))
            self.assertEqual(struct.unpack_from("<4f", out, e["offset"]), want)
        self.assertEqual(len(out), 32)      # exactly the two outputs
        self.send(p, hand_frame('{"type":"bye"}', b""))
        self.assertEqual(p.wait(10), 0)
        p.stdout.close(), p.stderr.close(), p.stdin.close()

    def test_batch_fault(self):
        """A batch function that stops at a fault (worker.Fault as its last result): the
        items before it answered, that item `crash` with the cause, the rest `not_run`, and
        the process ends with FAULT_EXIT once the frame is written."""
        script = os.path.join(self.tmp.name, "fault_worker.py")
        with open(script, "w") as f:
            f.write(self.FAULT_SOURCE % {"pydir": _util.PYDIR})
        p = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        hello, _ = read_result(p.stdout)
        self.assertEqual(hello["batch"], 8)

        def item(rid, d, base):
            ents = ",".join('{"name":"%s","dtype":"f32","shape":[1,1,2,%d],"strides":[%d,%d,%d,4],"offset":%d}'
                            % (n, d, 8 * d, 8 * d, 4 * d, base + w * 8 * d) for w, n in enumerate("qkv"))
            return ('{"id":%d,"case":%s,"derived":{"scale":1.0,"diag_offset":[0],"valid_keys":[2]},'
                    '"tensors":[%s]}' % (rid, CASE2 % d, ents))
        payload = struct.pack("<12f", *range(12)) + struct.pack("<18f", *([0.0] * 18)) + struct.pack("<12f", *range(12))
        header = '{"type":"run","batch":[%s]}' % ",".join((item(40, 2, 0), item(41, 3, 48), item(42, 2, 120)))
        self.send(p, hand_frame(header, payload))
        h, out = read_result(p.stdout)
        self.assertEqual([(it["id"], it["status"]) for it in h["batch"]], [(40, "ok"), (41, "crash"), (42, "not_run")])
        self.assertEqual(h["batch"][1]["message"], "RuntimeError: CUDA error: misaligned address")
        self.assertEqual(struct.unpack("<4f", out), (8.0, 9.0, 10.0, 11.0))   # item 40's v
        self.assertEqual(p.wait(10), worker.FAULT_EXIT)
        self.assertEqual(p.stderr.read().decode().count("case 2 ran"), 1)   # 40 ran, 42 did not
        p.stdout.close(), p.stderr.close(), p.stdin.close()

    def test_packed_qkv_once(self):
        p, hello, _ = self.start()
        # qkv_bs3hd [B=1, S=2, 3, H=1, D=2], element (s, w, d) = 100 s + 10 w + d (hand-made)
        vals = [100 * s + 10 * w + d for s in range(2) for w in range(3) for d in range(2)]
        ents = ",".join('{"name":"%s","dtype":"f32","shape":[1,2,1,2],"strides":[48,24,8,4],"offset":%d}'
                        % (n, 8 * w) for w, n in enumerate("qkv"))
        header = ('{"type":"run","id":5,"case":{"batch":1,"q_heads":1,"q_len":2,"head_dim":2,'
                  '"q":{"layout":"qkv_bs3hd"}},"tensors":[%s,{"name":"qkv","dtype":"f32",'
                  '"shape":[1,2,3,1,2],"strides":[48,24,8,8,4],"offset":0}]}' % ents)
        self.send(p, hand_frame(header, struct.pack("<12f", *vals)))
        h, out = read_result(p.stdout)
        self.assertEqual(h["status"], "ok", h)
        # out[s, d] = q + 10 k + 100 v = (100 s + d) * 111 + 10 + 2000
        want = [(100 * s + d) * 111 + 10 * 1 * 10 + 100 * 20 for s in range(2) for d in range(2)]
        self.assertEqual(list(struct.unpack("<4f", out)), [float(x) for x in want])
        # end of input (no bye) also ends the worker with 0
        p.stdin.close()
        self.assertEqual(p.wait(10), 0)
        p.stdout.close(), p.stderr.close()


class ServeRequestForm(Serve):
    SOURCE, FAULT_SOURCE = REQUEST_WORKER, REQUEST_FAULT_WORKER

    def test_sources_differ(self):
        self.assertIn("def run(req):", self.SOURCE)
        self.assertNotIn("case.qkv", self.SOURCE)
        self.assertIn("for req in requests:", self.FAULT_SOURCE)


class ReadmeWorker(unittest.TestCase):
    """The README's twenty-line worker, as printed there (the old positional form), runs
    unchanged: its hello, and a GQA causal case against the reference."""

    def test_readme_worker_unchanged(self):
        readme = os.path.join(os.path.dirname(_util.PYDIR), "README.md")
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        start = text.index("# my_worker.py")
        src = text[start:text.index("```", start)]
        self.assertIn("def run(case, q, k, v, mask=None, bool_mask=None):", src)
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "my_worker.py")
            with open(script, "w") as f:
                f.write(src)
            c = {"batch": 2, "q_heads": 4, "kv_heads": 2, "q_len": 5, "kv_len": 5, "head_dim": 8, "dtype": "f32",
                 "causal": True}
            r = np.random.default_rng(3)
            q = r.standard_normal((2, 4, 5, 8)).astype(np.float32)
            k, v = (r.standard_normal((2, 2, 5, 8)).astype(np.float32) for _ in range(2))
            env = dict(os.environ, PYTHONPATH=_util.PYDIR)
            with testing.WorkerProcess([sys.executable, script], env=env) as w:
                self.assertEqual(w.hello["name"], "mine")
                header, payload = w.call(testing.run_frame(c, testing.physical_inputs(c, q, k, v)))
            self.assertEqual(header["status"], "ok", header)
            out = protocol.tensors_from_header(header, payload)["out"]
            ref = reference.attention(Case(c), q, k, v)
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


class NumpyRef(unittest.TestCase):
    def test_every_layout(self):
        env = dict(os.environ, PYTHONPATH=_util.PYDIR)
        r = np.random.default_rng(5)
        cmd = [sys.executable, "-m", "attnfuzz.targets.numpy_ref"]
        with testing.WorkerProcess(cmd, env=env) as w:
            self.assertEqual(w.hello["name"], "numpy_ref")
            self.assertEqual(set(w.hello["layouts"]), set(layouts.ALL))
            self.assertEqual(w.hello["conventions"]["dropout"], "counter")
            for t, lay in enumerate(list(layouts.ALL) * 3):
                packed = lay in layouts.PACKED
                B, Sq = int(r.integers(1, 4)), int(r.integers(1, 6))
                Hkv = int(r.integers(1, 3))
                Hq = Hkv if packed else Hkv * int(r.integers(1, 3))
                Sk = Sq if packed else int(r.integers(1, 6))
                D = int(r.integers(1, 5))
                Dv = D if packed else int(r.integers(1, 5))
                nd = 3 if lay in ("bsd", "channels_first", "qkv_channels_first") else (5 if packed else 4)
                spec = {"layout": lay, "perm": int(r.integers(0, 120)), "pad": int(r.integers(0, 3)),
                        "broadcast": ["none", "batch", "heads"][t % 3] if nd != 3 else ["none", "batch"][t % 2]}
                other = {"layout": layouts.UNPACKED[t % 5], "perm": t, "pad": t % 2, "broadcast": "none"}
                case = {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "q_len": Sq, "kv_len": Sk, "head_dim": D,
                        "v_head_dim": Dv, "dtype": ["f32", "f16", "bf16"][t % 3], "causal": t % 2 == 1,
                        "diagonal": "bottom_right", "dropout_p": 0.25 if t % 4 == 0 else 0.0, "dropout_seed": t,
                        "q": spec, "k": spec if packed else other, "v": spec}
                if t % 3 == 0:
                    case["additive_mask"] = {"full_dims": "qk", "rank": 2, "dtype": "f16"}
                if t % 3 == 1:
                    case["bool_mask"] = {"full_dims": "bk", "rank": 4, "expanded": True}
                c = Case(case)
                q = r.normal(size=(B, Hq, Sq, D))
                k, v = r.normal(size=(B, Hkv, Sk, D)), r.normal(size=(B, Hkv, Sk, Dv))
                # stride-0 dims hold one copy: make the canonical values agree along them
                for name, x in (("q", q), ("k", k), ("v", v)):
                    bc = c.specs[name]["broadcast"]
                    if bc == "batch":
                        x[...] = x[:1]
                    elif bc == "heads":
                        x[...] = x[:, :1]
                am = r.normal(size=(1, 1, Sq, Sk)) if "additive_mask" in case else None
                bm = (r.random((B, 1, 1, Sk)) < 0.7) if "bool_mask" in case else None
                arrays = testing.physical_inputs(c, q, k, v, am, bm)
                if packed:
                    self.assertIn("qkv", arrays)
                h, payload = w.call(testing.run_frame(case, arrays, rid=t))
                self.assertEqual((h["id"], h["status"]), (t, "ok"), h)
                out = protocol.tensors_from_header(h, payload)["out"]
                # the values the worker saw: rounded to the dtype like the frame's
                qr, kr, vr = (layouts.to_bhsd(arrays[n], c.layouts[n], *dims).astype(np.float64) for n, dims in
                              (("q", (Hq, D)), ("k", (Hkv, D)), ("v", (Hkv, Dv))))
                want = reference.attention(c, qr, kr, vr, mask=arrays.get("mask"), bool_mask=arrays.get("bool_mask"))
                self.assertEqual(out.shape, (B, Hq, Sq, Dv))
                self.assertTrue(np.allclose(out, want, rtol=1e-12, atol=1e-12, equal_nan=True), (lay, case))
                self.assertFalse(np.isnan(out).any())
            self.assertEqual(w.close(), 0)

    def test_backward_every_layout(self):
        """Backward cases through the kit: do in the output layout with its own strides,
        every gradient back at its shape (dmask at the mask's 4-D shape), equal to the
        reference's gradients of the values the worker saw; a missing gradient is refused."""
        env = dict(os.environ, PYTHONPATH=_util.PYDIR)
        r = np.random.default_rng(9)
        cmd = [sys.executable, "-m", "attnfuzz.targets.numpy_ref"]
        nonzero = 0
        with testing.WorkerProcess(cmd, env=env) as w:
            self.assertIn("backward", w.hello["caps"])
            for t, lay in enumerate(list(layouts.ALL) * 2):
                packed = lay in layouts.PACKED
                B, Sq, Hkv = int(r.integers(1, 3)), int(r.integers(1, 5)), int(r.integers(1, 3))
                Hq = Hkv if packed else Hkv * int(r.integers(1, 3))
                Sk = Sq if packed else int(r.integers(1, 5))
                D = int(r.integers(1, 4))
                Dv = D if packed else int(r.integers(1, 4))
                grads = ["dq", "dk", "dv", "dmask"][: 1 + t % 4]
                out_nd = 3 if layouts.OUT_LAYOUT[lay] in ("bsd", "channels_first") else 4
                do_spec = {"perm": int(r.integers(0, 24)), "pad": t % 3,
                           "broadcast": ["none", "batch"][t % 2] if out_nd == 3 else ["none", "batch", "heads"][t % 3]}
                case = {"batch": B, "q_heads": Hq, "kv_heads": Hkv, "q_len": Sq, "kv_len": Sk, "head_dim": D,
                        "v_head_dim": Dv, "dtype": "f32", "causal": t % 2 == 1, "diagonal": "bottom_right",
                        "q": {"layout": lay}, "k": {"layout": lay}, "v": {"layout": lay},
                        "additive_mask": {"full_dims": ["qk", "bk", "hq", "k"][t % 4], "rank": 4,
                                          "expanded": t % 3 == 0},
                        "backward": {"grads": grads, "do": do_spec}}
                c = Case(case)
                self.assertEqual(c.grads, tuple(grads))
                q = r.normal(size=(B, Hq, Sq, D))
                k, v = r.normal(size=(B, Hkv, Sk, D)), r.normal(size=(B, Hkv, Sk, Dv))
                do = r.normal(size=(B, Hq, Sq, Dv))
                if do_spec["broadcast"] == "batch":
                    do[...] = do[:1]
                elif do_spec["broadcast"] == "heads":
                    do[...] = do[:, :1]
                mshape = tuple(n if x in case["additive_mask"]["full_dims"] else 1
                               for n, x in zip((B, Hq, Sq, Sk), "bhqk"))
                am = r.normal(size=mshape)
                # the values the worker sees: rounded to f32 like the frame's
                q, k, v, do, am = (x.astype(np.float32).astype(np.float64) for x in (q, k, v, do, am))
                arrays = testing.physical_inputs(c, q, k, v, am, None, dout=do)
                self.assertEqual(arrays["do"].shape,
                                 layouts.out_shape(layouts.OUT_LAYOUT[lay], B, Hq, Sq, Dv))
                h, payload = w.call(testing.run_frame(case, arrays, rid=t))
                self.assertEqual((h["id"], h["status"]), (t, "ok"), h)
                got = protocol.tensors_from_header(h, payload)
                self.assertEqual(sorted(got), sorted(["out"] + grads))
                want = reference.backward(c, q, k, v, do, mask=am)
                for g in grads:
                    exp = mask_grad(c, want[g]) if g == "dmask" else want[g]
                    self.assertEqual(got[g].shape, exp.shape, (g, lay))
                    self.assertTrue(np.allclose(got[g], exp, rtol=1e-12, atol=1e-12), (g, lay, case))
                nonzero += sum(bool(np.abs(want[g]).max() > 0) for g in grads)
            # most gradients compared are not 0: the comparison could fail
            self.assertGreater(nonzero, 20)
            self.assertEqual(w.close(), 0)

    def test_backward_result_checked(self):
        """The kit refuses a result without a gradient asked for, or of the wrong shape."""
        from attnfuzz.worker import Result, _grad_arrays
        c = Case({"batch": 1, "q_heads": 2, "q_len": 3, "head_dim": 4,
                  "additive_mask": {"full_dims": "k", "rank": 2}, "backward": {"grads": ["dq", "dmask"]}})
        dq = np.zeros((1, 2, 3, 4))
        with self.assertRaisesRegex(ValueError, "asks for dmask"):
            _grad_arrays(c, "bhsd", {"dq": dq})
        with self.assertRaisesRegex(ValueError, "dq has shape"):
            _grad_arrays(c, "bhsd", {"dq": dq[:, :1], "dmask": np.zeros((1, 3))})
        with self.assertRaisesRegex(ValueError, "not asked"):
            _grad_arrays(c, "bhsd", {"dq": dq, "dk": dq, "dmask": np.zeros((1, 3))})
        # a full dmask is summed over the dims the mask broadcasts
        full = np.arange(18, dtype=np.float64).reshape(1, 2, 3, 3)
        got = dict(_grad_arrays(c, "bhsd", {"dq": dq, "dmask": full}))["dmask"]
        self.assertEqual(got.shape, (1, 1, 1, 3))
        self.assertEqual(got.ravel().tolist(), full.sum(axis=(1, 2)).ravel().tolist())
        with self.assertRaises(ValueError):
            Case({"backward": {"grads": ["dx"]}})


if __name__ == "__main__":
    unittest.main()
