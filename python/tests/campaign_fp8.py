"""FP8 cases through the worker protocol: a campaign of FP8 cases (fuzz --fp8 1) against
fp8_check_worker.py (the Python reference on the float8 views the worker kit builds) must be
clean and meet both formats and the FP8 KV-cache form (fp8.kv_only); the same worker forgetting the descales must be found.
Usage: campaign_fp8.py ATTNFUZZ [RUNS]. Exits 77 (ctest: skipped) without a worker: backend."""

import collections
import os
import subprocess
import sys
import tempfile

import _util


def campaign(attnfuzz, tmp, runs, wrong):
    here = os.path.dirname(os.path.abspath(__file__))
    worker = "worker:%s %s%s" % (sys.executable, os.path.join(here, "fp8_check_worker.py"),
                                 " no_descale" if wrong else "")
    crashes = os.path.join(tmp, "crashes-wrong" if wrong else "crashes")
    tally = os.path.join(tmp, "tally-wrong.txt" if wrong else "tally.txt")
    env = dict(os.environ, PYTHONPATH=_util.PYDIR, AF_FP8_TALLY=tally)
    cmd = [attnfuzz, "fuzz", "--backend", worker, "--fp8", "1", "--runs", str(runs), "--crashes", crashes,
           "--no-minimize", "--max-findings", "1" if wrong else "5", "--quiet", "--seed", "5", "--no-known"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    formats = collections.Counter(open(tally).read().split()) if os.path.exists(tally) else collections.Counter()
    found = sorted(os.listdir(crashes)) if os.path.isdir(crashes) else []
    return p, formats, found


def main():
    attnfuzz = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    with tempfile.TemporaryDirectory() as tmp:
        p, formats, found = campaign(attnfuzz, tmp, runs, False)
        err = p.stderr.lower()
        if p.returncode == 2 and "worker" in err and ("not in this build" in err or "unknown" in err):
            print("skipped: %s has no worker: backend (%s)" % (attnfuzz, p.stderr.strip()))
            return 77
        print("%s; cases per format: %s" % ((p.stdout[-800:] + p.stderr[-800:]).strip(), dict(formats)))
        if p.returncode != 0 or found:
            for name in found[:5]:
                print("finding:", name)
                path = os.path.join(tmp, "crashes", name, "stderr.txt")
                if os.path.exists(path):
                    print(open(path).read()[-1500:])
            print("FAIL: FP8 cases through the worker are not clean (exit %d, %d bundles)" % (p.returncode, len(found)))
            return 1
        kv = formats.get("e4m3_kv", 0) + formats.get("e5m2_kv", 0)
        if min(formats.get("e4m3", 0), formats.get("e5m2", 0), kv) < runs // 10:
            print("FAIL: the campaign met too few cases of a format: %s" % dict(formats))
            return 1
        p, formats, found = campaign(attnfuzz, tmp, 200, True)
        print("the worker without descales: %s" % ", ".join(found) or "nothing found")
        if not found:
            print("FAIL: a worker that forgets the descales went unnoticed in 200 FP8 cases")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
