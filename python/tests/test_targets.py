"""python -m attnfuzz.targets --list: every known stack listed; a module that is missing,
fails to import, or whose available() raises is listed as unavailable with the reason."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import _util

import attnfuzz.targets as targets
from attnfuzz.targets import numpy_ref

BROKEN = "raise RuntimeError('no GPU here')\n"
WOBBLY = '''VARIANTS = {"a": "first", "b": "second"}
def available(variant):
    if variant == "b":
        raise OSError("driver missing")
    print("noise from an import")
    return True, ""
'''


class ListTargets(unittest.TestCase):
    def test_cli(self):
        env = dict(os.environ, PYTHONPATH=_util.PYDIR)
        p = subprocess.run([sys.executable, "-m", "attnfuzz.targets", "--list"], env=env, capture_output=True,
                           timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = json.loads(p.stdout)
        names = [r["target"].split("/")[0] for r in rows]
        for stack in targets.STACKS:
            self.assertIn(stack, names)
        for r in rows:
            self.assertEqual(set(r), {"target", "available", "reason", "summary"})
            if not r["available"]:
                self.assertTrue(r["reason"], r)
        self.assertIn({"target": "numpy_ref/float64", "available": True, "reason": "",
                       "summary": numpy_ref.VARIANTS["float64"]}, rows)
        p = subprocess.run([sys.executable, "-m", "attnfuzz.targets"], env=env, capture_output=True)
        self.assertEqual(p.returncode, 2)

    def test_broken_modules(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "zz_broken.py"), "w") as f:
                f.write(BROKEN)
            with open(os.path.join(d, "zz_wobbly.py"), "w") as f:
                f.write(WOBBLY)
            targets.__path__.append(d)
            try:
                rows = targets.list_targets(["zz_missing", "zz_broken", "zz_wobbly"])
            finally:
                targets.__path__.remove(d)
        self.assertEqual(rows[0]["target"], "zz_missing")
        self.assertFalse(rows[0]["available"])
        self.assertIn("ModuleNotFoundError", rows[0]["reason"])
        self.assertEqual((rows[1]["target"], rows[1]["available"]), ("zz_broken", False))
        self.assertIn("RuntimeError: no GPU here", rows[1]["reason"])
        self.assertEqual(rows[2], {"target": "zz_wobbly/a", "available": True, "reason": "", "summary": "first"})
        self.assertEqual((rows[3]["target"], rows[3]["available"]), ("zz_wobbly/b", False))
        self.assertIn("OSError: driver missing", rows[3]["reason"])

    def test_numpy_ref_module(self):
        self.assertEqual(numpy_ref.available("float64"), (True, ""))
        self.assertFalse(numpy_ref.available("nope")[0])
        ns = {}
        exec(compile(numpy_ref.repro_snippet("float64"), "repro", "exec"), ns)
        self.assertTrue(callable(ns["attention"]))
        env = dict(os.environ, PYTHONPATH=_util.PYDIR)
        p = subprocess.run([sys.executable, "-m", "attnfuzz.targets.numpy_ref", "nope"], env=env,
                           capture_output=True, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stdout, b"")
        self.assertIn(b"unknown variant", p.stderr)


if __name__ == "__main__":
    unittest.main()
