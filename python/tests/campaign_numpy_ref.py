"""A short campaign of attnfuzz against the numpy_ref worker: it must be clean (exit 0, no
bundle). Usage: campaign_numpy_ref.py ATTNFUZZ [RUNS]. Exits 77 (ctest: skipped) when
this attnfuzz has no worker: backend."""

import os
import subprocess
import sys
import tempfile

import _util


def main():
    attnfuzz = sys.argv[1]
    runs = sys.argv[2] if len(sys.argv) > 2 else "300"
    env = dict(os.environ, PYTHONPATH=_util.PYDIR)
    worker = "worker:%s -m attnfuzz.targets.numpy_ref" % sys.executable
    with tempfile.TemporaryDirectory() as crashes:
        cmd = [attnfuzz, "fuzz", "--backend", worker, "--runs", runs, "--crashes", crashes, "--no-minimize",
               "--max-findings", "5", "--quiet", "--seed", "3"]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
        err = p.stderr.lower()
        if p.returncode == 2 and "worker" in err and ("not in this build" in err or "unknown" in err):
            print("skipped: %s has no worker: backend (%s)" % (attnfuzz, p.stderr.strip()))
            return 77
        found = sorted(os.listdir(crashes))
        print(p.stdout[-3000:], p.stderr[-3000:])
        if p.returncode != 0 or found:
            for name in found[:5]:
                print("finding:", name)
                path = os.path.join(crashes, name, "stderr.txt")
                if os.path.exists(path):
                    print(open(path).read()[-1500:])
            print("FAIL: the numpy_ref worker is not clean (exit %d, %d bundles)" % (p.returncode, len(found)))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
