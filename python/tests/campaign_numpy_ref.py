"""A campaign of attnfuzz against the numpy_ref worker: it must be clean (exit 0, no bundle)
and meet every layout (python/attnfuzz/layouts.ALL; the worker, numpy_ref_tally.py, counts
them). Usage: campaign_numpy_ref.py ATTNFUZZ [RUNS [SEEDS]]: RUNS cases (default 300) split
over SEEDS campaign seeds (default 1; seeds 3, 4, ...). Exits 77 (ctest: skipped) when this
attnfuzz has no worker: backend."""

import collections
import os
import subprocess
import sys
import tempfile
import time

import _util

from attnfuzz import layouts


def main():
    attnfuzz = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    seeds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    here = os.path.dirname(os.path.abspath(__file__))
    worker = "worker:%s %s" % (sys.executable, os.path.join(here, "numpy_ref_tally.py"))
    with tempfile.TemporaryDirectory() as tmp:
        crashes = os.path.join(tmp, "crashes")
        tally = os.path.join(tmp, "layouts.txt")
        env = dict(os.environ, PYTHONPATH=_util.PYDIR, AF_LAYOUT_TALLY=tally)
        failed = False
        t0 = time.time()
        for n in range(seeds):
            share = runs // seeds + (1 if n < runs % seeds else 0)
            cmd = [attnfuzz, "fuzz", "--backend", worker, "--runs", str(share), "--crashes", crashes,
                   "--no-minimize", "--max-findings", "5", "--quiet", "--seed", str(3 + n)]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
            err = p.stderr.lower()
            if p.returncode == 2 and "worker" in err and ("not in this build" in err or "unknown" in err):
                print("skipped: %s has no worker: backend (%s)" % (attnfuzz, p.stderr.strip()))
                return 77
            print("seed %d: %s" % (3 + n, (p.stdout[-1500:] + p.stderr[-1500:]).strip()))
            if p.returncode != 0:
                failed = True
                break
        found = sorted(os.listdir(crashes)) if os.path.isdir(crashes) else []
        per_tensor, per_case = collections.Counter(), 0
        if os.path.exists(tally):
            for line in open(tally):
                per_case += 1
                per_tensor.update(set(line.split()))
        print("%d cases in %.1fs; cases per layout (any of q/k/v): %s"
              % (per_case, time.time() - t0, ", ".join("%s %d" % (l, per_tensor[l]) for l in layouts.ALL)))
        if failed or found:
            for name in found[:5]:
                print("finding:", name)
                path = os.path.join(crashes, name, "stderr.txt")
                if os.path.exists(path):
                    print(open(path).read()[-1500:])
            print("FAIL: the numpy_ref worker is not clean (exit %d, %d bundles)" % (p.returncode, len(found)))
            return 1
        missing = [l for l in layouts.ALL if not per_tensor[l]]
        if missing:
            print("FAIL: the campaign met no case in layout(s) %s" % ", ".join(missing))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
