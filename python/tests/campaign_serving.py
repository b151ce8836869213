"""A campaign of serving cases (fuzz --serving 1) against serving_mirror_worker.py: every
serving tensor attnfuzz sends (C, src/core/inputs_serving.c) must be what attnfuzz.serving
(Python) builds from the same case, and the Python reference on the gathered views must
agree with the C oracle: exit 0, no bundle, every combination of forms met.
Usage: campaign_serving.py ATTNFUZZ [RUNS]. Exits 77 when attnfuzz has no worker: backend."""

import collections
import os
import subprocess
import sys
import tempfile
import time

import _util

from attnfuzz import serving


def main():
    attnfuzz = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    here = os.path.dirname(os.path.abspath(__file__))
    worker = "worker:%s %s" % (sys.executable, os.path.join(here, "serving_mirror_worker.py"))
    with tempfile.TemporaryDirectory() as tmp:
        crashes = os.path.join(tmp, "crashes")
        tally = os.path.join(tmp, "forms.txt")
        env = dict(os.environ, PYTHONPATH=_util.PYDIR, AF_SERVING_TALLY=tally)
        t0 = time.time()
        cmd = [attnfuzz, "fuzz", "--backend", worker, "--serving", "1", "--runs", str(runs), "--crashes", crashes,
               "--no-minimize", "--max-findings", "5", "--quiet", "--seed", "11"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        err = p.stderr.lower()
        if p.returncode == 2 and "worker" in err and ("not in this build" in err or "unknown" in err):
            print("skipped: %s has no worker: backend" % attnfuzz)
            return 77
        print((p.stdout[-1500:] + p.stderr[-1500:]).strip())
        seen = collections.Counter(line.strip() for line in open(tally)) if os.path.exists(tally) else {}
        print("%d cases in %.1fs: %s" % (sum(seen.values()), time.time() - t0,
                                          ", ".join("%s %d" % kv for kv in sorted(seen.items()))))
        found = sorted(os.listdir(crashes)) if os.path.isdir(crashes) else []
        if p.returncode != 0 or found:
            for name in found[:5]:
                print("finding:", name)
                path = os.path.join(crashes, name, "stderr.txt")
                if os.path.exists(path):
                    print(open(path).read()[-1500:])
            print("FAIL: exit %d, %d bundles" % (p.returncode, len(found)))
            return 1
        combos = {" ".join(f for k, f in enumerate(serving.FORMS) if m >> k & 1) for m in range(1, 16)}
        missing = sorted(c for c in combos if not seen.get(" ".join(sorted(c.split())), 0))
        if missing:
            print("FAIL: no case of %s" % "; ".join(missing))
            return 1
        print("ok")
        return 0


if __name__ == "__main__":
    sys.exit(main())
