#!/usr/bin/env python3
"""Campaigns through the worker backend (docs/worker-protocol.md), end to end:

    worker_campaign_test.py SCENARIO ATTNFUZZ C_WORKER [PYTHON]

hang_eager: an eager worker (no compile key) hanging on some cases: each hang is killed at
  --timeout alone, except on a process's first case (the compile allowance covers an eager
  worker's first call only).
crash, exit, hang, garbage, shape, error: c_worker --fault KIND on some cases. Each
  finding has the documented kind (an error, one message however many cases raise it, is
  one signature and one bundle) (crash / timeout / error, "protocol:" for broken
  frames), its case is one the fault was meant for (the restarted worker does not blame
  the next case), its stderr.txt holds the worker's own line about that case, the
  campaign runs every execution it was asked for (--stats) with most cases ok, and a
  crash bundle replays as a crash.
flaky: a target that fails a case once and passes it when sent again: counted, its input
  kept, no bundle; and regress --strict of a bundle whose worker fails only its 2nd run
  request says "same" (a replay still shows it), of one failing only past regress's five
  replays "fixed".
die: a worker that exits before its hello: exit 2 with its stderr, no bundle.
wrong_c, wrong_numpy: a deliberately wrong worker (c_worker --bug scale,
  tests/worker_wrong_numpy.py run by PYTHON) is found, its bundle replays with exit 1
  (a fresh worker) and with exit 0 against the correct c_worker.
clean: the correct c_worker over 3000 generated cases, and 500 each with its other
  conventions (output in the case dtype, its own dropout keep mask).
clean_masked_rows_nan: 500 cases with NaN fully masked rows (declared, so waived).
restart_cost: a worker that takes 0.5 s to start and crashes now and then: with spares
  (the default) a restart after the first costs far less than a start; with --no-spare each
  costs a start. Both figures are printed.
batch: c_worker --batch 64 with errors and refusals on some cases, run with --batch 16:
  every error finding is one of the cases the fault was meant for and replays alone; the
  refused cases are skipped, not findings; the executions all happen. batch_crash: a crash
  inside a batch frame is charged to the case that crashes (the cases are sent again one by
  one), the campaign goes on. batch_device: a worker that says which item faulted it
  (`crash`, the rest `not_run`, then it exits): the crash is charged to that item, the rest
  go to the next process, and each crash costs exactly one restart.
batch_hang: a batching worker that hangs on some shapes (--timeout 1, --batch 32): every
  timeout is charged to a case the hang is meant for; a hung batch is given up after
  --timeout plus a multiple of the worker's seconds a case (not --timeout per case: 11
  minutes for a stock GPU batch), and once two of its cases have hung alone the rest is not
  run, so the campaign's wall time stays within seconds per hung batch.
pipeline: pipelined batches (the next batch sent before the last one is checked and stored)
  beside batches one after another (--no-pipeline), each with a correct and a wrong batching
  c_worker (--bug last_column), minimization on (a minimizing step collects the batch in
  flight first): every execution happens, every finding is the wrong worker's (an answer
  judged against another case's inputs would blame the correct one), each bundle replays;
  two correct workers over 1280 pipelined cases find nothing.
compiled_seeds: a compiling c_worker (--compile-sleep) and a corpus of 8 seeds of distinct
  structures: compiling stays near half of the time, value draws run between the seeds, and
  all 8 seeds run within 12 s.
compiled_errors: a compiling c_worker whose build fails on some structures: a structure that
  errored is not drawn again (errors at most once per failing structure, counted from the
  worker's --key-log).
bind: each job and its worker are bound to one CPU, distinct CPUs for --jobs 2 (c_worker
  --affinity-file records what each worker may run on); --no-bind leaves every CPU. Skipped
  (exit 77) where this process may run on one CPU only.
min_only_failing: a mutant's finding is minimized while a correct c_worker runs beside it
  (--count-file counts its runs): the worker runs once per campaign execution, never for a
  minimizing step.
min_jobs_shared: one failing seed run by --jobs 2 is minimized once (the executions of a
  single job's minimizing, not twice that), the other job reads the alias from the shared
  record; a later campaign on that crashes directory minimizes nothing.
min_budget: a slow wrong worker (--run-sleep) under a small --minimize-share: findings stored as
  found (case.json "minimized": false, stats), minimized in the end pass within its grace,
  or, with --minimize-grace 0, by `attnfuzz minimize DIR`.
new_amid_known: variants that keep hitting known bugs beside a worker with one planted
  deviation (c_worker --bug last_column) no entry covers: the new bug is found at once,
  minimized, one bundle; the known ones counted, one exemplar each, no other bundle.
min_dir: `attnfuzz minimize DIR` on bundles stored as found ends with minimized bundles of
  the same checks as minimizing at once, each replaying, each bundle as found in DIR/.raw/
  with its alias; of two `minimize DIR` at once, each finding is minimized by one and read
  from the record by the other; a second run has nothing to do.

Standard library only; exit 0 pass, 1 fail.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FAULT_MOD = 7  # c_worker faults where (q_len + kv_len + head_dim) % FAULT_MOD == 0

# scenario -> (kind of every finding, text in its error message, extra fuzz options)
FAULTS = {
    "crash": ("crash", "crash: the worker was killed by signal 6", []),
    "exit": ("crash", "crash: the worker exited with status 0", []),
    # each hung case is given --timeout + the compile allowance (a new structure); at 0.2 +
    # 0.2 s a case the worker does not hang on timed out too at load average 10 on 2 cores
    # (its answer came late, the worker had just been restarted): 0.5 + 1 s leave room for
    # the load, and a hang is still told from a slow case
    "hang": ("timeout", "timeout: no answer within 1.5 s", ["--timeout", "0.5", "--compile-timeout", "1"]),
    "garbage": ("error", "protocol: frame header is not valid JSON", []),
    "shape": ("error", "protocol: out has shape", []),
    "error": ("error", "RuntimeError: failing on purpose", []),
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def run(cmd, **kw):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    p.elapsed = time.monotonic() - t0
    return p


def bundles(d):
    out = []
    for case_json in sorted(glob.glob(os.path.join(d, "*", "case.json"))):
        with open(case_json) as f:
            out.append((os.path.dirname(case_json), json.load(f)))
    return out


def fault_campaign(attnfuzz, c_worker, fault, tmp):
    kind, message, extra = FAULTS[fault]
    runs = 150
    spec = f"worker:{c_worker} --fault {fault} --fault-mod {FAULT_MOD}"
    crashes, stats = os.path.join(tmp, "crashes"), os.path.join(tmp, "stats.json")
    p = run([attnfuzz, "fuzz", "--backend", spec, "--runs", str(runs), "--seed", "1", "--crashes", crashes,
             "--stats", stats, "--quiet", "--no-minimize"] + extra)
    check(p.returncode == 1, f"{fault}: exit {p.returncode}, want 1 (findings): {p.stderr[-500:]}")
    with open(stats) as f:
        st = json.load(f)
    check(st["execs"] == runs, f"{fault}: {st['execs']} execs, want all {runs}")
    n = st["findings_total"]
    check(2 <= n <= runs // 3, f"{fault}: {n} findings in {runs} execs (want some, and most cases ok)")
    if kind == "error":
        # one message (its numbers aside: c_worker's names each case's shape) is one
        # signature however many cases raised it, its count every one of them
        sigs = st["signatures"]
        check(len(sigs) == 1 and sigs[0]["count"] == n,
              f"{fault}: {len(sigs)} signatures (want 1) counting {[s['count'] for s in sigs]} of {n} findings")
    else:
        firsts = sorted(s["first_exec"] for s in st["signatures"])
        check(len(firsts) >= 2 and firsts[-1] > firsts[0], f"{fault}: no finding after the first fault: {firsts}")
    check(all(s["kind"] == kind for s in st["signatures"]), f"{fault}: kinds {[s['kind'] for s in st['signatures']]}")
    check(st["findings_per_kind"][kind] == 1 if kind == "error" else st["findings_per_kind"][kind] >= 2,
          f"{fault}: findings_per_kind {st['findings_per_kind']}")
    if fault == "hang":  # each hang is killed at its limit (1.5 s), not at a default (10 s, 60 s);
        # a bound far from both, so that a loaded machine's slower cases cannot reach it
        check(p.elapsed < 5.0 * n + 30.0, f"hang: {p.elapsed:.1f} s for {n} timeouts of 1.5 s")
    found = bundles(crashes)
    check(len(found) == st["unique_signatures"], f"{fault}: {len(found)} bundles, {st['unique_signatures']} signatures")
    for path, b in found:
        c = b["case"]
        name = os.path.basename(path)
        check(b["kind"] == kind, f"{fault}: {name} has kind {b['kind']}")
        err = b["backends"][0].get("error") or ""
        check(message in err, f"{fault}: {name} error {err[:200]!r} lacks {message!r}")
        check((c["q_len"] + c["kv_len"] + c["head_dim"]) % FAULT_MOD == 0,
              f"{fault}: {name} blames a case the worker did not fault on "
              f"(q_len {c['q_len']}, kv_len {c['kv_len']}, head_dim {c['head_dim']})")
        tail_path = os.path.join(path, "stderr.txt")
        if not check(os.path.exists(tail_path), f"{fault}: {name} has no stderr.txt"):
            continue
        with open(tail_path, errors="replace") as f:
            tail = f.read()
        lines = re.findall(r"fault (\w+) on purpose \(q_len (\d+), kv_len (\d+), head_dim (\d+)\)", tail)
        want = (fault, str(c["q_len"]), str(c["kv_len"]), str(c["head_dim"]))
        check(lines and lines[-1] == want, f"{fault}: {name} stderr.txt ends {lines[-1:]} , want {want}")
        check(len(tail.encode()) <= 4096, f"{fault}: {name} stderr.txt over 4 KiB")
    if kind == "crash" and found:
        r = run([attnfuzz, "replay", found[0][0]])
        check(r.returncode == 1 and "crash" in r.stdout + r.stderr,
              f"{fault}: replay exit {r.returncode}: {(r.stdout + r.stderr)[-300:]}")


def hang_eager(attnfuzz, c_worker, tmp):
    """An eager worker (its hello names no compile key) builds nothing per structure: the
    compile allowance covers its first case after a start only, so a hang on a later case
    is killed at --timeout alone, whatever its structure; a compiled worker (the hang
    scenario) gets the allowance on each new compile key."""
    crashes, stats = os.path.join(tmp, "crashes"), os.path.join(tmp, "stats.json")
    spec = f"worker:{c_worker} --eager --fault hang --fault-mod {FAULT_MOD}"
    p = run([attnfuzz, "fuzz", "--backend", spec, "--runs", "150", "--seed", "1", "--crashes", crashes,
             "--stats", stats, "--quiet", "--no-minimize", "--timeout", "0.5", "--compile-timeout", "5"])
    check(p.returncode == 1, f"hang_eager: exit {p.returncode}, want 1 (findings): {p.stderr[-500:]}")
    found = bundles(crashes)
    limits = []
    for path, b in found:
        err = b["backends"][0].get("error") or ""
        m = re.search(r"no answer within ([0-9.]+) s \(([^)]*)\)", err)
        if check(m and b["kind"] == "timeout", f"hang_eager: {os.path.basename(path)}: {b['kind']}: {err[:200]!r}"):
            limits.append((float(m.group(1)), m.group(2)))
    # a hang that is a process's first case (right after the restart a hang causes, when the
    # next case hangs too) keeps the allowance: 5.5 s; every other one is killed at 0.5 s
    short = [x for x in limits if x == (0.5, "--timeout")]
    check(all(x in short or x[0] == 5.5 for x in limits), f"hang_eager: limits {limits}")
    check(len(short) >= 2 and len(short) >= len(limits) - len(short),
          f"hang_eager: {len(short)} of {len(limits)} hangs killed at --timeout alone: {limits}")
    print(f"hang_eager: {len(limits)} timeouts, {len(short)} at --timeout alone")


def flaky(attnfuzz, c_worker, tmp):
    """A target that fails a case once and passes it when sent again: the finding is
    counted and its input kept (stats and stderr), the campaign goes on, exit 1."""
    crashes, stats = os.path.join(tmp, "crashes"), os.path.join(tmp, "stats.json")
    spec = f"worker:{c_worker} --fault error --fault-run 5"
    p = run([attnfuzz, "fuzz", "--backend", spec, "--runs", "60", "--seed", "1", "--crashes", crashes,
             "--stats", stats, "--quiet"])
    check(p.returncode == 1, f"flaky: exit {p.returncode}, want 1 (a finding): {p.stderr[-500:]}")
    check("did not fail again when re-run" in p.stderr, f"flaky: no message on stderr: {p.stderr[-500:]!r}")
    with open(stats) as f:
        st = json.load(f)
    check(st["execs"] == 60 and st["findings_total"] == 1 and st["write_errors"] == 0,
          f"flaky: execs {st['execs']}, findings {st['findings_total']}, write_errors {st['write_errors']}")
    sig = st["signatures"][0] if st["signatures"] else {}
    check(sig.get("kind") == "error" and re.fullmatch(r"[0-9a-f]{8,}", sig.get("input_hex", "") or ""),
          f"flaky: the finding's input is not kept: {sig}")
    check(not bundles(crashes), "flaky: a bundle was written for a case that passes")

    # regress of a bug that shows on some runs only: a bundle of an error, replayed by a
    # worker that fails its 2nd run request only, is the same bug (the first replay passes,
    # the second fails); one that fails only past the replays regress makes is fixed
    det = f"worker:{c_worker} --fault error --fault-mod 7"
    crashes2 = os.path.join(tmp, "crashes2")
    p = run([attnfuzz, "fuzz", "--backend", det, "--runs", "300", "--seed", "2", "--max-findings", "1",
             "--no-minimize", "--quiet", "--crashes", crashes2])
    found = bundles(crashes2)
    if not check(p.returncode == 1 and len(found) == 1, f"flaky regress: exit {p.returncode}, {len(found)} bundles"):
        return
    for nth, want, rc in ((2, "same", 0), (9, "fixed", 1)):
        corpus = os.path.join(tmp, "regress-%d" % nth)
        dst = os.path.join(corpus, os.path.basename(found[0][0]))
        shutil.copytree(found[0][0], dst)
        path = os.path.join(dst, "case.json")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("--fault error --fault-mod 7", "--fault error --fault-run %d" % nth))
        r = run([attnfuzz, "regress", "--strict", corpus])
        line = next((ln for ln in r.stdout.splitlines() if os.path.basename(dst) in ln), "")
        check(r.returncode == rc and line.startswith(want) and "replay" in line,
              f"flaky regress (fails on run {nth}): exit {r.returncode}, {line!r}")
        print(f"flaky regress, the worker failing on its run {nth}: {line[:140]}")


def die(attnfuzz, c_worker, tmp):
    crashes = os.path.join(tmp, "crashes")
    p = run([attnfuzz, "fuzz", "--backend", f"worker:{c_worker} --fault die", "--runs", "10", "--crashes", crashes])
    check(p.returncode == 2, f"die: exit {p.returncode}, want 2")
    check("the device is not there (on purpose)" in p.stderr, f"die: its stderr is not shown: {p.stderr[-300:]!r}")
    check("status 3" in p.stderr, f"die: the exit status is not shown: {p.stderr[-300:]!r}")
    check(not bundles(crashes), "die: a bundle was written")


def wrong(attnfuzz, c_worker, spec, tmp, name):
    crashes = os.path.join(tmp, "crashes")
    p = run([attnfuzz, "fuzz", "--backend", spec, "--runs", "3000", "--seed", "3", "--crashes", crashes,
             "--max-findings", "1", "--quiet"])
    check(p.returncode == 1, f"{name}: exit {p.returncode}, want 1: {p.stderr[-300:]}")
    found = bundles(crashes)
    if not check(len(found) == 1, f"{name}: {len(found)} bundles, want 1"):
        return
    path, b = found[0]
    check(b["kind"] == "diverge", f"{name}: kind {b['kind']}, want diverge")
    check(b["backends"][0]["name"] == spec, f"{name}: bundle backend {b['backends'][0]['name']}")
    r = run([attnfuzz, "replay", path])
    check(r.returncode == 1 and "diverge" in r.stdout, f"{name}: replay exit {r.returncode}: {r.stdout[-300:]}")
    r = run([attnfuzz, "replay", "--backend", f"worker:{c_worker}", path])
    check(r.returncode == 0, f"{name}: the correct worker fails the bundle: {r.stdout[-300:]}")


def clean(attnfuzz, c_worker, tmp, variants=(("", 3000), ("--out-dtype case", 500), ("--dropout keep_mask", 500))):
    for i, (opts, runs) in enumerate(variants):
        crashes, stats = os.path.join(tmp, f"crashes{i}"), os.path.join(tmp, f"stats{i}.json")
        spec = f"worker:{c_worker} {opts}".strip()
        p = run([attnfuzz, "fuzz", "--backend", spec, "--runs", str(runs), "--seed", str(11 + i), "--crashes",
                 crashes, "--stats", stats, "--quiet"])
        with open(stats) as f:
            st = json.load(f)
        check(p.returncode == 0 and st["findings_total"] == 0,
              f"clean {opts or '(default)'}: exit {p.returncode}, {st['findings_total']} findings: "
              f"{[b['kind'] + ' ' + os.path.basename(d) for d, b in bundles(crashes)][:5]}")
        check(st["execs"] == runs, f"clean {opts}: {st['execs']} execs, want {runs}")


def free_cpus(allowed):
    """The allowed CPUs no other process is bound to alone (kernel threads aside): what
    attnfuzz chooses from (src/campaign/cpu_bind.c), computed here independently."""
    taken = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                st = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        except OSError:
            continue
        cl = st.get("Cpus_allowed_list", "").strip()
        if st.get("PPid", "").strip() != "2" and pid != "2" and cl.isdigit():
            taken.add(int(cl))
    return sorted(set(allowed) - taken)


def bind(attnfuzz, c_worker, tmp):
    allowed = sorted(os.sched_getaffinity(0))
    free = free_cpus(allowed)
    if len(free) < 2:
        print(f"bind: {len(free)} free CPU(s) of {allowed} here, nothing to bind")
        sys.exit(77)

    def workers(jobs, *opts):
        rec = os.path.join(tmp, f"affinity-{jobs}-{len(opts)}")
        spec = f"worker:{c_worker} --affinity-file {rec}"
        p = run([attnfuzz, "fuzz", "--backend", spec, "--runs", "400", "--jobs", str(jobs), "--crashes",
                 os.path.join(tmp, "crashes"), "--quiet", *opts])
        check(p.returncode == 0, f"bind: --jobs {jobs} {' '.join(opts)}: exit {p.returncode}: {p.stderr[-300:]}")
        with open(rec) as f:
            return [frozenset(int(c) for c in line.split()[1].split(",")) for line in f if line.strip()]

    one = workers(1)
    check(len(one) == 1 and len(one[0]) == 1 and one[0] <= set(free), f"bind: --jobs 1 worker may run on {one}")
    two = workers(2)
    check(len(two) == 2 and all(len(s) == 1 and s <= set(free) for s in two) and two[0] != two[1],
          f"bind: --jobs 2 workers may run on {[sorted(s) for s in two]}, want two distinct CPUs of {free}")
    unbound = workers(2, "--no-bind")
    check(len(unbound) == 2 and all(s == set(allowed) for s in unbound),
          f"bind: --no-bind workers may run on {[sorted(s) for s in unbound]}, want {allowed}")

    # campaigns started one right after the other take distinct free CPUs (this does not
    # catch truly simultaneous starts, which the lock in cpu_bind.c orders); once every CPU
    # is taken, the next one is not bound
    if len(free) > 4:
        return

    def start(i, *limit):
        rec = os.path.join(tmp, f"side-{i}")
        return rec, subprocess.Popen(
            [attnfuzz, "fuzz", "--backend", f"worker:{c_worker} --affinity-file {rec}", "--crashes",
             os.path.join(tmp, f"crashes-side-{i}"), "--quiet", *limit],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cpus_of(rec):
        t0 = time.monotonic()
        while not (os.path.exists(rec) and open(rec).read().endswith("\n")) and time.monotonic() - t0 < 10:
            time.sleep(0.02)
        with open(rec) as f:
            return frozenset(int(c) for c in f.read().split()[1].split(","))

    side = [start(i, "--time", "30") for i in range(len(free))]
    try:
        seen = [cpus_of(rec) for rec, _ in side]
        rec, last = start(len(free), "--runs", "100")
        seen.append(cpus_of(rec))
        last.wait()
    finally:
        for _, p in side:
            p.terminate()
            p.wait()
    check(all(len(s) == 1 and s <= set(free) for s in seen[:-1]) and len(set(seen[:-1])) == len(free),
          f"bind: {len(free)} campaigns side by side run on {[sorted(s) for s in seen[:-1]]}, "
          f"want distinct CPUs of {free}")
    check(seen[-1] == set(allowed), f"bind: with every CPU taken, a campaign's worker may run on "
                                    f"{sorted(seen[-1])}, want all of {allowed} (not bound)")


def stats_of(path):
    with open(path) as f:
        return json.load(f)


def restart_cost(attnfuzz, c_worker, tmp):
    start = 0.5
    # a crash every 11 cases or so (seed 1: the generator's shapes make the fault's
    # (q_len + kv_len + head_dim) % 7 == 0 that frequent), 50 ms a case: the crashes come about
    # 0.55 s apart, more than a start, so a spare is ready for most of them
    spec = f"worker:{c_worker} --fault crash --fault-mod 7 --start-sleep {start} --run-sleep 0.05"
    per = {}
    for label, extra in (("spares", []), ("no spare", ["--no-spare"])):
        stats = os.path.join(tmp, f"stats-{len(per)}.json")
        p = run([attnfuzz, "fuzz", "--backend", spec, "--time", "12", "--seed", "1", "--no-minimize", "--quiet", "--crashes",
                 os.path.join(tmp, f"crashes-{len(per)}"), "--stats", stats, *extra])
        check(p.returncode == 1, f"restart_cost {label}: exit {p.returncode} (want 1: crashes found): {p.stderr[-500:]}")
        s = stats_of(stats)
        n = s["worker_restarts"]
        per[label] = (n, s["seconds"]["restarts"], s["execs"])
        print(f"restart_cost: {label}: {n} restarts in {s['seconds']['restarts']:.3f} s "
              f"({1000 * s['seconds']['restarts'] / max(n, 1):.1f} ms each; a start takes {1000 * start:.0f} ms), "
              f"{s['execs']} executions in 12 s")
    (ns, ts, es), (nn, tn, en) = per["spares"], per["no spare"]
    check(ns >= 5 and nn >= 5, f"restart_cost: too few crashes to measure ({ns}, {nn})")
    # every restart but the first (no spare started yet) and those within a start of the last
    # take a spare that is ready: far below a start on average
    check(ts / max(ns, 1) < 0.5 * start, f"restart_cost: {ts / max(ns, 1):.3f} s a restart with spares")
    check(tn / max(nn, 1) >= 0.9 * start, f"restart_cost: {tn / max(nn, 1):.3f} s a restart without (want a start)")
    check(es > en, f"restart_cost: {es} executions with spares, {en} without")


def batch(attnfuzz, c_worker, tmp, fault):
    mod_err, mod_uns = 7, 5
    if fault in ("crash", "device"):
        spec = f"worker:{c_worker} --batch 64 --fault {fault} --fault-mod 11"
    else:
        spec = f"worker:{c_worker} --batch 64 --fault error --fault-mod {mod_err} --unsupported-mod {mod_uns}"
    crashes, stats = os.path.join(tmp, "crashes"), os.path.join(tmp, "stats.json")
    p = run([attnfuzz, "fuzz", "--backend", spec, "--runs", "800", "--batch", "16", "--threads", "2", "--seed", "4",
             "--no-minimize", "--quiet", "--crashes", crashes, "--stats", stats])
    check(p.returncode == 1, f"batch: exit {p.returncode}: {p.stderr[-800:]}")
    s = stats_of(stats)
    check(s["execs"] == 800, f"batch: {s['execs']} executions of 800")
    found = bundles(crashes)
    crashing = fault in ("crash", "device")
    want_kind = "crash" if crashing else "error"
    mod = 11 if crashing else mod_err
    # crashes sign by the case's features; the errors, one message, as one finding
    check(len(found) >= 3 if crashing else len(found) == 1, f"batch: {len(found)} bundles")
    for d, b in found:
        c = b["case"]
        key = c["q_len"] + c.get("kv_len", c["q_len"]) + c["head_dim"]
        check(b["kind"] == want_kind, f"batch: {os.path.basename(d)} is a {b['kind']}, want {want_kind}")
        check(key % mod == 0, f"batch: {os.path.basename(d)} charged to a case the fault is not meant for "
                              f"(q_len + kv_len + head_dim = {key})")
        if crashing:
            # the stderr of the process that case killed, not of the one that replaced it
            line = "fault %s on purpose (q_len %d, kv_len %d, head_dim %d)" % (fault,
                c["q_len"], c.get("kv_len", c["q_len"]), c["head_dim"])
            tail = os.path.join(d, "stderr.txt")
            check(os.path.exists(tail) and line in open(tail).read(),
                  f"batch_crash: {os.path.basename(d)}/stderr.txt lacks {line!r}")
    crashes_found = s["findings_total"] if crashing else 0  # every finding is a crash there
    print(f"batch {fault}: {crashes_found} crash findings, {s['worker_restarts']} restarts "
          f"({s['seconds']['restarts']:.3f} s)")
    if not crashing:
        check(s["skipped"] > 0, "batch: no case was refused (unsupported)")
        d = found[0][0]
        r = run([attnfuzz, "replay", d])
        check(r.returncode == 1 and want_kind in r.stdout + r.stderr, f"batch: {d} does not replay alone: {r.stdout[-400:]}")
    elif fault == "crash":
        # the batch's process, then each culprit's when the cases are sent again one by one
        check(s["worker_restarts"] > crashes_found, f"batch_crash: {s['worker_restarts']} restarts for "
                                                    f"{crashes_found} crashes")
    else:
        # the worker named its culprit: one restart a crash, the rest of the batch unharmed
        check(crashes_found >= 3 and s["worker_restarts"] == crashes_found,
              f"batch_device: {s['worker_restarts']} restarts for {crashes_found} crashes")
        # every case crashes it (a batch's structure that always faults): two crashes a
        # batch, the rest of each batch not run (skipped), not a restart per case
        stats2 = os.path.join(tmp, "stats-all.json")
        p = run([attnfuzz, "fuzz", "--backend", f"worker:{c_worker} --batch 64 --fault device --fault-mod 1",
                 "--runs", "160", "--batch", "16", "--seed", "4", "--no-minimize", "--quiet", "--crashes",
                 os.path.join(tmp, "crashes-all"), "--stats", stats2])
        s2 = stats_of(stats2)
        print(f"batch device, every case faults: {s2['execs']} executions, {s2['findings_total']} crashes, "
              f"{s2['worker_restarts']} restarts, {s2['skipped']} skipped")
        # (the worker the last crash ended is restarted only when a case comes)
        nc, nr = s2["findings_total"], s2["worker_restarts"]
        check(s2["execs"] == 160 and nc - 1 <= nr <= nc <= 2 * 10 and s2["skipped"] >= 100,
              f"batch_device: every case faulting: {s2['execs']} executions, {nc} crashes, {nr} restarts, "
              f"{s2['skipped']} skipped")


def batch_hang(attnfuzz, c_worker, tmp):
    mod, timeout, compile_s, runs, size = 13, 1.0, 1.0, 400, 32
    spec = f"worker:{c_worker} --batch 64 --fault hang --fault-mod {mod}"
    crashes, stats = os.path.join(tmp, "crashes"), os.path.join(tmp, "stats.json")
    t0 = time.monotonic()
    p = run([attnfuzz, "fuzz", "--backend", spec, "--runs", str(runs), "--batch", str(size), "--seed", "4",
             "--timeout", str(timeout), "--compile-timeout", str(compile_s), "--no-minimize", "--quiet",
             "--crashes", crashes, "--stats", stats])
    wall = time.monotonic() - t0
    check(p.returncode == 1, f"batch_hang: exit {p.returncode}: {p.stderr[-800:]}")
    s = stats_of(stats)
    check(s["execs"] == runs, f"batch_hang: {s['execs']} executions of {runs}")
    timeouts = s["findings_per_kind"]["timeout"]
    check(timeouts >= 1 and s["findings_total"] == timeouts, f"batch_hang: findings {s['findings_per_kind']}")
    for d, b in bundles(crashes):
        c = b["case"]
        key = c["q_len"] + c["kv_len"] + c["head_dim"]
        check(b["kind"] == "timeout" and key % mod == 0,
              f"batch_hang: {os.path.basename(d)} ({b['kind']}) charged to a case the hang is not meant for ({key})")
    # a batch's cases share their shapes: each hung batch is given up at its limit
    # (--timeout + 31 x 0.1 s + the compile allowance), then its cases run alone until two
    # have hung (each --timeout + the allowance: a new process), the rest not run
    hung = (timeouts + 1) // 2
    check(s["skipped"] >= hung, f"batch_hang: {s['skipped']} cases not run after two hung ({hung} batches)")
    per_batch = timeout + (size - 1) * 0.1 + compile_s + 2 * (timeout + compile_s) + 2.0
    bound = hung * per_batch + 10.0
    old = hung * (size * timeout + compile_s + size * (timeout + compile_s))
    print(f"batch_hang: {timeouts} timeouts ({hung} hung batches) in {wall:.1f} s; bound {bound:.0f} s, "
          f"at least {old:.0f} s with --timeout per case of a batch and every case of it alone")
    check(wall < bound, f"batch_hang: {wall:.1f} s for {hung} hung batches, bound {bound:.0f} s")


NEW_AMID_KNOWN = {"format": "attnfuzz-known", "version": 1, "entries": [
    {"id": "test-causal-top-left", "class": "real_bug", "title": "top-left causal alignment where bottom-right is asked",
     "backends": ["mutant:causal_top_left"], "kinds": ["diverge", "nan_mismatch", "masked_row_nan"]},
    {"id": "test-scale-sqrt-q-only", "class": "real_bug", "title": "sqrt(scale) on Q, none on K",
     "backends": ["mutant:scale_sqrt_q_only"], "kinds": ["diverge", "nan_mismatch", "inf_mismatch"]}]}


def new_amid_known(attnfuzz, c_worker, tmp):
    """Two variants that keep hitting known bugs (mutants with entries in a --known file) and
    a worker with one planted deviation no entry covers: the new bug is found at once,
    minimized, one bundle; the known ones are counted, one exemplar each, no other bundle
    (a finding of a known bug in another form, minimized into it, is counted there too)."""
    known = os.path.join(tmp, "known.json")
    with open(known, "w") as f:
        json.dump(NEW_AMID_KNOWN, f)
    crashes, stats = os.path.join(tmp, "crashes"), os.path.join(tmp, "stats.json")
    spec = f"worker:{c_worker} --bug last_column"
    t0 = time.time()
    p = run([attnfuzz, "fuzz", "--known", known, "--backend", "mutant:causal_top_left", "--backend",
             "mutant:scale_sqrt_q_only", "--backend", spec, "--time", "20", "--seed", "5", "--crashes", crashes,
             "--stats", stats, "--quiet"])
    wall = time.time() - t0
    check(p.returncode == 1, f"new_amid_known: exit {p.returncode}: {p.stderr[-400:]}")
    st = stats_of(stats)
    sigs = st["signatures"]
    check(len(sigs) == 1 and sigs[0]["who"] == spec and sigs[0]["minimized"],
          f"new_amid_known: want one minimized signature of the worker, got {sigs}")
    if sigs:
        check(sigs[0]["first_time"] < 60, f"new_amid_known: found after {sigs[0]['first_time']:.1f} s")
    hits = {k["id"]: k["hits"] for k in st["known"]}
    check(hits.get("test-causal-top-left", 0) > 0 and hits.get("test-scale-sqrt-q-only", 0) > 0,
          f"new_amid_known: known hits {hits}")
    names = sorted(top_bundles(crashes))
    want = sorted(["known-test-causal-top-left", "known-test-scale-sqrt-q-only"] +
                  [os.path.basename(s["bundle"]) for s in sigs])
    check(names == want, f"new_amid_known: bundles {names}, want {want}")
    for name, b in top_bundles(crashes).items():
        if not name.startswith("known-"):
            c = b["case"]
            check(c["batch"] * c["q_heads"] * c["q_len"] * c["kv_len"] * c["head_dim"] * c.get("v_head_dim", 1) <= 4,
                  f"new_amid_known: {name} is not minimized: {c}")
    print(f"new_amid_known: {st['execs']} execs in {wall:.0f} s, new bug first at "
          f"{sigs[0]['first_time'] if sigs else -1:.3f} s, known hits {hits}, bundles {names}")


def known_crash(attnfuzz, c_worker, tmp):
    """A worker that crashes on the cases where (q_len + kv_len + head_dim) % 7 == 0, with and
    without a known entry for that crash: with it, one trigger case per --known-fault-gap (2 s
    here) reaches the worker (a restart costs a process, on a GPU a CUDA context), so it
    restarts a handful of times, not at every seventh case, and spends less time restarting."""
    known = os.path.join(tmp, "known.json")
    with open(known, "w") as f:
        json.dump({"format": "attnfuzz-known", "version": 1, "entries": [
            {"id": "test-crash-mod7", "class": "real_bug", "title": "crashes where (sq + sk + d) % 7 == 0",
             "backends": ["worker:*"], "kinds": ["crash"], "when": "(sq + sk + d) % 7 == 0"}]}, f)
    spec = f"worker:{c_worker} --fault crash --fault-mod 7 --start-sleep 0.2 --run-sleep 0.01"
    per = {}
    for label, extra in (("known", ["--known", known]), ("no-known", ["--no-known"])):
        stats = os.path.join(tmp, f"stats-{label}.json")
        run([attnfuzz, "fuzz", "--backend", spec, "--time", "8", "--seed", "1", "--no-minimize", "--quiet",
             "--known-fault-gap", "2", "--crashes", os.path.join(tmp, f"crashes-{label}"), "--stats", stats, *extra])
        s = stats_of(stats)
        per[label] = s
        hits = sum(k["hits"] for k in s.get("known", []))
        print(f"known_crash: {label}: {s['execs']} executions, {s['worker_restarts']} restarts "
              f"({s['seconds']['restarts']:.2f} s), known hits {hits}, trigger cases left out {s['known_skipped']}")
    k, n = per["known"], per["no-known"]
    check(n["worker_restarts"] >= 20, f"known_crash: too few crashes without the entry ({n['worker_restarts']})")
    check(k["known_skipped"] > 0 and k["known"] and k["known"][0]["hits"] >= 1,
          f"known_crash: the entry neither hit nor skipped: {k.get('known')}")
    # one trigger case per 2 s, the first after 2 s: at most 4 in 8 s
    check(1 <= k["worker_restarts"] <= 4, f"known_crash: {k['worker_restarts']} restarts with the entry (want 1..4)")
    check(k["worker_restarts"] * 5 <= n["worker_restarts"],
          f"known_crash: {k['worker_restarts']} restarts with the entry, {n['worker_restarts']} without")
    # what the gap saves is restart time (a process each, on a GPU a CUDA context); more
    # executions follow from it, but by about a tenth here, within what a loaded machine
    # moves an 8 s campaign's count: the restart seconds are compared, not the executions
    check(k["seconds"]["restarts"] < n["seconds"]["restarts"],
          f"known_crash: {k['seconds']['restarts']:.2f} s restarting with the entry, "
          f"{n['seconds']['restarts']:.2f} s without")


def top_bundles(d):
    """{name: case.json} of the bundles directly in d (hidden ones are not bundles)."""
    return {os.path.basename(p): b for p, b in bundles(d)}


def min_only_failing(attnfuzz, c_worker, tmp):
    counts, crashes, stats = (os.path.join(tmp, n) for n in ("counts", "crashes", "stats.json"))
    p = run([attnfuzz, "fuzz", "--backend", "mutant:causal_top_left", "--backend",
             f"worker:{c_worker} --count-file {counts}", "--runs", "300", "--seed", "2", "--minimize-share", "1",
             "--crashes", crashes, "--stats", stats, "--quiet"])
    check(p.returncode == 1, f"min_only_failing: exit {p.returncode}: {p.stderr[-400:]}")
    st = stats_of(stats)
    with open(counts) as f:
        worker_runs = sum(int(line.split()[1]) for line in f if line.strip())
    check(st["minimize_execs"] > 50, f"min_only_failing: {st['minimize_execs']} minimize executions, want many")
    check(all(s["who"] == "mutant:causal_top_left" for s in st["signatures"]), f"min_only_failing: {st['signatures']}")
    # every campaign execution runs the worker once (it supports every case), and once more
    # where the determinism check drew the case; minimizing the mutant's findings runs the
    # mutant alone
    again = st.get("determinism_runs", 0)
    check(worker_runs <= st["execs"] + again,
          f"min_only_failing: the worker ran {worker_runs} times in {st['execs']} executions ({again} determinism "
          f"second runs of all backends) and {st['minimize_execs']} minimizing steps")
    check(worker_runs >= st["execs"] - st["skipped"] - 5, f"min_only_failing: the worker ran only {worker_runs} times")
    print(f"min_only_failing: {st['execs']} execs, {st['minimize_execs']} minimizing steps, worker runs {worker_runs}")


def failing_seed(attnfuzz, tmp):
    """A corpus of one input on which mutant:causal_top_left fails, as found (large)."""
    raw = os.path.join(tmp, "raw")
    run([attnfuzz, "fuzz", "--backend", "mutant:causal_top_left", "--runs", "2000", "--seed", "4", "--no-minimize",
         "--max-findings", "1", "--crashes", raw, "--quiet"])
    found = bundles(raw)
    if not check(len(found) == 1, f"no raw finding to seed with: {found}"):
        sys.exit(1)
    seeds = os.path.join(tmp, "seeds")
    os.makedirs(seeds)
    with open(os.path.join(found[0][0], "input.bin"), "rb") as f, open(os.path.join(seeds, "seed.bin"), "wb") as g:
        g.write(f.read())
    return seeds


def min_jobs_shared(attnfuzz, c_worker, tmp):
    seeds = failing_seed(attnfuzz, tmp)

    def campaign(name, jobs, crashes):
        stats = os.path.join(tmp, name + ".json")
        p = run([attnfuzz, "fuzz", "--backend", "mutant:causal_top_left", "--corpus", seeds, "--runs", "1", "--jobs",
                 str(jobs), "--minimize-share", "1", "--crashes", crashes, "--stats", stats, "--quiet"])
        check(p.returncode == 1, f"min_jobs_shared: {name}: exit {p.returncode}: {p.stderr[-400:]}")
        return stats_of(stats)

    one = campaign("one", 1, os.path.join(tmp, "one"))
    shared = os.path.join(tmp, "two")
    two = campaign("two", 2, shared)
    check(one["minimize_execs"] > 20 and one["aliases_read"] == 0, f"min_jobs_shared: one job: {one}")
    # each job ran the seed and found the same raw signature: one minimized it (the same
    # executions as the single job), the other read its alias
    check(two["execs"] == 2 and two["findings_total"] == 2, f"min_jobs_shared: {two['execs']} execs")
    check(two["minimize_execs"] == one["minimize_execs"],
          f"min_jobs_shared: --jobs 2 spent {two['minimize_execs']} minimizing executions, one job "
          f"{one['minimize_execs']}")
    check(two["aliases_read"] == 1, f"min_jobs_shared: aliases read {two['aliases_read']}, want 1")
    sigs = [(s["signature"], s["count"], s["minimized"]) for s in two["signatures"]]
    check(sigs == [(one["signatures"][0]["signature"], 2, True)], f"min_jobs_shared: {sigs} vs {one['signatures']}")
    check(len(top_bundles(shared)) == 1, f"min_jobs_shared: bundles {sorted(top_bundles(shared))}")
    later = campaign("later", 1, shared)  # an earlier campaign's record
    check(later["minimize_execs"] == 0 and later["aliases_read"] == 1,
          f"min_jobs_shared: a later campaign: {later['minimize_execs']} minimizing, {later['aliases_read']} read")
    print(f"min_jobs_shared: one job {one['minimize_execs']}, two jobs {two['minimize_execs']} minimizing executions")


def check_dir_minimized(d, name):
    found = top_bundles(d)
    check(found and all(b.get("minimized") is True for b in found.values()),
          f"{name}: bundles not minimized: {[n for n, b in found.items() if b.get('minimized') is not True]}")
    raw = os.path.join(d, ".raw")
    moved = top_bundles(raw) if os.path.isdir(raw) else {}
    check(all(b.get("minimized") is False for b in moved.values()), f"{name}: .raw holds minimized bundles")
    record = os.path.join(d, ".minimized")
    for n, b in moved.items():
        alias = os.path.join(record, b["signature"])
        if not check(os.path.exists(alias), f"{name}: no alias for {n}"):
            continue
        with open(alias) as f:
            parts = f.read().split()
        check(len(parts) == 5 and parts[2] == b["signature"] and f"{parts[4]}-{parts[3]}" in found,
              f"{name}: the alias of {n} ({parts}) names no bundle")
    return found, moved


def min_budget(attnfuzz, c_worker, tmp):
    spec = f"worker:{c_worker} --bug scale --run-sleep 0.01"
    # no end pass: the findings stay stored as found, then `attnfuzz minimize DIR`
    crashes, stats = os.path.join(tmp, "crashes"), os.path.join(tmp, "stats.json")
    p = run([attnfuzz, "fuzz", "--backend", spec, "--time", "2", "--seed", "3", "--minimize-share", "0.02",
             "--minimize-grace", "0", "--crashes", crashes, "--stats", stats, "--quiet"])
    check(p.returncode == 1, f"min_budget: exit {p.returncode}: {p.stderr[-400:]}")
    st = stats_of(stats)
    found = top_bundles(crashes)
    as_found = [n for n, b in found.items() if b.get("minimized") is False]
    check(st["stored_unminimized"] >= 1 and len(as_found) >= 1 and st["minimized_later"] == 0,
          f"min_budget: stored_unminimized {st['stored_unminimized']}, {len(as_found)} of {len(found)} as found")
    check(st["minimize_seconds"] <= 0.02 * st["elapsed"] + 0.5,
          f"min_budget: {st['minimize_seconds']:.2f}s minimizing in {st['elapsed']:.1f}s")
    check(sorted(s["signature"] for s in st["signatures"] if not s["minimized"]) ==
          sorted(found[n]["signature"] for n in as_found), "min_budget: the stats and the bundles disagree")
    check("attnfuzz minimize" in p.stderr, f"min_budget: no hint to run attnfuzz minimize: {p.stderr[-300:]}")
    m = run([attnfuzz, "minimize", crashes])
    check(m.returncode == 1, f"min_budget: minimize DIR: exit {m.returncode}: {m.stderr[-400:]}")
    after, moved = check_dir_minimized(crashes, "min_budget")
    check(len(moved) + sum(1 for n in as_found if n in after) >= len(as_found),
          f"min_budget: {len(as_found)} as found, {len(moved)} moved")
    for path, b in bundles(crashes):  # each still fails, as its check
        r = run([attnfuzz, "replay", path])
        check(r.returncode == 1, f"min_budget: {os.path.basename(path)} replays with exit {r.returncode}")

    # an end pass within its grace
    crashes, stats = os.path.join(tmp, "crashes2"), os.path.join(tmp, "stats2.json")
    p = run([attnfuzz, "fuzz", "--backend", spec, "--time", "2", "--seed", "3", "--minimize-share", "0.02",
             "--minimize-grace", "20", "--crashes", crashes, "--stats", stats, "--quiet"])
    st = stats_of(stats)
    check(p.returncode == 1 and st["stored_unminimized"] >= 1 and st["minimized_later"] == st["stored_unminimized"],
          f"min_budget: end pass: exit {p.returncode}, {st['stored_unminimized']} stored as found, "
          f"{st['minimized_later']} minimized later")
    check(0 < st["minimize_end_seconds"] <= 21 and p.elapsed < 2 + 21 + 10,
          f"min_budget: end pass {st['minimize_end_seconds']:.1f}s, campaign {p.elapsed:.1f}s")
    check_dir_minimized(crashes, "min_budget end pass")
    print(f"min_budget: {st['stored_unminimized']} stored as found, end pass {st['minimize_end_seconds']:.1f}s")


def min_dir(attnfuzz, c_worker, tmp):
    def campaign(crashes, *opts):
        stats = crashes + ".json"
        p = run([attnfuzz, "fuzz", "--backend", "mutant:causal_top_left", "--backend", "mutant:scale_sqrt_q_only",
                 "--runs", "300", "--seed", "9", "--crashes", crashes, "--stats", stats, "--quiet", *opts])
        check(p.returncode == 1, f"min_dir: exit {p.returncode}: {p.stderr[-400:]}")
        return stats_of(stats)

    at_once = campaign(os.path.join(tmp, "at_once"), "--minimize-share", "1")
    deferred = os.path.join(tmp, "deferred")
    st = campaign(deferred, "--minimize-share", "0.01", "--minimize-grace", "0")
    before = top_bundles(deferred)
    n_found = sum(1 for b in before.values() if b.get("minimized") is False)
    check(n_found >= 3, f"min_dir: only {n_found} bundles stored as found")
    twice = os.path.join(tmp, "twice")
    shutil.copytree(deferred, twice)

    m = run([attnfuzz, "minimize", deferred])
    check(m.returncode == 1, f"min_dir: exit {m.returncode}: {m.stderr[-400:]}")
    after, moved = check_dir_minimized(deferred, "min_dir")
    # which findings merge depends on the order (a minimized bug is a pattern for the next):
    # the same checks fail, fewer bundles than findings, each replays
    want = sorted({s["who"] for s in at_once["signatures"]})
    check(sorted({b["who"] for b in after.values()}) == want and len(after) < n_found,
          f"min_dir: {len(after)} bundles of {sorted({b['who'] for b in after.values()})}, at once: {want}")
    for path, b in bundles(deferred):
        r = run([attnfuzz, "replay", path])
        check(r.returncode == 1, f"min_dir: {os.path.basename(path)} replays with exit {r.returncode}")
    check(len(moved) + len([n for n in before if n in after and before[n].get("minimized") is False]) == n_found,
          f"min_dir: {n_found} as found, {len(moved)} in .raw")
    execs = re.search(r"\((\d+) executions", m.stderr)
    again = run([attnfuzz, "minimize", deferred])
    check(again.returncode == 0 and " 0 of 0 " in again.stderr, f"min_dir: second run: exit {again.returncode}: "
                                                                 f"{again.stderr[-200:]}")

    # two at once on a copy: each finding is minimized by one of them, whose alias the other
    # reads from the record (the aliases read add up to the findings)
    procs = [subprocess.Popen([attnfuzz, "minimize", twice], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [pr.communicate() for pr in procs]
    read = [re.search(r" of (\d+) bundles? .*, (\d+) read from the shared record", err) for _, err in outs]
    check(all(read), f"min_dir: no summary: {[e[-200:] for _, e in outs]}")
    if all(read):
        n = [int(m.group(1)) for m in read]
        both = sum(int(m.group(2)) for m in read)
        check(n == [n_found, n_found] and both == n_found,
              f"min_dir: two at once each saw {n} of {n_found} and read {both} aliases: something minimized twice")
    after2, _ = check_dir_minimized(twice, "min_dir (two at once)")
    check(sorted({b["who"] for b in after2.values()}) == want, "min_dir: two at once end elsewhere")
    print(f"min_dir: {n_found} as found -> {len(after)} bundles, {execs.group(1) if execs else '?'} executions")


def pipeline(attnfuzz, c_worker, tmp):
    good = f"worker:{c_worker} --batch 64"
    bad = f"worker:{c_worker} --batch 64 --bug last_column --name wrong"
    for label, extra in (("pipelined", []), ("one after another", ["--no-pipeline"])):
        crashes, stats = os.path.join(tmp, label, "crashes"), os.path.join(tmp, label, "stats.json")
        p = run([attnfuzz, "fuzz", "--backend", good, "--backend", bad, "--runs", "640", "--batch", "32",
                 "--threads", "2", "--seed", "6", "--quiet", "--crashes", crashes, "--stats", stats] + extra)
        check(p.returncode == 1, f"pipeline ({label}): exit {p.returncode}: {p.stderr[-800:]}")
        s = stats_of(stats)
        who = sorted({sig["who"] for sig in s["signatures"]})
        print(f"pipeline ({label}): {s['execs']} executions, {s['findings_total']} with findings, "
              f"{s['unique_signatures']} signatures of {who}, {s['minimize_execs']} minimizing executions")
        check(s["execs"] == 640, f"pipeline ({label}): {s['execs']} executions of 640")
        check(s["findings_total"] > 0 and s["minimize_execs"] > 0,
              f"pipeline ({label}): {s['findings_total']} findings, {s['minimize_execs']} minimizing executions")
        check(who and all("wrong" in w and "--bug" in w for w in who),
              f"pipeline ({label}): a finding blames a correct worker: {who}")
        for d, _ in bundles(crashes)[:3]:
            r = run([attnfuzz, "replay", d])
            check(r.returncode == 1, f"pipeline ({label}): {os.path.basename(d)} replays with exit {r.returncode}")
    stats = os.path.join(tmp, "clean.json")
    p = run([attnfuzz, "fuzz", "--backend", good, "--backend", good + " --name other", "--runs", "1280",
             "--batch", "64", "--threads", "2", "--seed", "7", "--quiet", "--crashes", os.path.join(tmp, "clean"),
             "--stats", stats])
    s = stats_of(stats)
    check(p.returncode == 0 and s["execs"] == 1280 and s["findings_total"] == 0,
          f"pipeline (clean): exit {p.returncode}, {s['execs']} executions, {s['findings_total']} findings")


def compiled_seeds(attnfuzz, c_worker, tmp):
    """A compiling worker (0.4 s on each new structure) and a corpus of 8 seeds, each a
    structure of its own: the seeds wait while compiling is over half the campaign's time,
    so value draws of the structures compiled run between them, and all 8 still run."""
    compile_s, n = 0.4, 8
    seeds = os.path.join(tmp, "seeds")
    os.makedirs(seeds)
    for i in range(n):  # the case's byte form: batch 1, heads 1, q_len i+1, kv_len i+2, head_dim i+4
        with open(os.path.join(seeds, f"seed{i}.bin"), "wb") as f:
            f.write(bytes([0, 0, 0, i, 0, i + 1, 0, i + 3, 0, 3, 0]))
    spec = f"worker:{c_worker} --compile-sleep {compile_s}"
    for secs in (4, 12):
        stats = os.path.join(tmp, f"stats-{secs}.json")
        p = run([attnfuzz, "fuzz", "--backend", spec, "--corpus", seeds, "--time", str(secs), "--seed", "3",
                 "--no-minimize", "--quiet", "--crashes", os.path.join(tmp, f"crashes-{secs}"), "--stats", stats])
        check(p.returncode == 0, f"compiled_seeds ({secs} s): exit {p.returncode}: {p.stderr[-500:]}")
        s = stats_of(stats)
        el, comp = s["elapsed"], s["compile_seconds"]
        print(f"compiled_seeds ({secs} s): {s['seeds_run']} of {s['seeds']} seeds run, {s['execs']} executions, "
              f"compile {comp:.1f} s of {el:.1f} s")
        check(s["seeds"] == n, f"compiled_seeds ({secs} s): {s['seeds']} seeds loaded, want {n}")
        # compiling stays near half of the time: one compile past the share at most (the
        # share is checked before a case is sent)
        check(comp <= 0.5 * el + 2 * compile_s, f"compiled_seeds ({secs} s): compile {comp:.1f} s of {el:.1f} s")
        # value draws ran between the seeds: far more executions than structures compiled
        check(s["execs"] >= 10 * (comp / compile_s), f"compiled_seeds ({secs} s): {s['execs']} executions")
        if secs == 12:
            check(s["seeds_run"] == n, f"compiled_seeds: {s['seeds_run']} of {n} seeds ran in 12 s")


def compiled_errors(attnfuzz, c_worker, tmp):
    """A compiling worker whose build fails on some structures (an error on every draw of
    them): a structure that errored is not drawn again, so errors come at most once per
    failing structure, not once per value draw. The worker's key log names the structures
    the campaign drew and the runs that failed: about half the structures fail (--fault-mod
    2) and 8 s at a 0.2 s compile draw some 20 that build, so a run without a failing one
    is a one-in-a-million chance, not a flake."""
    compile_s, keys = 0.2, os.path.join(tmp, "keys.log")
    spec = f"worker:{c_worker} --compile-sleep {compile_s} --fault error --fault-mod 2 --key-log {keys}"
    stats = os.path.join(tmp, "stats.json")
    p = run([attnfuzz, "fuzz", "--backend", spec, "--time", "8", "--seed", "5", "--no-minimize", "--quiet",
             "--crashes", os.path.join(tmp, "crashes"), "--stats", stats])
    s = stats_of(stats)
    errors = sum(sig["count"] for sig in s["signatures"] if sig["kind"] == "error")
    with open(keys) as f:
        log = [line.split() for line in f]
    drawn = {k for k, _ in log}
    failing = {k for k, fault in log if fault == "1"}
    fault_runs = sum(1 for _, fault in log if fault == "1")
    print(f"compiled_errors: {s['execs']} executions, {len(drawn)} structures drawn, {len(failing)} failing, "
          f"{fault_runs} failed runs, {errors} errors")
    check(p.returncode == 1 and len(failing) > 0, f"compiled_errors: exit {p.returncode}, {len(failing)} failing structures")
    check(errors == fault_runs, f"compiled_errors: {errors} errors reported for {fault_runs} failed runs")
    check(fault_runs <= len(failing) + 2, f"compiled_errors: {fault_runs} failed runs for {len(failing)} failing structures")
    check(s["execs"] >= 20 * fault_runs, f"compiled_errors: {s['execs']} executions for {fault_runs} failed runs")


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    scenario, attnfuzz, c_worker = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    python = sys.argv[4] if len(sys.argv) > 4 else sys.executable
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="af_worker_") as tmp:
        if scenario in FAULTS:
            fault_campaign(attnfuzz, c_worker, scenario, tmp)
        elif scenario == "flaky":
            flaky(attnfuzz, c_worker, tmp)
        elif scenario == "hang_eager":
            hang_eager(attnfuzz, c_worker, tmp)
        elif scenario == "die":
            die(attnfuzz, c_worker, tmp)
        elif scenario == "wrong_c":
            wrong(attnfuzz, c_worker, f"worker:{c_worker} --bug scale", tmp, scenario)
        elif scenario == "wrong_numpy":
            wrong(attnfuzz, c_worker, f"worker:{python} {os.path.join(here, 'worker_wrong_numpy.py')}", tmp, scenario)
        elif scenario == "clean":
            clean(attnfuzz, c_worker, tmp)
        elif scenario == "bind":
            bind(attnfuzz, c_worker, tmp)
        elif scenario == "restart_cost":
            restart_cost(attnfuzz, c_worker, tmp)
        elif scenario == "batch":
            batch(attnfuzz, c_worker, tmp, "error")
        elif scenario == "batch_crash":
            batch(attnfuzz, c_worker, tmp, "crash")
        elif scenario == "batch_device":
            batch(attnfuzz, c_worker, tmp, "device")
        elif scenario == "batch_hang":
            batch_hang(attnfuzz, c_worker, tmp)
        elif scenario in ("min_only_failing", "min_jobs_shared", "min_budget", "min_dir", "new_amid_known",
                          "known_crash", "pipeline", "compiled_seeds", "compiled_errors"):
            globals()[scenario](attnfuzz, c_worker, tmp)
        elif scenario == "clean_masked_rows_nan":
            clean(attnfuzz, c_worker, tmp, (("--masked-rows nan", 500),))
        else:
            print(f"unknown scenario {scenario}", file=sys.stderr)
            return 2
    print(f"{scenario}: {'FAIL' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
