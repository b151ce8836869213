"""attnfuzz.known: version specifiers against hand-picked versions (the rules of
docs/known.md), the CPU-flag and version needs of an entry against a host given by hand
(ATTNFUZZ_CPU_FLAGS and libs), and the repository's known.json files read."""

import os
import unittest

import _util  # noqa: F401

from attnfuzz import known


class Specifiers(unittest.TestCase):
    def test_ranges(self):
        self.assertTrue(known.spec_holds(">=2.11,<2.13", "2.12.1+cu130"))
        self.assertFalse(known.spec_holds(">=2.11,<2.13", "2.13.0"))
        self.assertTrue(known.spec_holds(">=2.11", "2.11"))      # 2.11 equals 2.11.0
        self.assertTrue(known.spec_holds(">2.9.1", "2.11.0"))    # numeric, not text order
        self.assertFalse(known.spec_holds("<3.8", "3.13.3"))

    def test_prefix_and_compatible(self):
        self.assertTrue(known.spec_holds("==9.19.*", "9.19.0"))
        self.assertFalse(known.spec_holds("==9.19.*", "9.1.9"))
        self.assertTrue(known.spec_holds("!=9.19.*", "9.20.0"))
        self.assertTrue(known.spec_holds("~=2.11", "2.15.0"))    # >=2.11, ==2.*
        self.assertFalse(known.spec_holds("~=2.11", "3.0"))

    def test_malformed(self):
        for bad in ("2.11", ">=x", "<=2.*", "~=2"):
            with self.assertRaises(ValueError, msg=bad):
                known.spec_holds(bad, "2.11")


class Needs(unittest.TestCase):
    def setUp(self):
        self.saved = os.environ.get("ATTNFUZZ_CPU_FLAGS")
        os.environ["ATTNFUZZ_CPU_FLAGS"] = "fpu avx2, fma f16c"

    def tearDown(self):
        if self.saved is None:
            os.environ.pop("ATTNFUZZ_CPU_FLAGS", None)
        else:
            os.environ["ATTNFUZZ_CPU_FLAGS"] = self.saved

    def test_cpu(self):
        self.assertEqual(known.cpu_flags(), {"fpu", "avx2", "fma", "f16c"})
        self.assertEqual(known.unmet({"cpu_not": ["avx512f"]}), [])
        self.assertEqual(known.unmet({"cpu": ["avx512f", "avx2"]}), ["avx512f"])
        self.assertEqual(known.unmet({"cpu_not": ["avx2"]}), ["cpu_not avx2"])

    def test_versions_and_unknown(self):
        needs = {"versions": {"torch": "<2.12", "cudnn": "==9.19.*"}, "sm": [90]}
        self.assertEqual(known.unmet(needs, libs={"torch": "2.15.0"}), ["torch <2.12, have 2.15.0"])
        # unknown facts: met for matching, named only when asked
        self.assertEqual(known.unmet(needs, libs={"torch": "2.11.0"}), [])
        self.assertEqual(known.unmet(needs, libs={"torch": "2.11.0"}, unknown=True),
                         ["sm 90, unknown", "cudnn ==9.19.*, unknown"])
        self.assertEqual(known.unmet(needs, libs={"torch": "2.11", "sm": "80", "cudnn": "9.19.0"}), ["sm 90, have 80"])
        self.assertTrue(known.meets({}, libs={}))
        self.assertEqual(known.describe({"cpu": ["amx_bf16"], "cpu_not": ["avx512f"], "versions": {"torch": ">=2.11"}}),
                         "amx_bf16, cpu_not avx512f, torch >=2.11")


class Files(unittest.TestCase):
    def test_repository_entries(self):
        entries = known.load()
        ids = [e["id"] for e in entries]
        self.assertGreater(len(ids), 10)
        self.assertEqual(len(ids), len(set(ids)))
        e = known.find(ids[0])
        self.assertEqual(e["id"], ids[0])
        self.assertTrue(e["file"].startswith("corpus/findings/"))
        self.assertIsNone(known.find("no-such-entry"))


if __name__ == "__main__":
    unittest.main()
