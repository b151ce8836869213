"""The attnfuzz pytest plugin: a corpus of bundles as test items (docs/commands.md,
"pytest").

    pytest -p attnfuzz.pytest_plugin --attnfuzz-regress corpus/        # from a checkout
    pytest --attnfuzz-regress corpus/ --attnfuzz-jobs 4                 # installed from the wheel

Every bundle under the paths (a directory holding case.json; hidden directories skipped) is
an item whose id is its path. The items replay the way `attnfuzz regress` does, in ONE
`attnfuzz regress --junit` run over all of them (each worker starts once, `--jobs N` splits
the clusters of bundles sharing a worker), started by the first item that runs; each item
then reads its own verdict:

| regress says | the item |
| --- | --- |
| same, a known bug (`attnfuzz known`) | xfail, the reason the entry id |
| same, not a known bug | passes (the bundle still fails as recorded) |
| fixed, a known bug | fails as a strict XPASS: retire the entry (docs/known.md) |
| fixed, not a known bug | passes (`--attnfuzz-strict`: fails, as `regress --strict`) |
| skip (needs X) | skipped with the entry's `needs` |
| waived | skipped |
| REGRESSED, or an error | fails with regress's verdict line |

A bundle whose backend is a real target that cannot run here (its stack not installed, no
GPU) is skipped naming the target and why, without running. Given only
`--attnfuzz-regress`, pytest collects nothing else (no test files from the current
directory); positional paths add their tests as usual.

The binary: `--attnfuzz-exe`, else attnfuzz.inprocess.attnfuzz_exe(): $ATTNFUZZ_EXE, the wheel's,
else build/attnfuzz of the checkout this package is in, else `attnfuzz` on PATH.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest

_KNOWN_RE = re.compile(r"\[known bug ([^\s\]]+)")
_NEEDS_RE = re.compile(r"skip \(needs ([^)]*)\)")


def pytest_addoption(parser):
    g = parser.getgroup("attnfuzz")
    g.addoption("--attnfuzz-regress", action="append", default=[], metavar="PATH",
                help="replay every attnfuzz bundle under PATH as a test item (repeatable)")
    g.addoption("--attnfuzz-jobs", type=int, default=1, metavar="N", help="attnfuzz regress --jobs N")
    g.addoption("--attnfuzz-timeout", type=float, default=0, metavar="S",
                help="attnfuzz regress --timeout S and --compile-timeout S (default: regress's)")
    g.addoption("--attnfuzz-strict", action="store_true",
                help="a bundle that is not a known bug and replays fixed fails (regress --strict)")
    g.addoption("--attnfuzz-known", action="append", default=[], metavar="FILE",
                help="also the known bugs of FILE, a known.json (attnfuzz --known FILE; repeatable)")
    g.addoption("--attnfuzz-exe", metavar="PATH", help="the attnfuzz binary (default: found as the module says)")


def find_bundles(path):
    """The bundle directories under path, sorted (path itself when it is one)."""
    if os.path.isfile(os.path.join(path, "case.json")):
        return [path]
    out = []
    for d, dirs, files in os.walk(path, followlinks=True):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        if "case.json" in files:
            out.append(d)
            dirs[:] = []
    return out


def bundle_targets(path):
    """The real targets (STACK/VARIANT) the bundle's recorded backends name."""
    with open(os.path.join(path, "case.json"), "rb") as f:
        meta = json.loads(f.read(1 << 20))
    names = [b.get("name", "") for b in meta.get("backends") or []] or str(meta.get("who") or "").split(",")
    return sorted({n[len("target:"):] for n in names if n.startswith("target:")})


def unavailable_targets(targets, python=None):
    """{STACK/VARIANT: why} for those of targets that cannot run here, asked of the kit
    (attnfuzz.targets.list_targets) in a process of its own: the stacks' imports stay out of
    pytest's."""
    if not targets:
        return {}
    stacks = sorted({t.split("/", 1)[0] for t in targets})
    code = ("import json, sys\nfrom attnfuzz.targets import list_targets, stack_names\n"
            "known = set(stack_names())\n"
            "print(json.dumps(list_targets([s for s in sys.argv[1:] if s in known])))\n")
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([python or sys.executable, "-c", code] + stacks, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {t: "the targets do not list (%s)" % r.stderr.strip()[-200:] for t in targets}
    rows = {row["target"]: row for row in json.loads(r.stdout.strip().splitlines()[-1])}
    out = {}
    for t in targets:
        row = rows.get(t)
        if row is None:
            out[t] = "no such target in this attnfuzz"
        elif not row["available"]:
            out[t] = row["reason"]
    return out


class RegressRun:
    """The one `attnfuzz regress` run over every collected bundle, and what it said of each:
    .results {bundle path: (status, text)} with status same, fixed, regressed, waived,
    skip, error or unavailable; .known {bundle path: entry id}."""

    def __init__(self, config):
        self.config = config
        self.paths = []
        self.results = None
        self.known = {}

    def run(self):
        if self.results is not None:
            return
        self.results = {}
        from .inprocess import attnfuzz_exe
        opt = self.config.getoption
        exe = attnfuzz_exe(opt("--attnfuzz-exe"))
        if not exe:
            for p in self.paths:
                self.results[p] = ("error", "no attnfuzz binary (--attnfuzz-exe, $ATTNFUZZ_EXE, build/attnfuzz)")
            return
        targets = {p: bundle_targets(p) for p in self.paths}
        missing = unavailable_targets(sorted({t for ts in targets.values() for t in ts}))
        runnable = []
        for p in self.paths:
            gone = [t for t in targets[p] if t in missing]
            if gone:
                self.results[p] = ("unavailable", "target:%s cannot run here: %s" % (gone[0], missing[gone[0]]))
            else:
                runnable.append(p)
        if not runnable:
            return
        tmp = tempfile.mkdtemp(prefix="attnfuzz-pytest-")
        try:
            self._regress(exe, runnable, tmp, opt)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _regress(self, exe, runnable, tmp, opt):
        # regress takes directories of bundles: one directory of links per source directory
        # (gN/NAME, relative to tmp, where both commands run), so names stay unique and only
        # the runnable bundles run
        groups, links = {}, {}
        for p in runnable:
            g = groups.setdefault(os.path.dirname(os.path.abspath(p)), "g%d" % len(groups))
            os.makedirs(os.path.join(tmp, g), exist_ok=True)
            os.symlink(os.path.abspath(p), os.path.join(tmp, g, os.path.basename(p)))
            links[g + "/" + os.path.basename(p)] = p
        extra = [a for f in opt("--attnfuzz-known") for a in ("--known", os.path.abspath(f))]
        from .inprocess import exe_env
        env = exe_env(exe)
        known = subprocess.run([exe, "known"] + extra + list(links), capture_output=True, text=True, cwd=tmp, env=env)
        for line in known.stdout.splitlines():   # "gN/NAME: KIND WHO: known bug ID (CLASS): TITLE"
            m = re.match(r"(\S+?)/?: .*?known bug (\S+)", line)
            if m and m.group(1) in links:
                self.known[links[m.group(1)]] = m.group(2)
        junit = os.path.join(tmp, "regress.xml")
        cmd = [exe, "regress", "--junit", junit, "--jobs", str(max(1, opt("--attnfuzz-jobs")))] + extra
        if opt("--attnfuzz-timeout"):
            t = "%g" % opt("--attnfuzz-timeout")
            cmd += ["--timeout", t, "--compile-timeout", t]
        r = subprocess.run(cmd + sorted(groups.values()), capture_output=True, text=True, cwd=tmp, env=env)
        why = "(exit %d): %s" % (r.returncode, r.stderr.strip()[-2000:])
        if os.path.exists(junit):
            for tc in ET.parse(junit).iter("testcase"):
                # classname "attnfuzz.regress.gN", name the bundle's directory name
                link = tc.get("classname", "").rsplit(".", 1)[-1] + "/" + tc.get("name", "")
                if link in links:
                    self.results[links[link]] = _verdict(tc, link, links[link])
        for p in runnable:
            self.results.setdefault(p, ("error", "attnfuzz regress did not report this bundle " + why))


def _verdict(tc, link, path):
    """(status, verdict line) of one JUnit testcase of attnfuzz regress."""
    text = (tc.findtext("system-out") or "").strip().replace(link, path)   # the bundle as the user named it
    for tag, status in (("failure", "regressed"), ("error", "error")):
        e = tc.find(tag)
        if e is not None:
            return status, text or ((e.get("message") or "") + "\n" + (e.text or "")).strip()
    word = text.split(None, 1)[0].lower() if text else ""
    if tc.find("skipped") is not None:
        return ("waived" if word == "waived" else "skip"), text
    if word in ("same", "fixed"):
        return word, text
    return "error", "attnfuzz regress said %r" % text


class BundleItem(pytest.Item):
    """One bundle: its verdict from the session's RegressRun."""

    def __init__(self, *, bundle, run, **kw):
        super().__init__(**kw)
        self.bundle = bundle
        self.regress = run

    def runtest(self):
        self.regress.run()
        status, text = self.regress.results.get(self.bundle, ("error", "not replayed"))
        entry = self.regress.known.get(self.bundle)
        if entry is None:
            m = _KNOWN_RE.search(text)
            entry = m.group(1) if m else None
        if status == "unavailable":
            pytest.skip(text)
        if status == "skip":
            m = _NEEDS_RE.search(text)
            pytest.skip("needs %s: %s" % (m.group(1), text) if m else text)
        if status == "waived":
            pytest.skip("waived: " + text)
        if status == "same" and entry:
            pytest.xfail("known bug %s" % entry)
        if status == "fixed" and entry:
            pytest.fail("[XPASS(strict)] known bug %s no longer shows: retire or scope its entry (docs/known.md)\n%s"
                        % (entry, text), pytrace=False)
        if status == "fixed" and self.config.getoption("--attnfuzz-strict"):
            pytest.fail("fixed (--attnfuzz-strict): %s" % text, pytrace=False)
        if status in ("regressed", "error"):
            pytest.fail(text, pytrace=False)

    def repr_failure(self, excinfo):
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, "attnfuzz bundle %s" % self.bundle


def pytest_configure(config):
    if config.getoption("--attnfuzz-regress"):
        config.stash[_RUN_KEY] = RegressRun(config)
        # only the corpus, unless the command line named test paths of its own
        if getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS:
            config.args[:] = []


def pytest_collection_modifyitems(session, config, items):
    run = config.stash.get(_RUN_KEY, None)
    if run is None:
        return
    for root in config.getoption("--attnfuzz-regress"):
        if not os.path.isdir(root):
            raise pytest.UsageError("--attnfuzz-regress %s: not a directory" % root)
        for b in find_bundles(root):
            rel = os.path.relpath(b)
            run.paths.append(b)
            items.append(BundleItem.from_parent(session, name=rel, nodeid=rel, path=_path(b), bundle=b, run=run))


def _path(p):
    import pathlib
    return pathlib.Path(os.path.abspath(p))


_RUN_KEY = pytest.StashKey()


@pytest.fixture
def attnfuzz_fuzz(request, tmp_path_factory):
    """fuzz(fn, budget=None, runs=None, **options): fuzzes the attention function fn in this
    process (attnfuzz.inprocess.fuzz_function: its doc says how fn is called and the
    options) for budget seconds or runs cases, and fails the test naming the minimized
    bundle of the first finding; returns the number of cases run when there was none. The bundles go to a pytest temporary directory unless
    crashes= says where."""
    from .inprocess import fuzz_function

    def fuzz(fn, budget=None, runs=None, **options):
        crashes = options.pop("crashes", None) or str(tmp_path_factory.mktemp("attnfuzz") / "crashes")
        exe = options.pop("exe", None) or request.config.getoption("--attnfuzz-exe")
        res = fuzz_function(fn, runs=runs, time=budget, crashes=crashes, exe=exe, **options)
        f = res.finding
        if f is not None:
            pytest.fail("attnfuzz: %s gives %s: bundle %s (attnfuzz show %s)%s"
                        % (f.who, f.kind, f.bundle, f.bundle, "\n" + f.error if f.error else ""), pytrace=False)
        return res.execs
    return fuzz
