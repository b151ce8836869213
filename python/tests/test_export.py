"""attnfuzz.export: bundles of three shapes (a key-padding mask, a causal f16 case, GQA)
exported as ONNX models with test_data_set_0, loaded back from the files and run in ONNX
Runtime: an ORT finding's model reproduces the output the bundle recorded (and still
differs from the reference: the bug travels with the model), a clean case's model gives the
float64 reference within the bundle's tolerance. The Polygraphy files read back through
Polygraphy's own loader. A serving case is refused naming the field."""

import json
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from attnfuzz import bundle, export  # noqa: E402
from attnfuzz.case import Case  # noqa: E402

try:
    import onnx
    from onnx import numpy_helper
    import onnxruntime as ort
except ImportError:  # pragma: no cover - the stack is not installed here
    print("SKIP: onnx / onnxruntime not installed")
    sys.exit(77)

FINDINGS = os.path.join(ROOT, "corpus", "findings")
MASKED = os.path.join(FINDINGS, "ort", "bundles", "diverge-6bccbc261d4a2b31")   # key_padding [1], f32
CAUSAL = os.path.join(FINDINGS, "ort", "bundles", "diverge-6557ed4e5096a80f")   # causal top-left, f16
GQA = os.path.join(FINDINGS, "tvm", "bundles", "diverge-072f5e997f0fbe11")      # Hq 6, Hkv 2 (a TVM bug)


def run_exported(d):
    """model.onnx on test_data_set_0's inputs, read from the files alone, as a tracker's
    user would: (ORT's output, the expected output_0.pb)."""
    model = onnx.load(os.path.join(d, "model.onnx"))
    onnx.checker.check_model(model)
    data = os.path.join(d, "test_data_set_0")
    feeds = {}
    for i in range(len(model.graph.input)):
        t = onnx.TensorProto()
        with open(os.path.join(data, "input_%d.pb" % i), "rb") as f:
            t.ParseFromString(f.read())
        feeds[t.name] = numpy_helper.to_array(t)
    t = onnx.TensorProto()
    with open(os.path.join(data, "output_0.pb"), "rb") as f:
        t.ParseFromString(f.read())
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run([t.name], feeds)[0], numpy_helper.to_array(t)


def bound(meta, ref):
    """The bundle's tolerance per element: atol + rtol * |ref| times its fudge."""
    tol = meta["tolerance"]
    return tol.get("fudge", 1) * (tol["atol"] + tol["rtol"] * np.abs(ref))


class ExportOnnx(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="attnfuzz-export-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def export(self, path, expect):
        d = os.path.join(self.tmp, os.path.basename(path) + "-" + expect)
        e = export.Export(path, expect=expect)
        e.write_onnx(d)
        return e, d

    def check_inputs(self, e, b):
        # q in test_data_set is the bundle's q in the case dtype (these cases are bhsd)
        q = e.feeds["q"]
        self.assertEqual(q.dtype, np.dtype({"f32": np.float32, "f16": np.float16}[b["case"]["dtype"]]))
        np.testing.assert_array_equal(q.astype(np.float32), b["q"])

    def test_finding_reproduces_recorded(self):
        for path in (MASKED, CAUSAL):
            with self.subTest(bundle=os.path.basename(path)):
                b = bundle.load(path)
                e, d = self.export(path, "recorded")
                self.assertEqual(e.kind, "attention")   # the ORT variant that failed
                self.check_inputs(e, b)
                got, expected = run_exported(d)
                recorded = b["out.target_ort_attention"]
                np.testing.assert_array_equal(expected.astype(np.float64), recorded.astype(np.float64))
                np.testing.assert_allclose(got.astype(np.float64), recorded.astype(np.float64), rtol=1e-3, atol=1e-6)
                # the bug is in the model: its output is outside the tolerance of the reference
                err = np.abs(got.astype(np.float64) - b["ref"])
                self.assertTrue(np.any(~(err <= bound(b["meta"], b["ref"]))), "the exported model lost the bug")

    def test_masked_model_takes_key_lengths(self):
        e, _ = self.export(MASKED, "reference")
        np.testing.assert_array_equal(e.feeds["nonpad"], [1])   # key_padding [1] of 2 keys

    def test_clean_gqa_gives_reference(self):
        b = bundle.load(GQA)
        self.assertEqual((b["case"]["q_heads"], b["case"]["kv_heads"]), (6, 2))
        e, d = self.export(GQA, "reference")
        self.check_inputs(e, b)
        got, expected = run_exported(d)
        self.assertEqual(got.shape, (1, 6, 2, 8))
        np.testing.assert_array_equal(expected, b["ref"].astype(np.float32))
        err = np.abs(got.astype(np.float64) - b["ref"])
        self.assertTrue(np.all(err <= bound(b["meta"], b["ref"])), "max err %g" % err.max())
        # and not the TVM output the bundle recorded (the bug is TVM's, not the case's)
        self.assertGreater(np.abs(b["out.target_tvm_torch_sdpa"] - b["ref"]).max(), err.max())

    def test_causal_f16_reference(self):
        b = bundle.load(CAUSAL)
        e, d = self.export(CAUSAL, "reference")
        got, expected = run_exported(d)
        self.assertEqual(expected.dtype, np.float16)      # the model computes in the case's f16
        np.testing.assert_array_equal(expected, b["ref"].astype(np.float16))

    def test_dropout_case_is_explicit_with_keep_mask(self):
        path = os.path.join(FINDINGS, "iree", "bundles", "nan_mismatch-d26532bab15b5615")
        e = export.Export(path)
        self.assertEqual(e.kind, "explicit")
        self.assertIn("keep", e.feeds)
        with self.assertRaisesRegex(export.ExportError, "dropout_p"):
            export.Export(path, graph="attention")

    def test_opset_23_without_key_padding_input(self):
        # opset 23's Attention has no nonpad_kv_seqlen: the key-padding case is refused by
        # field, the causal one runs and still shows ORT's bug
        with self.assertRaisesRegex(export.ExportError, "key_padding"):
            export.Export(MASKED, opset=23)
        e = export.Export(CAUSAL, expect="recorded", opset=23)
        self.assertEqual(e.model.opset_import[0].version, 23)
        sess = ort.InferenceSession(e.model.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(sess.run(None, e.feeds)[0].astype(np.float64), e.expected.astype(np.float64),
                                   rtol=1e-3, atol=1e-6)

    def test_serving_refused_naming_field(self):
        with open(os.path.join(FINDINGS, "torch-cuda", "bundles", "error-29dfcc94dba710fe", "case.json")) as f:
            raw = json.load(f)
        why = export.refusal(Case(raw["case"]))
        self.assertIn('"serving"', why)
        self.assertIn("packed", why)

    def test_cli_writes_files(self):
        d = os.path.join(self.tmp, "cli")
        rc = export.main([GQA, "--onnx", d, "--polygraphy", os.path.join(self.tmp, "in.json"),
                          "--polygraphy-outputs", os.path.join(self.tmp, "out.json")])
        self.assertEqual(rc, 0)
        self.assertEqual(sorted(os.listdir(os.path.join(d, "test_data_set_0"))),
                         ["input_0.pb", "input_1.pb", "input_2.pb", "output_0.pb"])
        with self.assertRaises(SystemExit) as cm:    # nothing to write: a usage error
            export.main([GQA])
        self.assertEqual(cm.exception.code, 2)


class ExportPolygraphy(unittest.TestCase):
    def test_polygraphy_reads_both(self):
        try:
            from polygraphy.comparator import RunResults
            from polygraphy.json import load_json
        except ImportError:
            self.skipTest("polygraphy not installed")
        tmp = tempfile.mkdtemp(prefix="attnfuzz-export-")
        try:
            e = export.Export(MASKED)
            inp, out = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
            with open(inp, "w") as f:
                json.dump(e.polygraphy_inputs(), f)
            with open(out, "w") as f:
                json.dump(e.polygraphy_outputs(), f)
            feeds = load_json(inp)
            self.assertEqual(len(feeds), 1)
            self.assertEqual(sorted(feeds[0]), sorted(e.feeds))
            for n, x in e.feeds.items():
                np.testing.assert_array_equal(feeds[0][n], x)
                self.assertEqual(feeds[0][n].dtype, x.dtype)
            results = RunResults.load(out)
            runner, iters = results.lst[0]
            self.assertEqual(runner, "attnfuzz-reference")
            np.testing.assert_array_equal(iters[0]["out"], bundle.load(MASKED)["ref"].astype(np.float32))
        finally:
            shutil.rmtree(tmp)

    def test_polygraphy_run_compares_onnxrt_with_reference(self):
        # the files as the user runs them: polygraphy run --onnxrt against the expected output
        poly = os.path.join(os.path.dirname(sys.executable), "polygraphy")
        if not os.access(poly, os.X_OK):
            self.skipTest("polygraphy not installed")
        import subprocess
        tmp = tempfile.mkdtemp(prefix="attnfuzz-export-")
        try:
            d, inp, out = (os.path.join(tmp, n) for n in ("onnx", "in.json", "out.json"))
            self.assertEqual(export.main([GQA, "--onnx", d, "--polygraphy", inp, "--polygraphy-outputs", out]), 0)
            r = subprocess.run([poly, "run", os.path.join(d, "model.onnx"), "--onnxrt", "--load-inputs", inp,
                                "--load-outputs", out], capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            self.assertIn("Passed: 1/1 iterations", r.stdout + r.stderr)
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main()
