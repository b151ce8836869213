"""Which released version of a stack brought a bug, or fixed it:
python -m attnfuzz.bisect (BUNDLE | REPRO.py) [--package NAME] --versions A..B.

A bug is judged by its standalone repro script: the ones in corpus/findings/STACK/*.py, or
the one `python -m attnfuzz.repro` writes from a bundle. Such a script needs numpy and the
stack only, and its exit status says what it saw: 1 the bug shows, 0 it does not, 77 it
cannot run on this host (a CPU feature, a GPU); anything else (an import error, an API or
operator the version lacks: a traceback, whose exit status is 1 too; a crash, a timeout)
is an error and decides nothing.

The versions are the package's releases on the package registry (pre-releases with
--pre) between A and B inclusive, in release order; --versions may also list them
("2.11.0,2.13.0,2.15.0"). Each version is installed once, alone (`pip install --no-deps
--target`; --with NAME adds a package released in lockstep, jaxlib beside jax), into a
cache directory ($ATTNFUZZ_CACHE, default ~/.cache/attnfuzz, under bisect/PACKAGE/VERSION)
and put first on the script's PYTHONPATH, so the script runs on this environment's numpy and
the stack's other packages with that one version swapped in. --env VAR=VALUE sets a variable
for the runs (a torch release finds this environment's CUDA libraries through
LD_LIBRARY_PATH when their layout differs from the one it was built against).
Both ends are run first; when they agree the range holds no change and that is the answer.
Otherwise the change is bisected (each step halves the range; a version in error is
stepped over to its nearest neighbour that decides), assuming one change in the range, and
the answer is the last version on each side: "bug since 2.15.0 (last good 2.14.0)" or
"fixed in 1.26.0 (last bad 1.25.1)". Every version run is printed with its verdict and the
script's last line.

Exit status: 0 a change was found, 1 none in the range (both ends agree), 2 usage, an
install that fails at an end, or no verdict (errors everywhere)."""

import argparse
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

from attnfuzz import known

BAD, GOOD, SKIP, ERROR = "bug", "good", "skip", "error"


def cache_dir():
    base = os.environ.get("ATTNFUZZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "attnfuzz")
    return os.path.join(base, "bisect")


def _is_pre(v):
    return bool(re.search(r"(a|b|rc|dev|alpha|beta)\d*", v.split("+")[0], re.I))


def registry_versions(package, pre=False, index="https://pypi.org/pypi"):
    """The package's releases that hold a file, oldest first (release numbers order them)."""
    with urllib.request.urlopen("%s/%s/json" % (index, package), timeout=60) as r:
        data = json.load(r)
    out = [v for v, files in data.get("releases", {}).items()
           if files and known._release(v) and (pre or not _is_pre(v))
           and not all(f.get("yanked") for f in files)]
    return sorted(out, key=lambda v: (known._release(v), v))


def pick(versions, spec):
    """The versions of spec: "A..B" (inclusive, either end may be empty) or "A,B,C"."""
    if ".." in spec:
        lo, hi = spec.split("..", 1)
        lo_r, hi_r = known._release(lo) if lo else (), known._release(hi) if hi else ()
        return [v for v in versions if (not lo_r or known._cmp(known._release(v), lo_r) >= 0)
                and (not hi_r or known._cmp(known._release(v), hi_r) <= 0)]
    want = [s.strip() for s in spec.split(",") if s.strip()]
    return sorted(want, key=lambda v: (known._release(v), v))


def env_version(name, python=sys.executable):
    """The version of the distribution name that python's environment has installed, or None."""
    p = subprocess.run([python, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", name],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
    return p.stdout.strip() or None if p.returncode == 0 else None


def install(package, version, python=sys.executable, also=()):
    """The directory holding package==version alone, with each package of also at the same
    version (jaxlib beside jax), installed the first time (an empty one where python's
    environment has that version of each already); or raises RuntimeError with pip's last
    lines."""
    if all(env_version(name, python) == version for name in (package,) + tuple(also)):
        # the environment has this version already: the script runs on it as installed
        d = os.path.join(cache_dir(), "as-installed")
        os.makedirs(d, exist_ok=True)
        return d
    d = os.path.join(cache_dir(), "+".join((package,) + tuple(also)), version)
    done = os.path.join(d, ".attnfuzz-installed")
    if os.path.exists(done):
        return d
    os.makedirs(os.path.dirname(d), exist_ok=True)
    with open(d + ".lock", "w") as lock:   # two bisections installing one version: one waits
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(done):
            _install_into(d, package, version, python, also)
    return d


def _install_into(d, package, version, python, also):
    done = os.path.join(d, ".attnfuzz-installed")
    tmp = d + ".partial"
    subprocess.run(["rm", "-rf", tmp], check=False)
    p = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--only-binary=:all:", "--target", tmp]
                       + ["%s==%s" % (name, version) for name in (package,) + tuple(also)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if p.returncode != 0:
        subprocess.run(["rm", "-rf", tmp], check=False)
        tail = " | ".join(l.strip() for l in p.stdout.strip().splitlines()[-2:])
        raise RuntimeError("pip install %s==%s: %s" % ("+".join((package,) + tuple(also)), version,
                                                         tail or "exit %d" % p.returncode))
    subprocess.run(["rm", "-rf", d], check=False)
    os.rename(tmp, d)
    open(done, "w").close()


def run_script(script, site, python=sys.executable, timeout=600, extra_env=None):
    """(verdict, last line of the script's output) with the package directory site first
    on PYTHONPATH (and extra_env's variables set)."""
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        p = subprocess.run([python, script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ERROR, "timeout after %d s" % timeout
    # progress bars write carriage returns: a line is what the last one left
    lines = [l.split("\r")[-1].strip() for l in p.stdout.split("\n")]
    lines = [l for l in lines if l]
    last = lines[-1] if lines else ""
    verdict = {0: GOOD, 1: BAD, 77: SKIP}.get(p.returncode, ERROR)
    if "Traceback (most recent call last)" in p.stdout:
        verdict = ERROR  # an uncaught exception exits 1 too: that is no verdict
    if verdict == ERROR:
        last = "exit %d: %s" % (p.returncode, last)
    return verdict, last[:200]


class Bisect:
    """The bisection of script over versions; evaluate(v) installs and runs (memoized)."""

    def __init__(self, script, package, versions, python=sys.executable, timeout=600, out=sys.stdout, env=None,
                 also=()):
        self.script, self.package, self.versions, self.also = script, package, versions, tuple(also)
        self.python, self.timeout, self.out, self.env = python, timeout, out, env
        self.seen = {}

    def evaluate(self, i):
        v = self.versions[i]
        if v not in self.seen:
            try:
                site = install(self.package, v, self.python, self.also)
                self.seen[v] = run_script(self.script, site, self.python, self.timeout, self.env)
            except RuntimeError as e:
                self.seen[v] = (ERROR, str(e)[:200])
            if self.out:
                print("  %-14s %-5s  %s" % (v, self.seen[v][0], self.seen[v][1]), file=self.out, flush=True)
        return self.seen[v][0]

    def deciding(self, i, lo, hi):
        """The verdict at i, or, when i errs or skips, at the nearest index in (lo, hi) that
        decides: (index, verdict), or (None, None)."""
        for d in range(0, hi - lo):
            for j in (i - d, i + d) if d else (i,):
                if lo < j < hi:
                    v = self.evaluate(j)
                    if v in (BAD, GOOD):
                        return j, v
        return None, None

    def run(self):
        """A dict: the ends' verdicts and, when they differ, the boundary."""
        n = len(self.versions)
        lo, hi = 0, n - 1
        # the ends: the first and last versions that decide
        a = b = None
        for i in range(n):
            if self.evaluate(i) in (BAD, GOOD):
                lo, a = i, self.seen[self.versions[i]][0]
                break
        for i in range(n - 1, lo, -1):
            if self.evaluate(i) in (BAD, GOOD):
                hi, b = i, self.seen[self.versions[i]][0]
                break
        res = {"package": self.package, "versions": self.versions, "runs": {v: list(r) for v, r in self.seen.items()}}
        if a is None:
            res["result"] = "no version decides (each errs or skips)"
            return res
        if b is None or a == b:
            res.update(result="no change: %s from %s to %s" % (a, self.versions[lo], self.versions[hi if b else lo]),
                       change=False, state=a)
            return res
        while hi - lo > 1:
            mid, v = self.deciding((lo + hi) // 2, lo, hi)
            if mid is None:
                break
            if v == a:
                lo = mid
            else:
                hi = mid
        last, first = self.versions[lo], self.versions[hi]
        gap = hi - lo - 1
        between = " (%d version%s between decide nothing)" % (gap, "" if gap == 1 else "s") if gap else ""
        if a == GOOD:
            res.update(result="bug since %s (last good %s)%s" % (first, last, between), first_bad=first, last_good=last)
        else:
            res.update(result="fixed in %s (last bad %s)%s" % (first, last, between), first_good=first, last_bad=last)
        res["change"] = True
        res["runs"] = {v: list(r) for v, r in self.seen.items()}
        return res


def script_of(path, workdir):
    """The repro script of path: itself when it is a .py file, else the one attnfuzz.repro
    writes from the bundle."""
    if os.path.isfile(path) and path.endswith(".py"):
        return os.path.abspath(path)
    out = os.path.join(workdir, "repro.py")
    p = subprocess.run([sys.executable, "-m", "attnfuzz.repro", path, "-o", out], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("%s: no repro script: %s" % (path, p.stdout.strip()[-300:]))
    return out


def package_of(path):
    """The registry package a bundle's stack is versioned by (its Stack's version_of, as a
    pip requirement of that stack), or None."""
    case_json = os.path.join(path, "case.json")
    if not os.path.isfile(case_json):
        return None
    with open(case_json) as f:
        who = json.load(f).get("who") or ""
    m = re.match(r"target:(\w+)/", who)
    if not m:
        return None
    import importlib
    stack = importlib.import_module("attnfuzz.targets." + m.group(1)).STACK
    names = [re.split(r"[=<>!~\[ ]", r, 1)[0] for r in stack.pip]
    norm = lambda s: s.lower().replace("-", "_")  # noqa: E731
    for n in names:
        if norm(n) == norm(stack.version_of or ""):
            return n
    return names[0] if len(names) == 1 else None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="attnfuzz bisect", description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="a bundle directory or a repro script (.py)")
    ap.add_argument("--package", help="the registry package to bisect (default: the bundle's stack's)")
    ap.add_argument("--versions", required=True, help="A..B (inclusive; an end may be left empty) or A,B,C")
    ap.add_argument("--pre", action="store_true", help="include pre-releases")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a run of the script may take (600)")
    ap.add_argument("--json", action="store_true", help="the result as JSON on stdout (the runs go to stderr)")
    ap.add_argument("--with", dest="also", action="append", default=[], metavar="NAME",
                    help="a package installed at the same version beside it (repeatable): jaxlib for jax")
    ap.add_argument("--env", action="append", default=[], metavar="VAR=VALUE",
                    help="set for the script's runs (repeatable), e.g. LD_LIBRARY_PATH for a version whose "
                         "CUDA libraries this environment holds elsewhere")
    a = ap.parse_args(argv)
    env = {}
    for item in a.env:
        if "=" not in item:
            print("attnfuzz bisect: --env %s: want VAR=VALUE" % item, file=sys.stderr)
            return 2
        k, v = item.split("=", 1)
        env[k] = v
    package = a.package or package_of(a.target)
    if not package:
        print("attnfuzz bisect: %s: say which package (--package NAME)" % a.target, file=sys.stderr)
        return 2
    try:
        versions = pick(registry_versions(package, a.pre) if ".." in a.versions else [], a.versions)
    except OSError as e:
        print("attnfuzz bisect: %s: the registry's list of releases cannot be read: %s" % (package, e), file=sys.stderr)
        return 2
    if len(versions) < 2:
        print("attnfuzz bisect: %s %s: %d release(s) in that range, want two or more"
              % (package, a.versions, len(versions)), file=sys.stderr)
        return 2
    log = sys.stderr if a.json else sys.stdout
    with tempfile.TemporaryDirectory(prefix="af_bisect_") as tmp:
        try:
            script = script_of(a.target, tmp)
        except RuntimeError as e:
            print("attnfuzz bisect: %s" % e, file=sys.stderr)
            return 2
        print("attnfuzz bisect: %s over %d releases of %s (%s .. %s)" % (os.path.basename(a.target.rstrip("/")),
              len(versions), package, versions[0], versions[-1]), file=log, flush=True)
        res = Bisect(script, package, versions, timeout=a.timeout, out=log, env=env, also=a.also).run()
    if a.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        print("%s: %s" % (package, res["result"]))
    if "change" not in res:
        return 2
    return 0 if res["change"] else 1


if __name__ == "__main__":
    sys.exit(main())
