#!/usr/bin/env python3
"""Shards against --jobs: how fast a campaign sharded into independent processes (`fuzz
--shard I/N --root`, as Slurm array tasks or Kubernetes pods run it) finds the six
seeded-bug mutants (docs/mutants.md), against one process with --jobs on the same
machine, and so whether finds per hour scale with the shards.

Each trial runs both set-ups with the same campaign seed (the order alternates between
trials), every mutant a backend of the same campaign:

    jobs:   attnfuzz fuzz --jobs J       --seed K --crashes DIR --stats FILE  MUTANTS
    shards: attnfuzz fuzz --shard I/N    --seed K --root ROOT  (N processes at once)  MUTANTS

and stops it once every mutant has a bundle (or after --budget seconds). A mutant's time
to bug is the age of its first bundle on disk (the directory's mtime, written after the
finding was minimized) since the set-up was launched; for the shards the earliest over
all of them, which is what `attnfuzz merge` keeps. Per mutant it prints k/N trials found,
the median and 90th percentile seconds (">" where it rests on trials that found nothing:
those count as the budget), then the time until all six were found and the executions
per second, and the verdict: shards at least as fast as --jobs when their median time to
all six is not above --jobs's. Each sharded trial is merged and checked: the merged
directory holds every mutant the shards found.

Standard library only. Example (the table in docs/campaigns-on-clusters.md):

    python3 scripts/bench_shards.py --trials 8 --budget 90 --shards 3 --jobs 2
"""
import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MUTANTS = ["scale_sqrt_q_only", "packed_fp16_overflow", "silent_tf32", "bshd_as_bhsd", "mhav2_concat",
           "causal_top_left"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def first_bundles(dirs):
    """mutant -> earliest bundle mtime over the crashes directories dirs."""
    first = {}
    for d in dirs:
        for b in glob.glob(os.path.join(d, "*", "case.json")):
            try:
                with open(b) as f:
                    who = json.load(f).get("who", "")
                t = os.stat(os.path.dirname(b)).st_mtime
            except (OSError, ValueError):
                continue  # being renamed: seen next time
            for m in MUTANTS:
                if "mutant:" + m in who.split(","):
                    first[m] = min(first.get(m, t), t)
    return first


def run_setup(cmds, crashes, budget):
    """Starts cmds at once, stops them (SIGINT) once every mutant has a bundle in the
    crashes directories or after budget seconds; returns (mutant -> seconds, wall)."""
    t0 = time.time()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in cmds]
    while True:
        time.sleep(0.2)
        found = first_bundles(crashes())
        if len(found) == len(MUTANTS) or time.time() - t0 > budget or all(p.poll() is not None for p in procs):
            break
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    wall = time.time() - t0
    return {m: t - t0 for m, t in first_bundles(crashes()).items() if t - t0 <= budget}, wall


def execs_of(stats_files):
    n = 0
    for s in stats_files:
        try:
            with open(s) as f:
                n += json.load(f)["execs"]
        except (OSError, ValueError, KeyError):
            pass
    return n


def stat_line(times, trials, budget):
    """k/N, median, p90 of times (the missing trials at the budget, marked >)."""
    k = len(times)
    full = sorted(times + [budget] * (trials - k))
    med = statistics.median(full)
    p90 = full[min(len(full) - 1, int(round(0.9 * (len(full) - 1))))]
    mark = lambda v: (">" if k < trials and v >= budget else "") + "%.1f" % v
    return "%d/%d" % (k, trials), mark(med), mark(p90), med


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnfuzz", default=os.path.join(REPO, "build", "attnfuzz"))
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--budget", type=float, default=90.0, help="seconds per set-up and trial at most")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write every trial's times here")
    a = ap.parse_args()
    af = os.path.abspath(a.attnfuzz)
    backends = [x for m in MUTANTS for x in ("--backend", "mutant:" + m)]
    work = tempfile.mkdtemp(prefix="af_bench_shards_")
    rows = {"jobs": [], "shards": []}
    try:
        for k in range(1, a.trials + 1):
            order = ["jobs", "shards"] if k % 2 else ["shards", "jobs"]
            for setup in order:
                d = os.path.join(work, "%s-%d" % (setup, k))
                seed = ["--seed", str(k), "--time", str(a.budget), "--quiet"]
                if setup == "jobs":
                    cmds = [[af, "fuzz", "--jobs", str(a.jobs), "--crashes", d + "/crashes", "--stats", d + "/stats.json"]
                            + seed + backends]
                    crashes = lambda d=d: [d + "/crashes"]
                    stats = lambda d=d: [d + "/stats.json"]
                else:
                    cmds = [[af, "fuzz", "--shard", "%d/%d" % (i, a.shards), "--root", d] + seed + backends
                            for i in range(a.shards)]
                    crashes = lambda d=d: glob.glob(d + "/shard-*/crashes")
                    stats = lambda d=d: glob.glob(d + "/shard-*/stats.json")
                times, wall = run_setup(cmds, crashes, a.budget)
                execs = execs_of(stats())
                if setup == "shards":
                    r = subprocess.run([af, "merge", "--quiet", d + "/merged", d], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True)
                    merged = first_bundles([d + "/merged/crashes"])
                    if r.returncode > 1 or set(merged) != set(first_bundles(crashes())):
                        sys.exit("bench_shards: trial %d: the merge lost a mutant (%s): %s" % (k, sorted(merged), r.stderr))
                rows[setup].append({"seed": k, "times": times, "wall": wall, "execs": execs})
                print("trial %d %-6s: %d/6 mutants in %5.1fs, %6d execs (%4.0f/s)%s" % (
                    k, setup, len(times), max(times.values()) if times else a.budget, execs, execs / wall,
                    "" if len(times) == len(MUTANTS) else "  missing: " + ",".join(m for m in MUTANTS if m not in times)),
                    file=sys.stderr)
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    jobs_name, shards_name = "1 process, --jobs %d" % a.jobs, "%d shards" % a.shards
    print("time to the first bundle of each mutant, seconds (%d trials, seeds 1-%d, budget %.0f s, %d CPUs)" % (
        a.trials, a.trials, a.budget, os.cpu_count() or 0))
    print("| mutant | %s: found | median | p90 | %s: found | median | p90 |" % (jobs_name, shards_name))
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for m in MUTANTS + ["all six"]:
        cells = []
        for setup in ("jobs", "shards"):
            if m == "all six":
                ts = [max(r["times"].values()) for r in rows[setup] if len(r["times"]) == len(MUTANTS)]
            else:
                ts = [r["times"][m] for r in rows[setup] if m in r["times"]]
            cells.append(stat_line(ts, a.trials, a.budget))
        print("| %s | %s | %s | %s | %s | %s | %s |" % ((m,) + cells[0][:3] + cells[1][:3]))
    rates = {s: statistics.median([r["execs"] / r["wall"] for r in rows[s]]) for s in rows}
    print("| execs/s (median) | | %.0f | | | %.0f | |" % (rates["jobs"], rates["shards"]))
    all6 = {s: stat_line([max(r["times"].values()) for r in rows[s] if len(r["times"]) == len(MUTANTS)], a.trials,
                         a.budget)[3] for s in rows}
    per_hour = {s: len(MUTANTS) / all6[s] * 3600 for s in rows}
    print("mutants found per hour (6 / median time to all six): %s %.0f, %s %.0f" % (
        jobs_name, per_hour["jobs"], shards_name, per_hour["shards"]))
    ok = all6["shards"] <= all6["jobs"]
    print("%s find the six mutants' bundles %s fast as %s (median time to all six: %.1f s against %.1f s)" % (
        shards_name, "at least as" if ok else "NOT as", jobs_name, all6["shards"], all6["jobs"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "trials": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
