#!/usr/bin/env python3
"""Where a worker's time goes: the profiles that workers write when a campaign runs with
ATTNFUZZ_PROFILE=DIR (python/attnfuzz/targets/_base.py), as one table per worker: its
total time, then the functions with the most time of their own and the most time below
them.

    ATTNFUZZ_PROFILE=/tmp/prof build/attnfuzz fuzz --backend target:jax/xla --time 30
    python3 scripts/profile_workers.py /tmp/prof --top 15
"""
import argparse
import glob
import io
import os
import pstats
import sys


def table(path, top):
    st = pstats.Stats(path, stream=io.StringIO())
    total = st.total_tt
    out = ["== %s: %.2f s profiled" % (os.path.basename(path), total)]
    for key, title in (("tottime", "own time"), ("cumulative", "with callees")):
        out.append("-- by %s" % title)
        out.append("%10s %8s %6s  %s" % ("seconds", "calls", "share", "function"))
        rows = sorted(st.stats.items(), key=lambda kv: kv[1][2 if key == "tottime" else 3], reverse=True)
        for (fname, line, func), (cc, nc, tt, ct, _) in rows[:top]:
            sec = tt if key == "tottime" else ct
            where = "%s:%d" % (os.path.basename(fname), line) if line else fname
            out.append("%10.3f %8d %5.1f%%  %s (%s)" % (sec, nc, 100.0 * sec / max(total, 1e-9), func, where))
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="the ATTNFUZZ_PROFILE directory")
    ap.add_argument("--top", type=int, default=12, help="rows per table (default 12)")
    a = ap.parse_args(argv)
    files = sorted(glob.glob(os.path.join(a.dir, "*.prof")))
    if not files:
        sys.stderr.write("profile_workers.py: no .prof file in %s (a worker writes one when it ends "
                         "normally, after bye)\n" % a.dir)
        return 1
    for f in files:
        try:
            print(table(f, a.top))
        except Exception as e:  # noqa: BLE001 - one unreadable profile does not hide the rest
            print("== %s: unreadable: %s" % (os.path.basename(f), e))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
