#!/usr/bin/env python3
"""regress_pool_test.py ATTNFUZZ C_WORKER REPO WORK - `attnfuzz regress` starts a worker once
per backend for the whole corpus, restarts it after a crash, and --jobs 2 says what --jobs 1
says.

The corpus: the six bundles of corpus/regress, each copied twice, recorded as clean runs of
two C workers A and B (tests/worker/c_worker.c, correct on every case) and named so that they
interleave, A, B, A, B, ...; a third worker C crashes on cases with q_len + kv_len + head_dim
divisible by 4 (one of the six, the fourth), whose copy is recorded as a crash. Each worker
appends a line to its own file as it starts (c_worker --affinity-file), so the processes are
counted here, independently of what attnfuzz says.
  - one job: A and B start once each (one line in each file, and the stats line says 2
    workers), every verdict is "same";
  - C: its crash replays as "same" (a crash both times), the worker is restarted (the stats
    line says 1 restart, C's file has more than one line) and the two bundles after it still
    replay "same";
  - --jobs 2: the same verdict lines in the same order, the same summary line and the same
    JUnit XML but for its times;
  - `replay` of the twelve bundles starts A and B once each as well;
  - three workers D, E, F that each take 2 s to start (c_worker --start-sleep 2), a corpus
    naming all three: regress starts them side by side before the first bundle. Each logs its
    start, its hello and its runs with the time (c_worker --event-log, one file, one clock):
    every hello precedes the first run, and every start precedes every hello (one after
    another, the first worker's hello would come before the second one's start);
  - a corpus naming more workers than regress holds open at once (max(4, 2 x CPUs), at most
    16): each starts once, and no start finds that many already running (their start and
    end events);
  - --jobs 2 over A's six bundles, B's six and one bundle of a worker H recorded as a hang
    (--timeout 7: replaying it waits 7 s, more than twelve ordinary bundles are reckoned
    to take): H's bundle gets a job of its own and A's and B's share the other, each
    worker started by one job (c_worker --ppid-file: the process that started it), where
    shares of equal counts put A beside H. Standard library only."""
import json
import os
import re
import shutil
import subprocess
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def copy_as(src, dst, spec, kind):
    """The bundle src as a bundle of backend spec whose verdict was kind."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "case.json")
    with open(path) as f:
        meta = json.load(f)
    meta["kind"] = kind
    meta["who"] = spec
    meta["relation"] = None
    rec = meta["backends"][0]
    rec["name"] = spec
    rec["verdict"] = kind
    meta["backends"] = [rec]
    with open(path, "w") as f:
        json.dump(meta, f)


def lines_of(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [l for l in f if l.strip()]


def run(af, args):
    p = subprocess.run([af, "regress", "--no-known"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=240)
    m = re.search(r"attnfuzz regress: (\d+) bundles, (\d+) jobs?: (\d+) workers started \((\d+) restarts after a "
                  r"fault\)", p.stderr)
    if not m:
        fail("no stats line on stderr:\n" + p.stderr)
    return p.returncode, p.stdout, p.stderr, [int(g) for g in m.groups()]


def junit_sans_times(path):
    with open(path) as f:
        xml = f.read()
    return re.sub(r' (time|timestamp)="[^"]*"', "", xml)


def main():
    af, worker, repo, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src = os.path.join(repo, "corpus", "regress")
    names = sorted(n for n in os.listdir(src) if os.path.exists(os.path.join(src, n, "case.json")))
    if len(names) != 6:
        fail("corpus/regress holds %d bundles, this test counts on 6" % len(names))
    logs = {w: os.path.join(work, "starts-%s.log" % w) for w in "ABC"}
    spec = {w: "worker:%s --name %s --affinity-file %s" % (worker, w, logs[w]) for w in "AB"}
    spec["C"] = "worker:%s --name C --fault crash --fault-mod 4 --affinity-file %s" % (worker, logs["C"])

    ab = os.path.join(work, "ab")
    for i, n in enumerate(names):
        for w in "AB":
            copy_as(os.path.join(src, n), os.path.join(ab, "%02d-%s-%s" % (i, w, n)), spec[w], "ok")
    crash = os.path.join(work, "crash")
    crashing = []
    for i, n in enumerate(names):
        with open(os.path.join(src, n, "case.json")) as f:
            c = json.load(f)["case"]
        kind = "crash" if (c["q_len"] + c["kv_len"] + c["head_dim"]) % 4 == 0 else "ok"
        if kind == "crash":
            crashing.append(i)
        copy_as(os.path.join(src, n), os.path.join(crash, "%02d-C-%s" % (i, n)), spec["C"], kind)
    if len(crashing) != 1 or crashing[0] >= 5:
        fail("want one crashing case before the last, got %s" % crashing)

    # one job, A and B interleaved: each started once
    rc, out, err, st = run(af, ["--strict", "--junit", os.path.join(work, "ab-1.xml"), ab])
    verdicts = [l for l in out.splitlines() if l and not l[0].isdigit()]
    if rc != 0 or len(verdicts) != 12 or any(not l.startswith("same ") for l in verdicts):
        fail("A/B corpus, one job: exit %d\n%s%s" % (rc, out, err))
    order = [re.search(r"/(\d\d-[AB])-", l).group(1) for l in verdicts]
    if order != ["%02d-%s" % (i, w) for i in range(6) for w in "AB"]:
        fail("verdicts not in the corpus's order: %s" % order)
    for w in "AB":
        if len(lines_of(logs[w])) != 1:
            fail("worker %s started %d times for 6 of its bundles interleaved with another's"
                 % (w, len(lines_of(logs[w]))))
    if st[2] != 2 or st[3] != 0:
        fail("stats line says %d workers started, %d restarts; want 2, 0:\n%s" % (st[2], st[3], err))

    # --jobs 2: the same output and JUnit
    for w in "AB":
        os.remove(logs[w])
    rc2, out2, err2, st2 = run(af, ["--strict", "--jobs", "2", "--junit", os.path.join(work, "ab-2.xml"), ab])
    if rc2 != rc or out2 != out:
        fail("--jobs 2 said otherwise (exit %d):\n%s\n--jobs 1 (exit %d):\n%s" % (rc2, out2, rc, out))
    if junit_sans_times(os.path.join(work, "ab-1.xml")) != junit_sans_times(os.path.join(work, "ab-2.xml")):
        fail("--jobs 2 wrote another JUnit XML")
    if st2[1] != 2 or st2[2] != 2:  # the shares are cut between A's bundles and B's
        fail("--jobs 2: %d jobs, %d workers started; want 2, 2" % (st2[1], st2[2]))

    # replay over many bundles shares the pool too
    for w in "AB":
        os.remove(logs[w])
    dirs = sorted(os.path.join(ab, d) for d in os.listdir(ab))
    p = subprocess.run([af, "replay", "--no-known"] + dirs, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=240)
    if p.returncode != 0 or len(p.stdout.splitlines()) != 12:
        fail("replay of the A/B corpus: exit %d\n%s%s" % (p.returncode, p.stdout, p.stderr))
    for w in "AB":
        if len(lines_of(logs[w])) != 1:
            fail("replay: worker %s started %d times for 6 bundles" % (w, len(lines_of(logs[w]))))

    # a crash: restarted, the later bundles still replay
    for jobs in ("1", "2"):
        if os.path.exists(logs["C"]):
            os.remove(logs["C"])
        xml = os.path.join(work, "crash-%s.xml" % jobs)
        rc, out, err, st = run(af, ["--strict", "--jobs", jobs, "--junit", xml, crash])
        verdicts = [l for l in out.splitlines() if l and not l[0].isdigit()]
        if rc != 0 or len(verdicts) != 6 or any(not l.startswith("same ") for l in verdicts):
            fail("crash corpus, --jobs %s: exit %d\n%s%s" % (jobs, rc, out, err))
        if "recorded crash, now crash" not in verdicts[crashing[0]]:
            fail("the crashing bundle: %s" % verdicts[crashing[0]])
        if st[3] != 1:
            fail("--jobs %s: %d restarts after a fault, want 1:\n%s" % (jobs, st[3], err))
        if len(lines_of(logs["C"])) < 2:
            fail("--jobs %s: worker C started %d times, a crash and later bundles want a restart"
                 % (jobs, len(lines_of(logs["C"]))))
        if jobs == "1":
            first = (out, junit_sans_times(xml))
        elif (out, junit_sans_times(xml)) != first:
            fail("crash corpus: --jobs 2 differs from --jobs 1:\n%s\n%s" % (out, first[0]))
    # workers that are slow to start: all started at once, before the first run
    events = os.path.join(work, "events.log")
    slow = os.path.join(work, "slow")
    for w in "DEF":
        sp = "worker:%s --name %s --start-sleep 2 --event-log %s" % (worker, w, events)
        for i, n in enumerate(names[:2]):
            copy_as(os.path.join(src, n), os.path.join(slow, "%02d-%s-%s" % (i, w, n)), sp, "ok")
    rc, out, err, st = run(af, ["--strict", slow])
    verdicts = [l for l in out.splitlines() if l and not l[0].isdigit()]
    if rc != 0 or len(verdicts) != 6 or any(not l.startswith("same ") for l in verdicts):
        fail("slow workers: exit %d\n%s%s" % (rc, out, err))
    ev = {}  # event -> worker -> times
    for line in lines_of(events):
        name, what, _pid, t = line.split()
        ev.setdefault(what, {}).setdefault(name, []).append(float(t))
    for what in ("start", "hello"):
        if sorted(ev.get(what, {})) != list("DEF") or any(len(v) != 1 for v in ev[what].values()):
            fail("slow workers: want one %s of each of D, E, F:\n%s" % (what, "".join(lines_of(events))))
    if sorted(ev.get("run", {})) != list("DEF"):
        fail("slow workers: not every worker ran:\n%s" % "".join(lines_of(events)))
    starts = [v[0] for v in ev["start"].values()]
    hellos = [v[0] for v in ev["hello"].values()]
    first_run = min(t for v in ev["run"].values() for t in v)
    if max(hellos) >= first_run:
        fail("slow workers: a bundle ran before every worker had started:\n%s" % "".join(lines_of(events)))
    if max(starts) >= min(hellos):
        fail("slow workers: started one after another, not side by side:\n%s" % "".join(lines_of(events)))
    if st[2] != 3:
        fail("slow workers: stats line says %d workers started, want 3:\n%s" % (st[2], err))

    # more workers than may be open at once: the rest start as the earlier ones end
    limit = min(16, max(4, 2 * len(os.sched_getaffinity(0))))
    events = os.path.join(work, "events-many.log")
    many = os.path.join(work, "many")
    names_many = ["W%02d" % k for k in range(limit + 2)]
    for k, w in enumerate(names_many):
        sp = "worker:%s --name %s --event-log %s" % (worker, w, events)
        copy_as(os.path.join(src, names[k % len(names)]), os.path.join(many, "%02d-%s" % (k, w)), sp, "ok")
    rc, out, err, st = run(af, ["--strict", many])
    if rc != 0 or st[2] != len(names_many):
        fail("%d workers: exit %d, %d started\n%s%s" % (len(names_many), rc, st[2], out, err))
    live, seen = set(), []
    for line in lines_of(events):
        name, what, _pid, _t = line.split()
        if what == "start":
            if len(live) >= limit:
                fail("%s started with %d workers running (%s), at most %d may be:\n%s"
                     % (name, len(live), sorted(live), limit, "".join(lines_of(events))))
            live.add(name)
            seen.append(name)
        elif what == "end":
            live.discard(name)
    if sorted(seen) != names_many:
        fail("want each of %d workers started once: %s" % (len(names_many), seen))

    # --jobs 2, shared by cost: the hang alone in one job, A and B in the other
    parents = os.path.join(work, "parents.log")
    lpt = os.path.join(work, "lpt")
    for i, n in enumerate(names):
        for w in "AB":
            sp = "worker:%s --name %s --ppid-file %s" % (worker, w, parents)
            copy_as(os.path.join(src, n), os.path.join(lpt, "%02d-%s-%s" % (i, w, n)), sp, "ok")
    with open(os.path.join(src, names[0], "case.json")) as f:
        c = json.load(f)["case"]
    hang_mod = c["q_len"] + c["kv_len"] + c["head_dim"]  # c_worker hangs on this case alone
    sp = "worker:%s --name H --fault hang --fault-mod %d --ppid-file %s" % (worker, hang_mod, parents)
    copy_as(os.path.join(src, names[0]), os.path.join(lpt, "99-H-%s" % names[0]), sp, "timeout")
    rc, out, err, st = run(af, ["--strict", "--jobs", "2", "--timeout", "7", "--compile-timeout", "0.1", lpt])
    verdicts = [l for l in out.splitlines() if l and not l[0].isdigit()]
    if rc != 0 or len(verdicts) != 13 or any(not l.startswith("same ") for l in verdicts):
        fail("hang corpus, --jobs 2: exit %d\n%s%s" % (rc, out, err))
    started_by = {}
    for line in lines_of(parents):
        name, ppid = line.split()
        started_by.setdefault(name, set()).add(ppid)
    if sorted(started_by) != list("ABH") or any(len(v) != 1 for v in started_by.values()):
        fail("hang corpus: want A, B and H each started by one job: %s" % started_by)
    if started_by["A"] != started_by["B"] or started_by["A"] == started_by["H"]:
        fail("hang corpus: want A and B in one job and H in the other: %s" % started_by)

    print("ok: 12 interleaved bundles on 2 workers started once each (regress and replay); a crash restarted "
          "its worker; --jobs 2 output and JUnit equal to --jobs 1; 3 slow workers started side by side before the first run; %d workers started at most %d at a time; --jobs 2 gave a hang a job of its own" % (len(names_many), limit))


if __name__ == "__main__":
    main()
