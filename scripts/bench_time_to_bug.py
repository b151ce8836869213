#!/usr/bin/env python3
"""Time-to-bug benchmark: how many executions and seconds attnfuzz needs to find each
seeded-bug mutant (docs/design.md section 8, docs/mutants.md), per case strategy. The
forward mutants and the backward ones (bwd_*: found through a gradient, on the backward
cases a campaign draws for a backend that declares the backward capability, a third of
them by default), the serving ones (campaigns with --serving) and the FP8 ones (campaigns
with --fp8) get a table each.

For each mutant and strategy it runs N independent campaigns (seeds 1..N, the same seeds
for every cell), each

    attnfuzz fuzz --backend mutant:NAME --strategy S --max-findings 1 --time BUDGET
                  --seed K --crashes TMPDIR --stats TMP.json --quiet

and reads the first finding's first_exec and first_time from the stats file. A trial
that finds nothing within the budget is censored: its time is the budget and its execs
the executions it ran. Per cell it prints k/N found, the median and 90th percentile of
execs and seconds (">" marks a statistic that rests on censored trials), the median
speed-up over the strategy (median time / generator median time) and a two-sided
Mann-Whitney U p-value of the strategy's times against the generator's.

--require-execs N (what the tests use) fails unless every trial found its mutant within N
executions; for a seed that count does not depend on the machine or its load (the cases
come from the seeded generator, one execution each), unlike --require-within S, a bound
on seconds that only a quiet machine keeps.

Standard library only. Example:

    python3 scripts/bench_time_to_bug.py --trials 20 --budget 60 \\
        --strategy-budget grid=10,bytes=10 --json ttb.json
"""

import argparse
import concurrent.futures
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

FORWARD_MUTANTS = [
    "scale_sqrt_q_only",
    "packed_fp16_overflow",
    "silent_tf32",
    "bshd_as_bhsd",
    "mhav2_concat",
    "causal_top_left",
]
BACKWARD_MUTANTS = [
    "bwd_dq_no_scale",
    "bwd_gqa_no_sum",
    "bwd_dropout_not_reapplied",
    "bwd_softcap_no_derivative",
    "bwd_causal_missing_in_ds",
    "bwd_tail_tile_past_sk",
    "bwd_lse_nan",
]
# The serving mutants show only on serving cases, which the built-ins run when asked: their
# campaigns draw half of the cases in a serving form (fuzz --serving SERVING_SHARE).
SERVING_MUTANTS = [
    "splitkv_batch_stride",
    "block_table_off_by_one",
    "alibi_off_by_one",
    "sink_ignored",
    "sink_in_numerator",
    "zero_len_nan",
    "segment_leak",
    "page_tail_read",
]
SERVING_SHARE = 0.5
# The FP8 mutants show only on FP8 cases, which the built-ins run when asked: their campaigns
# draw half of the cases with FP8 inputs (fuzz --fp8 FP8_SHARE).
FP8_MUTANTS = [
    "fp8_descale_twice",
    "fp8_e5m2_as_e4m3",
]
FP8_SHARE = 0.5
# The mutants of the checks beyond one output: each needs its check, with the campaign's
# defaults otherwise (racy_sum: the determinism check's default share of executions;
# batch_split_kv: the batch_split relation, which a --backend campaign runs only when asked;
# write_past_out: the guard bands, always on).
CHECK_MUTANTS = {
    "racy_sum": [],
    "batch_split_kv": ["--relation", "batch_split"],
    "write_past_out": [],
}
# The softmax-statistics mutant: the reference's output, its statistics bent (found through
# the lse a built-in returns on every forward case).
LSE_MUTANTS = [
    "lse_base2",
]
MUTANTS = FORWARD_MUTANTS + BACKWARD_MUTANTS + SERVING_MUTANTS + FP8_MUTANTS + list(CHECK_MUTANTS) + LSE_MUTANTS
STRATEGIES = ["generator", "grid", "bytes"]
LIBFUZZER = "libfuzzer"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- statistics ------------------------------------------------------------------------


def mann_whitney_u(x, y):
    """Two-sided Mann-Whitney U test of samples x and y, normal approximation with tie
    correction and continuity correction (as scipy.stats.mannwhitneyu(..., method=
    "asymptotic", use_continuity=True)). Returns (U of x, z, p). Ranks are averaged over
    ties; the variance is n1 n2 / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1))). When every
    value is tied the test has nothing to say: p = 1."""
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan"), float("nan")
    pooled = sorted([(v, 0) for v in x] + [(v, 1) for v in y], key=lambda t: t[0])
    n = n1 + n2
    ranks = [0.0] * n
    ties = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        r = (i + j) / 2.0 + 1.0  # ranks i+1 .. j+1 averaged
        for k in range(i, j + 1):
            ranks[k] = r
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    r1 = sum(r for r, (_, g) in zip(ranks, pooled) if g == 0)
    u1 = r1 - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u1, 0.0, 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    z = max(z, 0.0)
    p = math.erfc(z / math.sqrt(2.0))
    return u1, math.copysign(z, u1 - mu), min(1.0, p)


def quantile(pairs, q):
    """Linear-interpolation quantile (numpy's default) of (value, censored) pairs. Returns
    (value, censored): censored when an order statistic it rests on is censored, so the
    true quantile is at least the value."""
    if not pairs:
        return float("nan"), False
    s = sorted(pairs, key=lambda t: (t[0], t[1]))
    h = (len(s) - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, len(s) - 1)
    w = h - lo
    val = s[lo][0] + w * (s[hi][0] - s[lo][0])
    cens = s[lo][1] or (w > 0 and s[hi][1])
    return val, cens


def self_test():
    """Checks the statistics against values worked out by hand."""
    # No ties: x ranks 1,2,3,4,6 -> R1 = 16, U1 = 1; n1 = 5, n2 = 6, mu = 15,
    # var = 30/12 * 12 = 30, z = (14 - 0.5) / sqrt(30) = 2.4648, p = 0.01371.
    u, _, p = mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 4.5])
    assert u == 1.0, u
    assert abs(p - math.erfc((14 - 0.5) / math.sqrt(30) / math.sqrt(2))) < 1e-12, p
    # Ties (censored values at the budget): x all tied at 10 and y all 10: p = 1.
    assert mann_whitney_u([10.0] * 5, [10.0] * 7)[2] == 1.0
    # Ties across groups: x = [1,1,2], y = [1,3,3]; ranks 2,2,4 | 2,5.5,5.5 -> R1 = 8, U1 = 2.
    # ties: t=3 (24), t=2 (6) -> var = 9/12 * (7 - 30/30) = 4.5; z = (|2-4.5|-0.5)/sqrt(4.5).
    u, _, p = mann_whitney_u([1, 1, 2], [1, 3, 3])
    assert u == 2.0, u
    assert abs(p - math.erfc(2.0 / math.sqrt(4.5) / math.sqrt(2))) < 1e-12, p
    # Quantiles: numpy.percentile([1,2,3,4], 90) = 3.7; median of 1..4 = 2.5.
    assert abs(quantile([(v, False) for v in [4, 1, 3, 2]], 0.9)[0] - 3.7) < 1e-12
    assert quantile([(v, False) for v in [1, 2, 3, 4]], 0.5) == (2.5, False)
    assert quantile([(1, False), (2, False), (10, True)], 0.5) == (2, False)
    assert quantile([(1, False), (10, True), (10, True)], 0.5) == (10, True)
    assert quantile([(1, False), (2, False), (10, True), (10, True)], 0.5) == (6, True)
    print("self-test passed")


# --- running trials --------------------------------------------------------------------


def blas_env():
    """OpenBLAS picks generic kernels on CPUs newer than it knows; the CLI fixes that by
    re-executing itself, which setting the variable here saves (see backend.h)."""
    env = dict(os.environ)
    if "OPENBLAS_CORETYPE" not in env:
        try:
            with open("/proc/cpuinfo") as f:
                info = f.read(16384)
            if "avx512bw" in info:
                env["OPENBLAS_CORETYPE"] = "SkylakeX"
            elif "avx2" in info:
                env["OPENBLAS_CORETYPE"] = "Haswell"
        except OSError:
            pass
    return env


def find_attnfuzz():
    if os.environ.get("ATTNFUZZ"):
        return os.environ["ATTNFUZZ"]
    cands = [os.path.join(REPO, "build", "attnfuzz")]
    try:
        cands += sorted(
            (os.path.join(REPO, d, "attnfuzz") for d in os.listdir(REPO) if d.startswith("build")),
            key=lambda p: -os.path.getmtime(p) if os.path.exists(p) else 0,
        )
    except OSError:
        pass
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("attnfuzz") or cands[0]


def kill_after(budget):
    """Seconds after which a trial is stopped (and censored)."""
    return budget * 1.5 + 30


def run_attnfuzz_trial(exe, mutant, strategy, budget, seed, env, keep_dir, runs=None):
    tmp = tempfile.mkdtemp(prefix="ttb-%s-%s-%d-" % (mutant, strategy, seed), dir=keep_dir)
    stats_path = os.path.join(tmp, "stats.json")
    crashes = os.path.join(tmp, "crashes")
    cmd = [exe, "fuzz", "--backend", "mutant:" + mutant, "--strategy", strategy, "--max-findings", "1",
           "--time", "%g" % budget, "--seed", str(seed), "--crashes", crashes, "--stats", stats_path, "--quiet"]
    if mutant in SERVING_MUTANTS:
        cmd += ["--serving", "%g" % SERVING_SHARE]
    if mutant in FP8_MUTANTS:
        cmd += ["--fp8", "%g" % FP8_SHARE]
    cmd += CHECK_MUTANTS.get(mutant, [])
    if runs:
        cmd += ["--runs", str(runs)]  # --require-execs: no need to run past the bound
    trial = {"mutant": mutant, "strategy": strategy, "seed": seed, "budget": budget,
             "command": shlex.join(cmd), "found": False, "censored": True, "error": None}
    t0 = time.monotonic()
    try:
        # The campaign checks its clock between executions, and a random-bytes case can take
        # minutes (the baselines cap no case's flops). Past the budget plus slack the trial
        # is stopped; it has found nothing within the budget, so it is censored like any
        # other (what it had done is in the stats it writes every second).
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                              timeout=kill_after(budget))
        trial["rc"] = proc.returncode
        if proc.returncode not in (0, 1):
            trial["error"] = "exit %d: %s" % (proc.returncode, proc.stderr.decode(errors="replace")[-500:])
    except subprocess.TimeoutExpired:
        trial["rc"] = None
        trial["killed"] = "stopped after %gs, inside one execution" % kill_after(budget)
    trial["wall"] = time.monotonic() - t0
    stats = None
    try:
        with open(stats_path) as f:
            stats = json.load(f)
    except (OSError, ValueError) as e:
        if not trial["error"]:
            trial["error"] = "no stats: %s" % e
    if stats is not None:
        trial["execs_run"] = stats.get("execs", 0)
        trial["elapsed"] = stats.get("elapsed", 0.0)
        if trial.get("killed"):
            trial["elapsed"] = trial["wall"]
        want = "mutant:" + mutant
        # the mutant's own check, or a check of it (determinism@mutant:X, batch_split@mutant:X)
        def mine(s):
            return s.get("who") == want or s.get("who", "").endswith("@" + want)
        sigs = [s for s in stats.get("signatures", []) if mine(s)]
        other = [s for s in stats.get("signatures", []) if not mine(s)]
        if other:
            trial["other_signatures"] = other
        if sigs:
            first = min(sigs, key=lambda s: s["first_exec"])
            trial["kind"] = first["kind"]
            trial["first_exec"] = first["first_exec"]
            trial["first_time"] = first["first_time"]
            if first["first_time"] <= budget:
                trial["found"] = True
                trial["censored"] = False
    if trial["found"]:
        trial["time"] = trial["first_time"]
        trial["execs"] = trial["first_exec"]
        # With --max-findings 1 the campaign stops right after the finding execution (and
        # its bundle), so its elapsed time bounds the time to the end of that execution;
        # first_time is taken when the finding execution starts (see docs/mutants.md).
        trial["time_end"] = min(trial["elapsed"], float(budget))
    else:
        trial["time"] = float(budget)
        trial["time_end"] = float(budget)
        trial["execs"] = trial.get("execs_run", 0)
    if not keep_dir:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        trial["dir"] = tmp
    return trial


_LF_EXECS = re.compile(r"^#(\d+)\s")
_LF_STAT = re.compile(r"stat::number_of_executed_units:\s*(\d+)")


def run_libfuzzer_trial(exe, mutant, budget, seed, env, keep_dir):
    """A libFuzzer harness built from fuzz/ that reads ATTNFUZZ_BACKENDS and aborts on the
    first finding when ATTNFUZZ_ABORT=1: the time to its first crash (wall clock from the
    process start, so it includes start-up), execs from its final stats."""
    tmp = tempfile.mkdtemp(prefix="ttb-%s-libfuzzer-%d-" % (mutant, seed), dir=keep_dir)
    corpus = os.path.join(tmp, "corpus")
    os.mkdir(corpus)
    cmd = [exe, "-max_total_time=%d" % max(1, int(math.ceil(budget))), "-seed=%d" % seed,
           "-artifact_prefix=" + tmp + "/", "-print_final_stats=1", corpus]
    e = dict(env)
    e["ATTNFUZZ_BACKENDS"] = "mutant:" + mutant
    e["ATTNFUZZ_ABORT"] = "1"
    trial = {"mutant": mutant, "strategy": LIBFUZZER, "seed": seed, "budget": budget,
             "command": "ATTNFUZZ_BACKENDS=mutant:%s ATTNFUZZ_ABORT=1 %s" % (mutant, shlex.join(cmd)),
             "found": False, "censored": True, "error": None}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e,
                              timeout=kill_after(budget))
        wall = time.monotonic() - t0
        trial["rc"] = proc.returncode
        log = proc.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        wall = time.monotonic() - t0
        trial["rc"] = None
        log = ""
        trial["killed"] = "stopped after %gs" % kill_after(budget)
    trial["wall"] = wall
    execs = 0
    for line in log.splitlines():
        m = _LF_STAT.search(line) or _LF_EXECS.match(line)
        if m:
            execs = max(execs, int(m.group(1)))
    crashed = any(n.startswith(("crash-", "oom-", "timeout-")) for n in os.listdir(tmp))
    trial["execs_run"] = execs
    if crashed and wall <= budget:
        trial.update(found=True, censored=False, time=wall, time_end=wall, execs=execs, kind="crash")
    else:
        trial.update(time=float(budget), time_end=float(budget), execs=execs)
        if trial["rc"] not in (0, None) and not crashed and not trial["error"]:
            trial["error"] = "exit %s without an artifact: %s" % (trial["rc"], log[-500:])
    if not keep_dir:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        trial["dir"] = tmp
    return trial


# --- summary ---------------------------------------------------------------------------


def summarize(trials, mutants, strategies):
    cells = {}
    for t in trials:
        cells.setdefault((t["mutant"], t["strategy"]), []).append(t)
    out = []
    for m in mutants:
        gen = [t for t in cells.get((m, "generator"), []) if not t.get("error")]
        for s in strategies:
            ts = [t for t in cells.get((m, s), []) if not t.get("error")]
            if not ts and not cells.get((m, s)):
                continue
            errors = len(cells.get((m, s), [])) - len(ts)
            budget = max((t["budget"] for t in ts), default=float("nan"))
            tpairs = [(t["time"], t["censored"]) for t in ts]
            epairs = [(t["execs"], t["censored"]) for t in ts]
            row = {
                "mutant": m,
                "strategy": s,
                "budget": budget,
                "trials": len(ts),
                "errors": errors,
                "found": sum(1 for t in ts if t["found"]),
                "kinds": sorted({t["kind"] for t in ts if t["found"]}),
                "median_execs": quantile(epairs, 0.5),
                "p90_execs": quantile(epairs, 0.9),
                "median_time": quantile(tpairs, 0.5),
                "p90_time": quantile(tpairs, 0.9),
                "median_time_end": quantile([(t.get("time_end", t["time"]), t["censored"]) for t in ts], 0.5),
                "p_value": None,
                "speedup": None,
            }
            if s != "generator" and gen and ts:
                # Censor both samples at the smaller budget so that a generator trial and a
                # baseline trial are ranked on the same scale.
                cap = min(budget, max(t["budget"] for t in gen))
                u, z, p = mann_whitney_u([min(t["time"], cap) for t in ts], [min(t["time"], cap) for t in gen])
                row["p_value"] = p
                row["mwu"] = {"U": u, "z": z, "censored_at": cap}
                gmed, gcens = quantile([(t["time"], t["censored"]) for t in gen], 0.5)
                smed, scens = row["median_time"]
                if gmed > 0 and not gcens:
                    row["speedup"] = (smed / gmed, scens)
            out.append(row)
    return out


def fmt_num(v, cens=False, digits=3):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    s = ("%.*g" % (digits, v)) if isinstance(v, float) else str(v)
    if isinstance(v, float) and abs(v) >= 10 ** digits:
        s = "%.0f" % v
    return (">" if cens else "") + s


def fmt_p(p):
    if p is None:
        return "-"
    return "%.2g" % p if p >= 1e-4 else "%.1e" % p


def table(rows):
    head = ["mutant", "strategy", "budget", "found", "med execs", "p90 execs", "med s", "p90 s", "med end s", "x gen", "p (MWU)",
            "kinds"]
    lines = []
    for r in rows:
        sp = r["speedup"]
        lines.append([
            r["mutant"],
            r["strategy"],
            "%gs" % r["budget"],
            "%d/%d" % (r["found"], r["trials"]) + ("" if not r["errors"] else " (%d err)" % r["errors"]),
            fmt_num(float(r["median_execs"][0]), r["median_execs"][1]),
            fmt_num(float(r["p90_execs"][0]), r["p90_execs"][1]),
            fmt_num(r["median_time"][0], r["median_time"][1]),
            fmt_num(r["p90_time"][0], r["p90_time"][1]),
            fmt_num(r["median_time_end"][0], r["median_time_end"][1]),
            "-" if sp is None else fmt_num(sp[0], sp[1], 3),
            fmt_p(r["p_value"]),
            ",".join(r["kinds"]) or "-",
        ])
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(head)]
    def fmt(cols):
        return "  ".join(c.ljust(w) if i < 2 or i == len(cols) - 1 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cols, widths))).rstrip()
    out = [fmt(head), fmt(["-" * w for w in widths])]
    prev = None
    for r, l in zip(rows, lines):
        if prev is not None and r["mutant"] != prev:
            out.append("")
        prev = r["mutant"]
        out.append(fmt(l))
    return "\n".join(out)


def report(trials):
    """Prints the table of a set of trials (mutants and strategies in their canonical order)
    and returns its rows."""
    order = {m: i for i, m in enumerate(MUTANTS)}
    mutants = sorted({t["mutant"] for t in trials}, key=lambda m: (order.get(m, len(order)), m))
    strats = [s for s in STRATEGIES + [LIBFUZZER] if any(t["strategy"] == s for t in trials)]
    rows = summarize(trials, mutants, strats)
    print("time to first finding (s, campaign clock: the stats' first_time, taken when the finding execution")
    print("starts) and executions (first_exec); med end s = median of the campaign's elapsed time, which with")
    print("--max-findings 1 ends after the finding execution and its bundle; censored trials count as the")
    print("budget; '>' marks a statistic resting on censored trials; x gen = median time / generator median;")
    print("p = two-sided Mann-Whitney U of times vs the generator's (normal approx., ties, both censored at the")
    print("smaller budget)")
    print()
    fwd = [r for r in rows if r["mutant"] not in BACKWARD_MUTANTS + SERVING_MUTANTS + FP8_MUTANTS + list(CHECK_MUTANTS)]
    chk = [r for r in rows if r["mutant"] in CHECK_MUTANTS]
    bwd = [r for r in rows if r["mutant"] in BACKWARD_MUTANTS]
    srv = [r for r in rows if r["mutant"] in SERVING_MUTANTS]
    fp8 = [r for r in rows if r["mutant"] in FP8_MUTANTS]
    if fwd:
        print(table(fwd))
    if bwd:
        if fwd:
            print()
        print("backward mutants (found through a gradient; the trial's found/kinds count findings on it):")
        print()
        print(table(bwd))
    if srv:
        if fwd or bwd:
            print()
        print("serving mutants (campaigns with --serving %g: packed, paged, decode, sinks, ALiBi):" % SERVING_SHARE)
        print()
        print(table(srv))
    if fp8:
        if fwd or bwd or srv:
            print()
        print("FP8 mutants (campaigns with --fp8 %g: e4m3 and e5m2 inputs with descales):" % FP8_SHARE)
        print()
        print(table(fp8))
    if chk:
        if fwd or bwd or srv or fp8:
            print()
        print("check mutants (determinism at its default share, batch_split, guard bands):")
        print()
        print(table(chk))
    killed = [t for t in trials if t.get("killed")]
    if killed:
        print()
        print("%d trial(s) ran past budget x 1.5 + 30 s inside one execution; stopped, counted as censored:" %
              len(killed))
        for t in killed[:20]:
            print("  %s %s seed %d (%d execs done)" % (t["mutant"], t["strategy"], t["seed"], t.get("execs_run", 0)))
    errs = [t for t in trials if t.get("error")]
    if errs:
        print()
        print("%d trial(s) failed and are left out of the table:" % len(errs))
        for t in errs[:20]:
            print("  %s %s seed %d: %s" % (t["mutant"], t["strategy"], t["seed"], t["error"]))
    return rows


def parse_budgets(text, default):
    budgets = {}
    if text:
        for part in text.split(","):
            name, _, val = part.partition("=")
            budgets[name.strip()] = float(val)
    return lambda s: budgets.get(s, default)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20, help="campaigns per cell (seeds 1..N; default 20)")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per campaign (default 60)")
    ap.add_argument("--strategy-budget", default="",
                    help="per-strategy budgets overriding --budget, e.g. grid=10,bytes=10")
    ap.add_argument("--jobs", type=int, default=2, help="campaigns run in parallel (default 2)")
    ap.add_argument("--mutants", default=",".join(MUTANTS),
                    help="comma-separated, or a group: 'forward', 'backward', 'serving', 'fp8', 'checks' (default: all)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated: generator,grid,bytes")
    ap.add_argument("--attnfuzz", default=None, help="the attnfuzz executable (default: build*/attnfuzz)")
    ap.add_argument("--libfuzzer", default=None,
                    help="a libFuzzer harness from fuzz/ honouring ATTNFUZZ_BACKENDS and ATTNFUZZ_ABORT=1")
    ap.add_argument("--seed-base", type=int, default=1, help="trial k uses seed seed-base + k (default 1)")
    ap.add_argument("--json", default=None, help="write every trial and the summary here")
    ap.add_argument("--reuse", action="append", default=[],
                    help="earlier --json output: its trials fill the cells not run now (repeatable; "
                         "the first file holding a cell wins)")
    ap.add_argument("--keep", default=None, help="keep each trial's crashes and stats under this directory")
    ap.add_argument("--summarize", default=None, metavar="OUT.json",
                    help="print the table of an earlier --json output and exit")
    ap.add_argument("--self-test", action="store_true", help="check the statistics and exit")
    ap.add_argument("--require-within", type=float, default=None, metavar="S",
                    help="exit 1 unless every trial run now found its mutant within S seconds (first_time); "
                         "a wall-clock bound: for a benchmark on a quiet machine, never for a test")
    ap.add_argument("--require-execs", type=int, default=None, metavar="N",
                    help="exit 1 unless every trial run now found its mutant within N executions (first_exec), "
                         "each campaign stopping after N (--runs N): for one seed the executions to the first "
                         "finding do not depend on the machine or its load, so a test can bound them; --budget "
                         "is then only a guard against a hang")
    a = ap.parse_args(argv)

    if a.self_test:
        self_test()
        return 0
    if a.summarize:
        with open(a.summarize) as f:
            doc = json.load(f)
        print("summary of %s (%s)" % (a.summarize, doc.get("command", "?")))
        print()
        report(doc.get("trials", []))
        return 0

    print("command: " + shlex.join(["python3"] + sys.argv), flush=True)
    groups = {"forward": FORWARD_MUTANTS, "backward": BACKWARD_MUTANTS, "serving": SERVING_MUTANTS,
              "fp8": FP8_MUTANTS, "checks": list(CHECK_MUTANTS), "lse": LSE_MUTANTS}
    mutants = [x for m in a.mutants.split(",") if m for x in groups.get(m, [m])]
    strategies = [s for s in a.strategies.split(",") if s]
    for s in strategies:
        if s not in STRATEGIES:
            ap.error("unknown strategy %r (generator, grid, bytes)" % s)
    for m in mutants:
        if m not in MUTANTS:
            print("warning: %r is not one of the known mutants %s" % (m, ",".join(MUTANTS)), file=sys.stderr)
    budget_of = parse_budgets(a.strategy_budget, a.budget)
    exe = os.path.abspath(a.attnfuzz) if a.attnfuzz else find_attnfuzz()
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        print("error: attnfuzz executable %s not found (build it, or pass --attnfuzz)" % exe, file=sys.stderr)
        return 2
    env = blas_env()
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    run_strats = list(strategies) + ([LIBFUZZER] if a.libfuzzer else [])
    if a.libfuzzer:
        budget_of_lf = budget_of(LIBFUZZER)
    print("attnfuzz: %s" % exe)
    if a.libfuzzer:
        print("libfuzzer: %s" % os.path.abspath(a.libfuzzer))
    print("host: %s, %d cpus, load average %s; %d jobs; OPENBLAS_CORETYPE=%s" % (
        platform.node(), os.cpu_count() or 0, " ".join("%.2f" % x for x in os.getloadavg()), a.jobs,
        env.get("OPENBLAS_CORETYPE", "")))
    print("budgets: " + ", ".join("%s %gs" % (s, budget_of(s)) for s in run_strats) +
          "; %d trials per cell, seeds %d..%d" % (a.trials, a.seed_base, a.seed_base + a.trials - 1))
    print("per trial: %s fuzz --backend mutant:NAME --strategy S --max-findings 1 --time BUDGET --seed K "
          "--crashes TMP/crashes --stats TMP/stats.json --quiet" % shlex.quote(exe), flush=True)

    jobs = []
    for s in run_strats:
        for m in mutants:
            for k in range(a.trials):
                jobs.append((m, s, a.seed_base + k))

    trials = []
    lock = threading.Lock()
    started = time.monotonic()
    done_per_cell = {}

    def work(job):
        m, s, seed = job
        if s == LIBFUZZER:
            return run_libfuzzer_trial(os.path.abspath(a.libfuzzer), m, budget_of_lf, seed, env, a.keep)
        return run_attnfuzz_trial(exe, m, s, budget_of(s), seed, env, a.keep, a.require_execs)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = [pool.submit(work, j) for j in jobs]
        for f in concurrent.futures.as_completed(futs):
            t = f.result()
            with lock:
                trials.append(t)
                key = (t["mutant"], t["strategy"])
                done_per_cell[key] = done_per_cell.get(key, 0) + 1
                if done_per_cell[key] == a.trials:
                    cell = [x for x in trials if (x["mutant"], x["strategy"]) == key]
                    killed = sum(1 for x in cell if x.get("killed"))
                    print("  [%6.0fs] %-22s %-9s %d/%d found%s%s" % (
                        time.monotonic() - started, key[0], key[1], sum(x["found"] for x in cell), len(cell),
                        "" if not killed else ", %d stopped past the budget" % killed,
                        "" if not any(x["error"] for x in cell) else
                        ", errors: " + "; ".join(x["error"] for x in cell if x["error"])[:300]),
                        file=sys.stderr, flush=True)

    trials.sort(key=lambda t: (t["mutant"], t["strategy"], t["seed"]))
    # A cell comes from this run, else from the first --reuse file that has it.
    taken = {(t["mutant"], t["strategy"]) for t in trials}
    reused = []
    for path in a.reuse:
        with open(path) as f:
            old = json.load(f)
        fresh = [t for t in old.get("trials", []) if (t["mutant"], t["strategy"]) not in taken]
        taken |= {(t["mutant"], t["strategy"]) for t in fresh}
        reused += fresh
    all_trials = trials + reused
    print()
    if reused:
        print("cells reused from %s: %s" % (", ".join(a.reuse), ", ".join(
            sorted({"%s/%s" % (t["mutant"], t["strategy"]) for t in reused}))))
    rows = report(all_trials)
    print("\nwall time %.0fs" % (time.monotonic() - started))

    if a.json:
        doc = {
            "command": shlex.join(["python3"] + sys.argv),
            "attnfuzz": exe,
            "libfuzzer": os.path.abspath(a.libfuzzer) if a.libfuzzer else None,
            "host": {"node": platform.node(), "cpus": os.cpu_count(), "loadavg_at_end": list(os.getloadavg())},
            "jobs": a.jobs,
            "trials_per_cell": a.trials,
            "budgets": {s: budget_of(s) for s in run_strats},
            "reused_from": a.reuse,
            "trials": all_trials,
            "summary": rows,
        }
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, a.json)
        print("wrote %s" % a.json)
    failed = False
    if a.require_execs is not None:
        # The executions to the first finding follow the seed: the cases a campaign draws
        # come from its seeded generator, one execution each (fuzz --jobs 1, no batches),
        # and nothing the clock decides changes which case comes next (docs/mutants.md).
        # A finding counts whenever it came (first_time past --budget too: the budget is
        # only a hang guard here).
        late = [t for t in trials if t.get("first_exec") is None or t["first_exec"] > a.require_execs]
        for t in late:
            print("NOT FOUND within %d executions: %s %s seed %d (%s)" % (
                a.require_execs, t["mutant"], t["strategy"], t["seed"],
                "found at execution %d" % t["first_exec"] if t.get("first_exec") is not None else
                t.get("error") or t.get("killed") or "not found in %d executions, %.3gs" % (
                    t.get("execs_run", 0), t.get("elapsed", 0.0))), file=sys.stderr)
        if late:
            failed = True
        else:
            print("every trial found its mutant within %d executions (the most: %d)" % (
                a.require_execs, max((t["first_exec"] for t in trials), default=0)))
    if a.require_within is not None:
        late = [t for t in trials if not t["found"] or t["time"] > a.require_within]
        for t in late:
            print("NOT FOUND within %gs: %s %s seed %d (%s)" % (
                a.require_within, t["mutant"], t["strategy"], t["seed"],
                "%.3gs" % t["time"] if t["found"] else t.get("error") or "not found"), file=sys.stderr)
        if late:
            failed = True
        else:
            print("every trial found its mutant within %gs" % a.require_within)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
