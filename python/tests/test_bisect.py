"""attnfuzz.bisect: the version ranges, the bisection over hand-given verdicts (a change,
none, errors stepped over), the verdict of a script's exit (a traceback is no verdict), and a
whole bisection over wheels of a made-up package built here and installed from a local
directory (no registry): the version that brought the "bug" is found, each installed once."""

import io
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

import _util  # noqa: F401

from attnfuzz import bisect


class Pick(unittest.TestCase):
    VERSIONS = ["2.9.1", "2.10.0", "2.11.0", "2.11.1", "2.12.0", "2.15.0"]

    def test_range_is_numeric_and_inclusive(self):
        self.assertEqual(bisect.pick(self.VERSIONS, "2.10..2.11.1"), ["2.10.0", "2.11.0", "2.11.1"])
        self.assertEqual(bisect.pick(self.VERSIONS, "..2.10.0"), ["2.9.1", "2.10.0"])
        self.assertEqual(bisect.pick(self.VERSIONS, "2.12.0.."), ["2.12.0", "2.15.0"])

    def test_list_is_sorted(self):
        self.assertEqual(bisect.pick([], "2.15.0, 2.9.1,2.11.0"), ["2.9.1", "2.11.0", "2.15.0"])


class Fake(bisect.Bisect):
    """Verdicts given by hand; counts the runs."""

    def __init__(self, verdicts):
        super().__init__("x.py", "pkg", ["v%d" % i for i in range(len(verdicts))], out=None)
        self.verdicts, self.runs = verdicts, 0

    def evaluate(self, i):
        v = self.versions[i]
        if v not in self.seen:
            self.runs += 1
            self.seen[v] = (self.verdicts[i], "")
        return self.seen[v][0]


G, B, E, S = bisect.GOOD, bisect.BAD, bisect.ERROR, bisect.SKIP


class Bisection(unittest.TestCase):
    def test_introduced(self):
        for k in range(1, 16):
            f = Fake([G] * k + [B] * (16 - k))
            r = f.run()
            self.assertEqual((r["last_good"], r["first_bad"]), ("v%d" % (k - 1), "v%d" % k), k)
            self.assertLessEqual(f.runs, 2 + 4)  # both ends, then log2(16)

    def test_fixed(self):
        r = Fake([B, B, B, G, G]).run()
        self.assertEqual((r["last_bad"], r["first_good"]), ("v2", "v3"))
        self.assertTrue(r["result"].startswith("fixed in v3"))

    def test_no_change(self):
        r = Fake([B] * 6).run()
        self.assertFalse(r["change"])
        self.assertEqual(r["state"], B)

    def test_errors_are_stepped_over(self):
        # the first versions cannot load the model, one in the middle crashes
        r = Fake([E, E, G, G, E, G, B, B]).run()
        self.assertEqual((r["last_good"], r["first_bad"]), ("v5", "v6"))
        r = Fake([G, E, E, E, B]).run()   # nothing between decides: the gap is said
        self.assertEqual((r["last_good"], r["first_bad"]), ("v0", "v4"))
        self.assertIn("3 versions between decide nothing", r["result"])

    def test_nothing_decides(self):
        r = Fake([E, S, E]).run()
        self.assertNotIn("change", r)


class Verdicts(unittest.TestCase):
    def verdict(self, body):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "s.py")
            with open(p, "w") as f:
                f.write(body)
            return bisect.run_script(p, d, timeout=60)

    def test_exit_codes(self):
        self.assertEqual(self.verdict("print('BUG: yes'); raise SystemExit(1)"), (B, "BUG: yes"))
        self.assertEqual(self.verdict("print('FIXED')"), (G, "FIXED"))
        self.assertEqual(self.verdict("raise SystemExit(77)")[0], S)
        self.assertEqual(self.verdict("raise SystemExit(3)")[0], E)

    def test_traceback_is_no_verdict(self):
        v, last = self.verdict("import nonexistent_module_xyz")   # exit 1, as a bug would
        self.assertEqual(v, E)
        self.assertIn("nonexistent_module_xyz", last)


def wheel(d, version, body):
    """A minimal wheel of package afbisectdemo==version whose __init__ is body."""
    name = "afbisectdemo-%s-py3-none-any.whl" % version
    info = "afbisectdemo-%s.dist-info" % version
    with zipfile.ZipFile(os.path.join(d, name), "w") as z:
        z.writestr("afbisectdemo/__init__.py", body)
        z.writestr(info + "/METADATA", "Metadata-Version: 2.1\nName: afbisectdemo\nVersion: %s\n" % version)
        z.writestr(info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(info + "/RECORD", "afbisectdemo/__init__.py,,\n%s/METADATA,,\n%s/WHEEL,,\n%s/RECORD,,\n"
                   % (info, info, info))


class EndToEnd(unittest.TestCase):
    def test_local_wheels(self):
        with tempfile.TemporaryDirectory() as d:
            wheels, cache = os.path.join(d, "wheels"), os.path.join(d, "cache")
            os.makedirs(wheels)
            versions = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"]
            for v in versions:   # the bug came with 1.3
                wheel(wheels, v, "BUG = %s\n" % (v >= "1.3"))
            script = os.path.join(d, "repro.py")
            with open(script, "w") as f:
                f.write("import sys, afbisectdemo\nprint('BUG' if afbisectdemo.BUG else 'FIXED')\n"
                        "sys.exit(1 if afbisectdemo.BUG else 0)\n")
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=wheels, ATTNFUZZ_CACHE=cache)
            cmd = [sys.executable, "-m", "attnfuzz.bisect", script, "--package", "afbisectdemo",
                   "--versions", ",".join(versions)]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env)
            self.assertEqual(p.returncode, 0, p.stdout)
            self.assertIn("afbisectdemo: bug since 1.3 (last good 1.2)", p.stdout)
            base = os.path.join(cache, "bisect", "afbisectdemo")
            installed = [v for v in os.listdir(base) if os.path.exists(os.path.join(base, v, ".attnfuzz-installed"))]
            self.assertLess(len(installed), len(versions))   # bisected, not every version run
            # the second time each version comes from the cache: the same answer, pip not needed
            env["PIP_FIND_LINKS"] = os.path.join(d, "nowhere")
            p2 = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env)
            self.assertIn("afbisectdemo: bug since 1.3 (last good 1.2)", p2.stdout)

    def test_installed_version_runs_as_installed(self):
        """A version the environment already has is not installed again: a machine without a
        network (the GPU one) bisects up to its own release with only the older wheels."""
        with tempfile.TemporaryDirectory() as d:
            wheels, cache, site = (os.path.join(d, n) for n in ("wheels", "cache", "site"))
            os.makedirs(wheels)
            for v in ("1.0", "1.1"):   # fixed in 1.1
                wheel(wheels, v, "BUG = %s\n" % (v == "1.0"))
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=wheels, ATTNFUZZ_CACHE=cache)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site,
                            "afbisectdemo==1.1"], check=True, env=env)
            os.remove(os.path.join(wheels, "afbisectdemo-1.1-py3-none-any.whl"))   # only the environment has 1.1
            env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
            script = os.path.join(d, "repro.py")
            with open(script, "w") as f:
                f.write("import sys, afbisectdemo\nsys.exit(1 if afbisectdemo.BUG else 0)\n")
            p = subprocess.run([sys.executable, "-m", "attnfuzz.bisect", script, "--package", "afbisectdemo",
                                "--versions", "1.0,1.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True, env=env)
            self.assertEqual(p.returncode, 0, p.stdout)
            self.assertIn("afbisectdemo: fixed in 1.1 (last bad 1.0)", p.stdout)
            kept = os.listdir(os.path.join(cache, "bisect", "afbisectdemo"))
            self.assertIn("1.0", kept)
            self.assertNotIn("1.1", kept)   # not installed: the environment's own ran


if __name__ == "__main__":
    unittest.main()
