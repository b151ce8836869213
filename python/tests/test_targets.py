"""The target contract (attnfuzz.targets._base) and the stack registry
(attnfuzz.targets, python -m attnfuzz.targets): stacks discovered from the package, broken
modules listed with the reason, the WHERE filters, requirements from the declarations, and
Target.run's shared steps (cache by structure, compile timing, refusals, dtype and score
budget checks) on a small fake stack."""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import _util
import numpy as np

import attnfuzz.targets as targets
from attnfuzz.case import Case
from attnfuzz.request import Request
from attnfuzz.targets import _base, numpy_ref
from attnfuzz.worker import Fault, Result, Unsupported

BROKEN = "raise RuntimeError('no GPU here')\n"
NO_STACK = "VARIANTS = {'a': 'an old-style module'}\n"
WOBBLY = '''from attnfuzz.targets import _base
def _probe(variant):
    if variant == "b":
        raise OSError("driver missing")
    print("noise from an import")
    return None
STACK = _base.Stack("zz_wobbly", imports=("math",), probe=_probe, pip=("wobbly==1.0", "numpy==2.4.6"),
                    variants=(_base.Variant("a", "first"), _base.Variant("b", "second", gpu=True, compiled=True)))
'''


def _env():
    return dict(os.environ, PYTHONPATH=_util.PYDIR)


class Registry(unittest.TestCase):
    def test_discovered_stacks(self):
        names = targets.stack_names()
        for stack in ("numpy_ref", "torch", "ort", "openvino", "tvm", "jax", "tensorrt"):
            self.assertIn(stack, names)
        self.assertFalse([n for n in names if n.startswith("_")])     # helpers are not stacks
        for st in targets.declared():
            self.assertNotIn("error", st, st)
            self.assertTrue(st["variants"], st)

    def test_cli_list(self):
        p = subprocess.run([sys.executable, "-m", "attnfuzz.targets", "--list"], env=_env(), capture_output=True,
                           timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = json.loads(p.stdout)
        self.assertEqual({r["target"].split("/")[0] for r in rows}, set(targets.stack_names()))
        for r in rows:
            self.assertEqual(set(r), {"target", "available", "reason", "summary", "gpu", "compiled", "smoke",
                                      "reference", "backward", "serving"})
            if not r["available"]:
                self.assertTrue(r["reason"], r)
        self.assertIn({"target": "numpy_ref/float64", "available": True, "reason": "", "gpu": False,
                       "compiled": False, "smoke": True, "reference": True, "backward": True,
                       "serving": ["packed", "paged", "sinks", "alibi"],
                       "summary": numpy_ref.STACK.variants["float64"].summary}, rows)
        p = subprocess.run([sys.executable, "-m", "attnfuzz.targets"], env=_env(), capture_output=True)
        self.assertEqual(p.returncode, 2)

    def test_cli_names_filters(self):
        def names(*where):
            p = subprocess.run([sys.executable, "-m", "attnfuzz.targets", "--names"] + list(where), env=_env(),
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout.split()
        every = names()
        cpu, gpu = names("cpu"), names("gpu")
        self.assertEqual(sorted(cpu + gpu), sorted(every))
        self.assertIn("torch/cuda_sdpa_flash", gpu)
        self.assertIn("jax/cudnn", gpu)
        self.assertNotIn("torch/cuda_sdpa_flash", cpu)
        self.assertIn("numpy_ref/float64", cpu)
        self.assertNotIn("numpy_ref/float64", names("cpu", "campaign"))
        self.assertEqual(names("torch", "cpu", "eager"),
                         ["torch/sdpa_math", "torch/sdpa_flash", "torch/sdpa_flash_lse", "torch/explicit", "torch/sdpa_jagged"])
        self.assertEqual(set(names("ort", "jax", "compiled", "cpu")),
                         {"ort/attention", "ort/explicit", "ort/explicit_noopt", "ort/exported_sdpa", "jax/xla",
                          "jax/explicit", "jax/xla_seqlens"})
        self.assertNotIn("torch/flex", names("smoke"))
        # backward: the training stacks' variants (CPU flex aside), never an inference stack's
        bwd = names("backward")
        self.assertIn("torch/cuda_flex", bwd)
        self.assertIn("jax/cudnn", bwd)
        self.assertNotIn("torch/flex", bwd)
        self.assertFalse([t for t in bwd if t.split("/")[0] in ("ort", "openvino", "tvm", "tensorrt", "numpy_tiled")])
        self.assertEqual(set(names("torch", "cpu", "backward")),
                         {"torch/sdpa_math", "torch/sdpa_flash", "torch/explicit", "torch/compile", "torch/compile_sdpa"})

    def test_cli_campaigns(self):
        """--campaigns: the campaigns the scripts run, a stack's variants together, split
        into STACK-eager and STACK-compiled where it has both; STACK/VARIANT words select."""
        def lines(*where):
            p = subprocess.run([sys.executable, "-m", "attnfuzz.targets", "--campaigns"] + list(where), env=_env(),
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            return [ln.split() for ln in p.stdout.splitlines()]
        self.assertEqual(lines("torch", "cpu", "campaign"),
                         [["torch-eager", "torch/sdpa_math", "torch/sdpa_flash", "torch/sdpa_flash_lse", "torch/explicit", "torch/sdpa_jagged"],
                          ["torch-compiled", "torch/compile", "torch/compile_sdpa", "torch/flex", "torch/flex_paged"]])
        self.assertEqual(lines("ort", "cpu"),
                         [["ort", "ort/attention", "ort/explicit", "ort/explicit_noopt", "ort/exported_sdpa"]])
        self.assertEqual(lines("torch/sdpa_math", "jax/xla", "torch/sdpa_flash"),
                         [["jax", "jax/xla"], ["torch", "torch/sdpa_math", "torch/sdpa_flash"]])
        self.assertEqual(lines("torch/compile", "torch/explicit"),
                         [["torch-eager", "torch/explicit"], ["torch-compiled", "torch/compile"]])

    def test_requirements_from_declarations(self):
        with tempfile.TemporaryDirectory() as d:
            base = os.path.join(d, "req.txt")
            with open(base, "w") as f:
                f.write("# the kit\nnumpy==2.4.6\n\nzstandard==0.25.0\n")
            lines = targets.requirements(base)
        self.assertEqual(lines[:2], ["numpy==2.4.6", "zstandard==0.25.0"])
        self.assertEqual(len(lines), len(set(lines)))
        for st in targets.declared():
            for pin in st["pip"]:
                self.assertIn(pin, lines)
        self.assertIn("torch==2.15.0", lines)
        # the GPU-only pins stay out of the CPU set-up's requirements
        gpu = [pin for st in targets.declared() for pin in st.get("gpu_pip", [])]
        self.assertTrue(gpu)
        for pin in gpu:
            self.assertNotIn(pin, lines)

    def test_broken_modules(self):
        with tempfile.TemporaryDirectory() as d:
            for name, src in (("zz_broken", BROKEN), ("zz_nostack", NO_STACK), ("zz_wobbly", WOBBLY)):
                with open(os.path.join(d, name + ".py"), "w") as f:
                    f.write(src)
            targets.__path__.append(d)
            try:
                self.assertIn("zz_wobbly", targets.stack_names())
                rows = targets.list_targets(["zz_missing", "zz_broken", "zz_nostack", "zz_wobbly"])
                declared = targets.declared(["zz_broken", "zz_wobbly"])
                self.assertEqual(targets.requirements(os.devnull)[-2:], ["wobbly==1.0", "numpy==2.4.6"])
            finally:
                targets.__path__.remove(d)
                for name in ("zz_broken", "zz_nostack", "zz_wobbly"):
                    sys.modules.pop("attnfuzz.targets." + name, None)
        self.assertEqual(rows[0]["target"], "zz_missing")
        self.assertFalse(rows[0]["available"])
        self.assertIn("ModuleNotFoundError", rows[0]["reason"])
        self.assertEqual((rows[1]["target"], rows[1]["available"]), ("zz_broken", False))
        self.assertIn("RuntimeError: no GPU here", rows[1]["reason"])
        self.assertIn("declares no STACK", rows[2]["reason"])
        self.assertEqual(rows[3], {"target": "zz_wobbly/a", "available": True, "reason": "", "summary": "first",
                                   "gpu": False, "compiled": False, "smoke": True, "reference": False,
                                   "backward": False, "serving": []})
        self.assertEqual((rows[4]["target"], rows[4]["available"], rows[4]["gpu"]), ("zz_wobbly/b", False, True))
        self.assertIn("OSError: driver missing", rows[4]["reason"])
        self.assertIn("RuntimeError: no GPU here", declared[0]["error"])
        self.assertEqual([v["variant"] for v in declared[1]["variants"]], ["a", "b"])

    def test_missing_module_names_its_extra(self):
        # the wheel's extras are the stacks with pins (python/wheel_metadata.py): a module
        # that does not import is named with the extra of the stack that imports it
        extras = targets.extras_by_module(targets.load(s)[0] for s in targets.stack_names())
        self.assertEqual({m: extras.get(m) for m in ("torch", "onnx", "onnxruntime", "tvm", "jax", "openvino")},
                         {"torch": "torch", "onnx": "ort", "onnxruntime": "ort", "tvm": "tvm", "jax": "jax",
                          "openvino": "openvino"})
        self.assertNotIn("tensorrt", extras)   # declares no pins: no extra installs it
        self.assertNotIn("numpy", extras)      # the reference stacks pin nothing
        provider = ('from attnfuzz.targets import _base\n'
                    'STACK = _base.Stack("zz_provider", imports=("zz_absent_mod.sub",), pip=("zz-absent==1.0",),\n'
                    '                    variants=(_base.Variant("a", "one"),))\n')
        user = ('from attnfuzz.targets import _base\n'
                'STACK = _base.Stack("zz_user", imports=("math",), variants=(\n'
                '    _base.Variant("plain", "math only"), _base.Variant("needs", "also zz", needs=("zz_absent_mod",))))\n')
        with tempfile.TemporaryDirectory() as d:
            for name, src in (("zz_provider", provider), ("zz_user", user)):
                with open(os.path.join(d, name + ".py"), "w") as f:
                    f.write(src)
            targets.__path__.append(d)
            try:
                rows = {r["target"]: r for r in targets.list_targets(["zz_provider", "zz_user"])}
            finally:
                targets.__path__.remove(d)
                for name in ("zz_provider", "zz_user"):
                    sys.modules.pop("attnfuzz.targets." + name, None)
        self.assertEqual(rows["zz_provider/a"]["reason"], "zz_absent_mod.sub does not import: ModuleNotFoundError: "
                         "No module named 'zz_absent_mod' (pip install 'attnfuzz[zz_provider]')")
        self.assertTrue(rows["zz_user/plain"]["available"])
        self.assertFalse(rows["zz_user/needs"]["available"])
        self.assertTrue(rows["zz_user/needs"]["reason"].endswith("(pip install 'attnfuzz[zz_provider]')"),
                        rows["zz_user/needs"])

    def test_numpy_ref_module(self):
        self.assertEqual(numpy_ref.STACK.available("float64"), (True, ""))
        self.assertFalse(numpy_ref.STACK.available("nope")[0])
        ns = {}
        exec(compile(numpy_ref.repro_snippet("float64"), "repro", "exec"), ns)
        self.assertTrue(callable(ns["attention"]))
        for argv in (["nope"], ["float64", "extra"]):
            p = subprocess.run([sys.executable, "-m", "attnfuzz.targets.numpy_ref"] + argv, env=_env(),
                               capture_output=True, stdin=subprocess.DEVNULL)
            self.assertEqual(p.returncode, 2)
            self.assertEqual(p.stdout, b"")
            self.assertIn(b"unknown variant", p.stderr)


# -- the contract on a fake stack ---------------------------------------------------------------

FAKE = _base.Stack("fake", imports=("numpy",), variants=(
    _base.Variant("eager", "numpy, nothing to compile"),
    _base.Variant("jit", "a compiler that compiles on the first call", compiled=True),
    _base.Variant("aot", "a compiler that builds ahead", compiled=True)))


class FakeTarget(_base.Target):
    STACK = FAKE
    REFUSALS = ("shape not supported",)
    BUILD_S = 0.05

    def __init__(self, variant):
        super().__init__(variant)
        self.LAZY_COMPILE = variant == "jit"
        self.builds = 0
        self.first_calls = set()

    def declare(self):
        return {"caps": ["f32", "f16", "gqa"]}

    def refuse(self, case, mask, bool_mask):
        if case.q_len == 3:
            raise Unsupported("q_len 3 is not run")

    def build(self, case, q, k, v, mask, bool_mask):
        self.builds += 1
        if self.variant == "aot":
            time.sleep(self.BUILD_S)
        return ("artifact", self.builds)

    def execute(self, art, case, q, k, v, mask, bool_mask):
        if case.q_len == 5:
            raise RuntimeError("the stack says: shape not supported for q_len 5\nmore detail")
        if case.q_len == 6:
            raise ValueError("a real failure")
        if self.variant == "jit" and art not in self.first_calls:
            self.first_calls.add(art)
            time.sleep(self.BUILD_S)
        return np.zeros((case.batch, case.q_heads, case.q_len, case.v_head_dim))


def _case(**kw):
    c = {"batch": 1, "q_heads": 1, "q_len": 2, "kv_len": 2, "head_dim": 4, "dtype": "f32"}
    c.update(kw)
    return Case(c)


def _run(t, **kw):
    c = _case(**kw)
    z = np.zeros(1)
    return t.run(Request(c, z, z, z))


class RequestFakeTarget(FakeTarget):
    """FakeTarget's hooks in the request form (FakeTarget keeps the old positional form)."""

    def refuse(self, req):
        FakeTarget.refuse(self, req.case, req.mask, req.bool_mask)

    def build(self, req):
        return FakeTarget.build(self, req.case, req.q, req.k, req.v, req.mask, req.bool_mask)

    def execute(self, art, req):
        self.seen = req
        return FakeTarget.execute(self, art, req.case, req.q, req.k, req.v, req.mask, req.bool_mask)


class OldFormSeen(FakeTarget):
    def execute(self, art, case, q, k, v, mask, bool_mask):
        self.seen = (case.qkv, case.dout, case.serving_tensors, case.q_len)
        return FakeTarget.execute(self, art, case, q, k, v, mask, bool_mask)


class Contract(unittest.TestCase):
    def test_hello_defaults(self):
        h = FakeTarget("eager").hello()
        self.assertEqual(h["dtypes"], ["f32", "f16"])
        self.assertEqual(len(h["layouts"]), 8)
        self.assertEqual(h["conventions"], _base.DEFAULT_CONVENTIONS)
        self.assertEqual(h["compile_key"], [])
        self.assertEqual(FakeTarget("aot").hello()["compile_key"],
                         ["shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap", "dropout"])

    def test_compiled_cache_and_timing(self):
        t = FakeTarget("aot")
        r1 = _run(t)
        self.assertIsInstance(r1, Result)
        self.assertGreaterEqual(r1.compile_s, FakeTarget.BUILD_S)
        r2 = _run(t)                                   # same structure: no build
        self.assertEqual((t.builds, r2.compile_s), (1, 0.0))
        self.assertLess(r2.run_s, FakeTarget.BUILD_S)
        _run(t, q_len=4, kv_len=4)                     # another structure: another build
        self.assertEqual(t.builds, 2)

    def test_lazy_compile_counts_the_first_call(self):
        t = FakeTarget("jit")
        r1 = _run(t)
        self.assertGreaterEqual(r1.compile_s, FakeTarget.BUILD_S)
        self.assertEqual(r1.run_s, 0.0)
        r2 = _run(t)
        self.assertEqual(r2.compile_s, 0.0)
        self.assertLess(r2.run_s, FakeTarget.BUILD_S)

    def test_plans_count_the_first_call_of_a_structure(self):
        """PLANS: an eager kernel that plans per structure (cuDNN) times the first call of a
        structure as compiling, and batches share one (compile_key every field)."""
        t = FakeTarget("eager")
        t.PLANS = True
        self.assertEqual(t.hello()["compile_key"],
                         ["shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap", "dropout"])
        r1, r2, r3 = _run(t), _run(t), _run(t, q_len=4, kv_len=4)
        self.assertGreater(r1.compile_s, 0.0)
        self.assertEqual((r1.run_s, r2.compile_s), (0.0, 0.0))
        self.assertGreater(r3.compile_s, 0.0)
        self.assertEqual(t.builds, 2)

    def test_run_batch_stops_at_a_fatal_error(self):
        """A fault the process cannot go on from ends the batch there, answered as a Fault
        (serve() answers the rest not_run); any other exception is that case's own answer."""
        t = FakeTarget("eager")
        t.fatal = lambda e: "device lost" in str(e)
        real = t.execute

        def execute(art, case, *a):
            if case.q_len == 7:
                raise RuntimeError("CUDA error: device lost")
            return real(art, case, *a)
        t.execute = execute
        z = np.zeros(1)
        reqs = [Request(_case(q_len=n, kv_len=n), z, z, z) for n in (2, 6, 7, 2)]
        out = t.run_batch(reqs)
        self.assertEqual(len(out), 3)
        self.assertIsInstance(out[0], Result)
        self.assertIsInstance(out[1], ValueError)
        self.assertIsInstance(out[2], Fault)
        self.assertEqual(str(out[2]), "RuntimeError: CUDA error: device lost")

    def test_eager_reports_no_compile(self):
        t = FakeTarget("eager")
        self.assertEqual(_run(t).compile_s, 0.0)
        self.assertEqual(t.builds, 2 - 1)              # built, not cached (no structure key)
        _run(t)
        self.assertEqual(t.builds, 2)

    def test_refusals(self):
        t = FakeTarget("aot")
        with self.assertRaisesRegex(Unsupported, "q_len 3 is not run"):
            _run(t, q_len=3, kv_len=3)
        with self.assertRaises(Unsupported) as e:
            _run(t, q_len=5, kv_len=5)
        self.assertEqual(str(e.exception), "fake: the stack says: shape not supported for q_len 5")
        with self.assertRaisesRegex(ValueError, "a real failure"):
            _run(t, q_len=6, kv_len=6)
        with self.assertRaisesRegex(Unsupported, "dtype bf16"):
            _run(t, dtype="bf16")
        with self.assertRaisesRegex(Unsupported, "fake/aot does not declare causal, softcap"):
            _run(t, causal=True, softcap=2.0)
        with self.assertRaisesRegex(Unsupported, "scores"):
            _run(t, batch=64, q_heads=64, q_len=512, kv_len=512)

    def test_keep_mask(self):
        self.assertIsNone(_base.keep_mask(_case()))
        self.assertFalse(_base.keep_mask(_case(dropout_p=1.0)).any())
        k = _base.keep_mask(_case(dropout_p=0.5, dropout_seed=3, q_len=64, kv_len=64))
        self.assertEqual(k.shape, (1, 1, 64, 64))
        self.assertTrue(0.4 < k.mean() < 0.6)

    def test_both_forms_of_the_hooks(self):
        """A Target whose hooks take the request and one whose hooks take the old positional
        arguments answer alike; the old form's case answers qkv, dout and serving_tensors
        from the request, the request form gets the request itself."""
        for variant in ("eager", "jit", "aot"):
            old, new = FakeTarget(variant), RequestFakeTarget(variant)
            self.assertEqual(_base._old_form_hooks(FakeTarget), {"refuse", "build", "execute"})
            self.assertEqual(_base._old_form_hooks(RequestFakeTarget), frozenset())
            for kw in ({}, {"q_len": 4, "kv_len": 4}):
                a, b = _run(old, **kw), _run(new, **kw)
                np.testing.assert_array_equal(a.out, b.out)
            self.assertEqual(old.builds, new.builds)
            for t in (old, new):
                with self.assertRaisesRegex(Unsupported, "q_len 3 is not run"):
                    _run(t, q_len=3, kv_len=3)
        t = OldFormSeen("eager")
        qkv, do = np.zeros((1, 2, 3, 1, 4)), np.ones((1, 1, 2, 4))
        req = Request(_case(), qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dout=do, qkv=qkv,
                      tables={"seqlens_k": np.array([2], np.int32)})
        t.run(req)
        self.assertIs(t.seen[0], qkv)
        self.assertIs(t.seen[1], do)
        self.assertEqual(list(t.seen[2]), ["seqlens_k"])
        self.assertEqual(t.seen[3], 2)
        n = RequestFakeTarget("eager")
        n.run(req)
        self.assertIs(n.seen, req)

    def test_a_variant_names_its_class(self):
        """Stack.target makes the class a declaration names (a module of attnfuzz.targets and
        a class in it), else the stack module's Target; the serving variants of torch and jax
        are declared so (no routing in a constructor)."""
        from attnfuzz.targets import jax as jx
        self.assertEqual(jx.STACK.variant("xla_seqlens").target, "_jax_serving.ServingTarget")
        self.assertIsNone(jx.STACK.variant("xla").target)
        self.assertEqual(jx.STACK.target_class("xla").__name__, "Target")
        self.assertEqual(jx.STACK.target_class("xla").__module__, "attnfuzz.targets.jax")
        cls = jx.STACK.target_class("xla_seqlens")
        self.assertEqual((cls.__module__, cls.__name__), ("attnfuzz.targets._jax_serving", "ServingTarget"))
        self.assertIs(cls.STACK, jx.STACK)
        self.assertFalse(hasattr(jx.Target, "__new__") and "__new__" in vars(jx.Target))
        self.assertEqual(numpy_ref.STACK.target_class("float64"), numpy_ref.Target)

    def test_shared_helpers_take_both_forms(self):
        """_common.dense_arguments and _onnx_graphs.feeds take a request, or the old
        positional arguments with an old-form hook's case (its qkv the packed buffer): the
        same arrays either way (a packed case with a structural mask, key padding and
        dropout: every input kind)."""
        from attnfuzz import rng, testing
        from attnfuzz.request import old_form
        from attnfuzz.targets import _common, _onnx_graphs
        c = {"batch": 1, "q_heads": 2, "q_len": 3, "kv_len": 3, "head_dim": 4, "dtype": "f32",
             "q": {"layout": "qkv_bs3hd"}, "dropout_p": 0.3, "causal": True, "diagonal": "bottom_right",
             "key_padding": [2]}
        r = np.random.default_rng(1)
        q, k, v = (r.standard_normal((1, 2, 3, 4)) for _ in range(3))
        req = Request.from_arrays(Case(c, testing.derived(c)), testing.physical_inputs(c, q, k, v),
                                  keep=rng.case_keep)
        case, q, k, v, mask, bool_mask = old_form(req)
        keep = rng.case_keep(case)
        names = ["struct", "kv_len", "keep"]
        new = _common.dense_arguments(req, names)
        old = _common.dense_arguments(case, q, k, v, mask, bool_mask, keep, names)
        self.assertEqual(len(new), 4)              # the packed buffer and the three inputs
        self.assertEqual(new[0].shape, (1, 3, 3, 2, 4))
        for a, b in zip(new, old):
            np.testing.assert_array_equal(a, b)
        spec = _onnx_graphs.feeds_spec(_onnx_graphs.graph_spec(req.case, "explicit"), None, None)
        f1 = _onnx_graphs.feeds(req, spec)
        f2 = _onnx_graphs.feeds(case, spec, q, k, v, mask, bool_mask, keep)
        self.assertEqual(sorted(f1), sorted(f2))
        self.assertIn("keep", f1)
        for n in f1:
            np.testing.assert_array_equal(f1[n], f2[n])

    def test_main_exit_codes(self):
        self.assertEqual(_base.main(FAKE, FakeTarget, ["nope"]), 2)
        self.assertEqual(_base.main(FAKE, FakeTarget, []), 2)            # no default variant
        missing = _base.Stack("fake2", imports=("no_such_module_here",), variants=(_base.Variant("a", "a"),))
        self.assertEqual(_base.main(missing, FakeTarget, ["a"]), 3)


class Refusals(unittest.TestCase):
    """The serving targets' refusal(): a kernel's own input check or stated resource limit is
    a refusal (unsupported, with the message); any other error stays a finding."""

    def test_njt_kernel_checks(self):
        from types import SimpleNamespace
        try:
            from attnfuzz.targets import _torch_serving
        except ImportError:  # pragma: no cover
            self.skipTest("torch serving module does not import")
        me = SimpleNamespace(variant="cuda_sdpa_jagged")
        refuse = _torch_serving.ServingTarget.refusal
        for msg in ("cutlassF: no kernel found to launch!", "key is not correctly aligned (strideM)"):
            why = refuse(me, RuntimeError(msg))
            self.assertTrue(why and msg.split(" (")[0] in why, why)
        self.assertIsNone(refuse(me, RuntimeError("CUDA error: an illegal memory access was encountered")))
        self.assertIsNone(refuse(me, ValueError("shape '[2, 2, 2, 64]' is invalid for input of size 256")))

    def test_pallas_resource_limit(self):
        from types import SimpleNamespace
        from attnfuzz.targets import _jax_serving
        refuse = _jax_serving.ServingTarget.refusal
        msg = "RESOURCE_EXHAUSTED: Shared memory size limit exceeded: requested 1052672, available: 232448"
        self.assertIn("Shared memory size limit", refuse(SimpleNamespace(variant="pallas_paged"), RuntimeError(msg)))
        # the same message from XLA's cuDNN path, or another pallas error, is no refusal
        self.assertIsNone(refuse(SimpleNamespace(variant="cudnn_seqlens"), RuntimeError(msg)))
        self.assertIsNone(refuse(SimpleNamespace(variant="pallas_paged"), RuntimeError("INTERNAL: Mosaic failed")))


if __name__ == "__main__":
    unittest.main()
