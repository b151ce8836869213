"""The pytest plugin (attnfuzz.pytest_plugin) on a corpus made for it from one seeded-bug
bundle (corpus/regress/diverge-5868ff954b2aa973, mutant:causal_top_left) and a known.json
of its own: each verdict of `attnfuzz regress` becomes the outcome the plugin promises, read
from pytest's own JUnit report of a pytest run in a process of its own; and
attnfuzz_fuzz, the in-process fuzzing fixture, passes an honest attention function and
fails a buggy one naming a bundle that holds the bug."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = os.environ.get("ATTNFUZZ_EXE") or os.path.join(ROOT, "build", "attnfuzz")
BASE = os.path.join(ROOT, "corpus", "regress", "diverge-5868ff954b2aa973")

try:
    import pytest  # noqa: F401
except ImportError:
    print("SKIP: pytest is not installed (scripts/setup_python.sh installs python/requirements-test.txt)")
    sys.exit(77)
if not os.access(EXE, os.X_OK):
    print("SKIP: no attnfuzz binary at %s" % EXE)
    sys.exit(77)


def copy_bundle(dst, backend=None, verdict=None):
    """BASE copied to dst; backend renames its recorded backend (and its output file),
    verdict replaces the recorded verdict."""
    shutil.copytree(BASE, dst)
    cj = os.path.join(dst, "case.json")
    with open(cj) as f:
        meta = json.load(f)
    b = meta["backends"][0]
    if backend:
        old = b["output"]
        b["name"] = meta["who"] = backend
        b["output"] = "out.%s.npy.zst" % backend.replace(":", "_").replace("/", "_")
        os.rename(os.path.join(dst, old), os.path.join(dst, b["output"]))
        meta["files"] = [b["output"] if x == old else x for x in meta["files"]]
    if verdict:
        b["verdict"] = verdict
    with open(cj, "w") as f:
        json.dump(meta, f, indent=1)


KNOWN = {"format": "attnfuzz-known", "version": 1, "entries": [
    {"id": "test-causal-top-left", "class": "real_bug", "title": "the seeded top-left diagonal",
     "backends": ["mutant:causal_top_left"], "kinds": ["diverge"]},
    {"id": "test-fixed-in-fused", "class": "real_bug", "title": "recorded on fused, which is right",
     "backends": ["fused"], "kinds": ["diverge"], "needs": {"cpu": ["avx512f"]}},
]}


def run_pytest(args, cwd, env=None):
    """pytest in a process of its own: {test name: outcome} from its JUnit report, and the
    process's output."""
    junit = os.path.join(cwd, "report.xml")
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), ATTNFUZZ_EXE=EXE, **(env or {}))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "attnfuzz.pytest_plugin", "-p", "no:cacheprovider",
                        "-q", "-rA", "--junitxml", junit] + args, cwd=cwd, env=e, capture_output=True, text=True,
                       timeout=600)
    out = {}
    for tc in ET.parse(junit).iter("testcase"):
        name = tc.get("name")
        outcome = "passed"
        for child in tc:
            if child.tag == "skipped":
                outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
            elif child.tag in ("failure", "error"):
                outcome = "failed"
        out[name] = (outcome, "".join(c.get("message", "") + (c.text or "") for c in tc))
    return out, r.stdout + r.stderr


class RegressItems(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnfuzz-pytest-")
        c = os.path.join(cls.tmp, "corpus")
        copy_bundle(os.path.join(c, "a", "known-same"))
        copy_bundle(os.path.join(c, "a", "known-fixed"), backend="fused")
        copy_bundle(os.path.join(c, "b", "regressed"), verdict="ok")
        copy_bundle(os.path.join(c, "b", "no-stack"), backend="target:nosuchstack/x")
        copy_bundle(os.path.join(c, "b", ".hidden"))
        with open(os.path.join(cls.tmp, "known.json"), "w") as f:
            json.dump(KNOWN, f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def outcomes(self, cpu_flags):
        res, log = run_pytest(["--attnfuzz-regress", "corpus", "--attnfuzz-known", "known.json"], self.tmp,
                              env={"ATTNFUZZ_CPU_FLAGS": cpu_flags})
        names = {k.split(".")[-1]: v for k, v in res.items()}   # JUnit names corpus/a/x as corpus.a.x
        self.assertEqual(sorted(names), ["known-fixed", "known-same", "no-stack", "regressed"], log)
        return names, log

    def test_each_verdict(self):
        o, log = self.outcomes("sse2 avx2")
        self.assertEqual(o["known-same"][0], "xfailed", log)
        self.assertIn("test-causal-top-left", o["known-same"][1])
        # fixed, of an entry that needs avx512f, on a CPU without it: a skip naming the need
        self.assertEqual(o["known-fixed"][0], "skipped", log)
        self.assertIn("avx512f", o["known-fixed"][1])
        self.assertEqual(o["regressed"][0], "failed", log)
        self.assertIn("REGRESSED", o["regressed"][1])
        self.assertEqual(o["no-stack"][0], "skipped", log)
        self.assertIn("target:nosuchstack/x", o["no-stack"][1])

    def test_known_fixed_is_strict_xpass(self):
        o, log = self.outcomes("sse2 avx2 avx512f")
        self.assertEqual(o["known-fixed"][0], "failed", log)
        self.assertIn("XPASS(strict)", o["known-fixed"][1])
        self.assertIn("test-fixed-in-fused", o["known-fixed"][1])

    def test_ids_are_bundle_paths(self):
        r = subprocess.run([sys.executable, "-m", "pytest", "-p", "attnfuzz.pytest_plugin", "-p", "no:cacheprovider",
                            "--collect-only", "-q", "--attnfuzz-regress", "corpus"], cwd=self.tmp, capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), ATTNFUZZ_EXE=EXE))
        ids = sorted(line for line in r.stdout.splitlines() if line.startswith("corpus"))
        self.assertEqual(ids, ["corpus/a/known-fixed", "corpus/a/known-same", "corpus/b/no-stack",
                               "corpus/b/regressed"], r.stdout + r.stderr)


FUZZ_TESTS = textwrap.dedent('''
    import numpy as np

    def softmax_v(s, v):
        """softmax(s) @ v; a row whose every score is -inf gives 0 (the design's fully
        masked row)."""
        m = s.max(-1, keepdims=True)
        dead = m == -np.inf
        w = np.exp(s - np.where(dead, 0, m))
        return (w / np.where(dead, 1, w.sum(-1, keepdims=True))) @ v

    def attention(q, k, v, mask=None, causal=False, scale=None):
        """[B, H, S, D] numpy attention, float64 inside, causal on the bottom-right diagonal."""
        q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
        s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if causal:
            sq, sk = s.shape[-2:]
            s = np.where(np.tril(np.ones((sq, sk), bool), sk - sq), s, -np.inf)
        if mask is not None:
            s = s + mask
        return softmax_v(s, v)

    def buggy(q, k, v, mask=None, causal=False, scale=None):
        """the same with the causal diagonal at the top left (mutant:causal_top_left's bug)"""
        q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
        s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if causal:
            sq, sk = s.shape[-2:]
            s = np.where(np.tril(np.ones((sq, sk), bool)), s, -np.inf)
        if mask is not None:
            s = s + mask
        return softmax_v(s, v)

    def test_honest(attnfuzz_fuzz):
        assert attnfuzz_fuzz(attention, runs=2000) >= 2000     # the cases did run

    def test_buggy(attnfuzz_fuzz):
        attnfuzz_fuzz(buggy, runs=2000)
''')


class FuzzFixture(unittest.TestCase):
    def test_honest_passes_buggy_fails_with_bundle(self):
        tmp = tempfile.mkdtemp(prefix="attnfuzz-fuzz-")
        try:
            with open(os.path.join(tmp, "test_mine.py"), "w") as f:
                f.write(FUZZ_TESTS)
            res, log = run_pytest(["test_mine.py"], tmp)
            self.assertEqual(res["test_honest"][0], "passed", log)
            self.assertEqual(res["test_buggy"][0], "failed", log)
            msg = res["test_buggy"][1]
            bundle = msg.split("bundle ", 1)[1].split()[0].rstrip(":")
            self.assertTrue(os.path.isfile(os.path.join(bundle, "case.json")), msg)
            with open(os.path.join(bundle, "case.json")) as f:
                case = json.load(f)["case"]
            self.assertTrue(case["causal"], "the finding is on a causal case")   # the bug needs one
            self.assertNotEqual(case["q_len"], case["kv_len"])                  # and Sq != Sk
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main()
