"""FP8 SDPA's roundings through the worker protocol: campaigns of FP8 cases (fuzz --fp8 1)
against fp8_probs_worker.py, cuDNN's sdpa_fp8 emulated in numpy (P in the FP8 format before
P @ V; with fp8_out, O in it too), must be clean while the worker declares those roundings
(conventions fp8_probs, fp8_out "v_amax"), and must meet both formats emulated; the same
worker undeclared must be found (diverge): the declaration is what the oracle's tolerance
follows, nobody else's. Usage: campaign_fp8_probs.py ATTNFUZZ [RUNS]. Exits 77 (ctest:
skipped) without a worker: backend."""

import collections
import os
import subprocess
import sys
import tempfile

import _util


def campaign(attnfuzz, tmp, runs, args, seed):
    here = os.path.dirname(os.path.abspath(__file__))
    tag = "-".join(args) or "plain"
    worker = "worker:%s %s %s" % (sys.executable, os.path.join(here, "fp8_probs_worker.py"), " ".join(args))
    crashes = os.path.join(tmp, "crashes-" + tag)
    tally = os.path.join(tmp, "tally-%s.txt" % tag)
    env = dict(os.environ, PYTHONPATH=_util.PYDIR, AF_FP8_TALLY=tally)
    cmd = [attnfuzz, "fuzz", "--backend", worker, "--fp8", "1", "--runs", str(runs), "--crashes", crashes,
           "--no-minimize", "--max-findings", "5", "--quiet", "--seed", str(seed), "--no-known"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    kinds = collections.Counter(open(tally).read().split()) if os.path.exists(tally) else collections.Counter()
    found = sorted(os.listdir(crashes)) if os.path.isdir(crashes) else []
    return p, kinds, found, crashes


def main():
    attnfuzz = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    with tempfile.TemporaryDirectory() as tmp:
        for args, seed in ((["fp8_out"], 7), ([], 8)):
            p, kinds, found, crashes = campaign(attnfuzz, tmp, runs, args, seed)
            err = p.stderr.lower()
            if p.returncode == 2 and "worker" in err and ("not in this build" in err or "unknown" in err):
                print("skipped: %s has no worker: backend (%s)" % (attnfuzz, p.stderr.strip()))
                return 77
            print("declared %s: %s; cases: %s" % (args, (p.stdout[-600:] + p.stderr[-600:]).strip(), dict(kinds)))
            if p.returncode != 0 or found:
                for name in found[:5]:
                    print("finding:", name)
                print("FAIL: the emulated FP8 pipeline, its roundings declared, is not clean (exit %d, %d bundles)"
                      % (p.returncode, len(found)))
                return 1
            if min(kinds.get("emulated_e4m3", 0), kinds.get("emulated_e5m2", 0)) < runs // 10:
                print("FAIL: too few emulated cases of a format: %s" % dict(kinds))
                return 1
        p, kinds, found, crashes = campaign(attnfuzz, tmp, runs // 2, ["fp8_out", "undeclared"], 9)
        diverge = [n for n in found if "diverge" in n]
        print("undeclared: %s" % (", ".join(found) or "nothing found"))
        if not diverge:
            print("FAIL: the FP8 pipeline's roundings, undeclared, went unnoticed in %d FP8 cases" % (runs // 2))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
