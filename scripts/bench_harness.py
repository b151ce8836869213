#!/usr/bin/env python3
"""bench_harness.py - throughput of the fuzz engines, and what the structure-aware mutator
plus semantic feedback buy.

  scripts/bench_harness.py [--seconds 60] [--repeat 1] [--skip-afl] [--skip-cli]

1. Executions per second of the same checks (the default pair explicit,fused and one
   sampled relation per backend; ATTNFUZZ_MAX_FLOPS / --max-flops 2e7) under
     - libFuzzer: attnfuzz_harness (custom mutator + extra counters), one process
     - AFL++:     attnfuzz_harness, one instance, persistent mode, custom mutator
     - attnfuzz fuzz: the built-in campaign (generator + feedback pool), one process
   each for --seconds, started from corpus/seeds/.
2. Distinct feature combinations reached in --seconds by libFuzzer with the custom
   mutator and semantic feedback (attnfuzz_harness) and without them (attnfuzz_harness_plain:
   byte mutators and code coverage only), from the same seeds and dictionary: every input
   of the final corpus goes through the replay build with ATTNFUZZ_PRINT_FEATURES=1, and
   inputs that actually ran (not skipped for their flops) are counted by distinct
   af_case_features bit set and by distinct feedback combination (fuzz/feedback.h).

Python standard library only. Builds build-fuzz-libfuzzer (clang), build-fuzz-afl
(afl-clang-fast) and build-fuzz-replay when missing. Prints a table; --json FILE also
writes the numbers.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(REPO, "corpus", "seeds")
DICT = os.path.join(REPO, "fuzz", "attnfuzz.dict")


def blas_coretype():
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return None
    if re.search(r"\bavx512bw\b", flags):
        return "SkylakeX"
    if re.search(r"\bavx2\b", flags):
        return "Haswell"
    return None


def base_env(max_flops):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNFUZZ_")}
    core = blas_coretype()
    if core:
        env["OPENBLAS_CORETYPE"] = core
    env["OPENBLAS_NUM_THREADS"] = "1"
    env["ATTNFUZZ_QUIET"] = "1"
    env["ATTNFUZZ_MAX_FLOPS"] = str(max_flops)
    return env


def build(engine, directory, cc, targets):
    if not os.path.exists(os.path.join(directory, "CMakeCache.txt")):
        cmd = ["cmake", "-S", REPO, "-B", directory, "-DAF_FUZZ_ENGINE=" + engine, "-DAF_TESTS=OFF"]
        if cc:
            cmd.append("-DCMAKE_C_COMPILER=" + cc)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    cmd = ["cmake", "--build", directory, "-j", str(os.cpu_count() or 1)]
    for t in targets:
        cmd += ["--target", t]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:])
        raise SystemExit("bench_harness: build of %s failed" % directory)


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_table():
    """{pid: (ppid, starttime, cpu seconds)} of every process, from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        table[int(name)] = (int(fields[1]), fields[19], (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return table


def run_measured(cmd, env, cwd, capture=True):
    """Runs cmd; returns (output, wall seconds, CPU seconds of it and all its descendants).
    CPU time is sampled from /proc every 0.2 s (AFL++ kills its fork server, so the kernel's
    child rusage misses the target): execs per CPU second stay comparable when other work
    shares the machine."""
    out = tempfile.TemporaryFile(mode="w+")
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out if capture else subprocess.DEVNULL,
                         stderr=subprocess.STDOUT if capture else subprocess.DEVNULL, text=True)
    seen = {}
    while True:
        done = p.poll() is not None
        table = proc_table()
        tree, grew = {p.pid}, True
        while grew:
            grew = False
            for pid, (ppid, _, _) in table.items():
                if ppid in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        for pid in tree:
            if pid in table:
                key = (pid, table[pid][1])
                seen[key] = max(seen.get(key, 0.0), table[pid][2])
        if done:
            break
        time.sleep(0.2)
    wall = time.time() - t0
    out.seek(0)
    return out.read(), wall, sum(seen.values())


def harness_stats(prefix):
    """Sums the ATTNFUZZ_STATS files (one per harness process) under prefix."""
    total = {"inputs": 0, "skipped": 0, "with_findings": 0, "flops_run": 0.0}
    d, base = os.path.split(prefix)
    for name in os.listdir(d):
        if name.startswith(base + ".") and not name.endswith(".tmp"):
            for line in open(os.path.join(d, name)):
                k, _, v = line.partition(" ")
                if k in total:
                    total[k] += float(v) if k == "flops_run" else int(v)
    return total


def fresh_corpus(work, name):
    d = os.path.join(work, name)
    shutil.copytree(SEEDS, d)
    return d


def run_libfuzzer(binary, work, name, seconds, env):
    corpus = fresh_corpus(work, name + "-corpus")
    art = os.path.join(work, name + "-artifacts") + "/"
    os.makedirs(art)
    stats = os.path.join(work, name + "-stats")
    e = dict(env, ATTNFUZZ_CRASHES=os.path.join(work, name + "-bundles"), ATTNFUZZ_STATS=stats)
    cmd = [binary, corpus, "-max_total_time=%d" % seconds, "-dict=" + DICT, "-max_len=512", "-timeout=30",
           "-rss_limit_mb=2560", "-print_final_stats=1", "-seed=1", "-artifact_prefix=" + art]
    output, wall, cpu = run_measured(cmd, e, work)
    execs = re.search(r"stat::number_of_executed_units:\s*(\d+)", output)
    if not execs:
        sys.stderr.write(output[-2000:])
        raise SystemExit("bench_harness: %s did not report its stats" % binary)
    n = int(execs.group(1))
    if re.search(r"ERROR: (libFuzzer|AddressSanitizer|UndefinedBehaviorSanitizer)|deadly signal", output):
        sys.stderr.write("bench_harness: %s stopped on an error after %.0fs:\n%s\n" % (
            name, wall, "\n".join(l for l in output.splitlines() if not l.startswith("#"))[-2500:]))
    return {"engine": name, "execs": n, "seconds": wall, "execs_per_sec": n / wall, "cpu": cpu, "corpus": corpus,
            "harness": harness_stats(stats)}


def run_afl(binary, mutator, work, seconds, env):
    out = os.path.join(work, "afl-out")
    e = dict(env, AFL_SKIP_CPUFREQ="1", AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES="1", AFL_NO_UI="1",
             AFL_NO_AFFINITY="1", ATTNFUZZ_CRASHES=os.path.join(work, "afl-bundles"),
             ATTNFUZZ_STATS=os.path.join(work, "afl-stats"))
    if mutator:
        e["AFL_CUSTOM_MUTATOR_LIBRARY"] = mutator
    cmd = ["afl-fuzz", "-i", SEEDS, "-o", out, "-x", DICT, "-t", "5000", "-V", str(seconds), "--", binary]
    output, wall, cpu = run_measured(cmd, e, work)
    stats_path = os.path.join(out, "default", "fuzzer_stats")
    if not os.path.exists(stats_path):
        sys.stderr.write(output[-2000:])
        raise SystemExit("bench_harness: afl-fuzz wrote no fuzzer_stats")
    stats = {}
    for line in open(stats_path):
        k, _, v = line.partition(":")
        stats[k.strip()] = v.strip()
    execs = int(stats["execs_done"])
    # fuzzer_stats is rewritten once a minute and at a clean exit, plot_data every 5 s:
    # take whichever saw more, so an unclean exit still counts what ran
    try:
        rows = [l.split(",") for l in open(os.path.join(out, "default", "plot_data")) if not l.startswith("#")]
        execs = max(execs, int(rows[-1][11]) if rows else 0)
    except (OSError, ValueError, IndexError):
        pass
    if "We're done here" not in output:
        sys.stderr.write("bench_harness: afl-fuzz did not end cleanly; its last lines:\n" + output[-1500:] + "\n")
    return {"engine": "afl++", "execs": execs, "seconds": wall, "execs_per_sec": execs / wall, "cpu": cpu,
            "corpus": os.path.join(out, "default", "queue"), "stability": stats.get("stability", "?"),
            "harness": harness_stats(os.path.join(work, "afl-stats"))}


def run_cli(cli, work, seconds, env):
    stats = os.path.join(work, "cli-stats.json")
    cmd = [cli, "fuzz", "--time", str(seconds), "--stats", stats, "--quiet", "--crashes",
           os.path.join(work, "cli-bundles"), "--max-flops", env["ATTNFUZZ_MAX_FLOPS"]]
    _, _, cpu = run_measured(cmd, env, work, capture=False)
    s = json.load(open(stats))
    return {"engine": "attnfuzz fuzz", "execs": int(s["execs"]), "seconds": float(s["elapsed"]),
            "execs_per_sec": float(s["execs_per_sec"]), "cpu": cpu, "corpus": None}


def count_features(replay, corpus, env):
    """Distinct af_case_features and feedback combinations over the inputs that ran."""
    e = dict(env, ATTNFUZZ_PRINT_FEATURES="1", ATTNFUZZ_CRASHES=os.path.join(os.path.dirname(corpus), "replay-bundles"))
    r = subprocess.run([replay, corpus], env=e, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    feats, combos, inputs, ran = set(), set(), 0, 0
    for line in r.stdout.splitlines():
        m = re.match(r"features (0x[0-9a-f]+) combo (\d+) ran (\d)", line)
        if not m:
            continue
        inputs += 1
        if m.group(3) == "1":
            ran += 1
            feats.add(m.group(1))
            combos.add(int(m.group(2)))
    return {"inputs": inputs, "ran": ran, "features": len(feats), "combos": len(combos)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=60, help="length of every run (default 60)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of the feature comparison (default 1)")
    ap.add_argument("--max-flops", type=float, default=2e7, help="ATTNFUZZ_MAX_FLOPS and --max-flops (2e7)")
    ap.add_argument("--skip-afl", action="store_true")
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()

    lf_dir = os.path.join(REPO, "build-fuzz-libfuzzer")
    afl_dir = os.path.join(REPO, "build-fuzz-afl")
    rp_dir = os.path.join(REPO, "build-fuzz-replay")
    build("libfuzzer", lf_dir, "clang", ["attnfuzz_harness", "attnfuzz_harness_plain"])
    build("replay", rp_dir, None, ["attnfuzz_replay", "attnfuzz"])
    have_afl = not args.skip_afl and shutil.which("afl-fuzz") and shutil.which("afl-clang-fast")
    if have_afl:
        build("afl", afl_dir, "afl-clang-fast", ["attnfuzz_harness", "attnfuzz_afl_mutator"])

    env = base_env(args.max_flops)
    replay = os.path.join(rp_dir, "fuzz", "attnfuzz_replay")
    work = tempfile.mkdtemp(prefix="attnfuzz-bench-")
    results = {"seconds": args.seconds, "max_flops": args.max_flops, "rates": [], "features": []}
    try:
        print("attnfuzz harness benchmark: %ds per run, checks explicit,fused + sampled relations, "
              "max flops %.3g, OPENBLAS_CORETYPE=%s, %d CPUs, load average %.2f" % (
                  args.seconds, args.max_flops, env.get("OPENBLAS_CORETYPE"), os.cpu_count() or 0, os.getloadavg()[0]),
              flush=True)
        rates = []
        seen_with = None
        rates.append(run_libfuzzer(os.path.join(lf_dir, "fuzz", "attnfuzz_harness"), work, "libfuzzer", args.seconds, env))
        seen_with = count_features(replay, rates[-1]["corpus"], env)
        if have_afl:
            rates.append(run_afl(os.path.join(afl_dir, "fuzz", "attnfuzz_harness"),
                                 os.path.join(afl_dir, "fuzz", "libattnfuzz_afl_mutator.so"), work, args.seconds, env))
        if not args.skip_cli:
            rates.append(run_cli(os.path.join(rp_dir, "attnfuzz"), work, args.seconds, env))

        print("\nexecutions per second (one process each; per CPU second too, as other work may share the machine;")
        print("skipped = inputs over the flop limit, returned at once; Mflop/s = flops of the cases that ran)")
        print("%-14s %8s %7s %8s %6s %11s %8s %8s" % ("engine", "execs", "seconds", "execs/s", "cpu s", "execs/cpu-s",
                                                     "skipped", "Mflop/s"))
        for r in rates:
            h = r.get("harness")
            skipped = "%.0f%%" % (100.0 * h["skipped"] / h["inputs"]) if h and h["inputs"] else "0%"
            mflops = "%.1f" % (h["flops_run"] / r["seconds"] / 1e6) if h else "-"
            extra = "  (stability %s)" % r["stability"] if "stability" in r else ""
            print("%-14s %8d %7.1f %8.1f %6.1f %11.1f %8s %8s%s" % (r["engine"], r["execs"], r["seconds"], r["execs_per_sec"],
                                                                   r["cpu"], r["execs"] / max(r["cpu"], 1e-9), skipped,
                                                                   mflops, extra))
            results["rates"].append({k: v for k, v in r.items() if k != "corpus"})

        rows = []
        for rep in range(args.repeat):
            if rep == 0:
                w = dict(rates[0], **seen_with)
            else:
                w = run_libfuzzer(os.path.join(lf_dir, "fuzz", "attnfuzz_harness"), work, "libfuzzer-%d" % rep,
                                  args.seconds, env)
                w.update(count_features(replay, w["corpus"], env))
            p = run_libfuzzer(os.path.join(lf_dir, "fuzz", "attnfuzz_harness_plain"), work, "plain-%d" % rep,
                              args.seconds, env)
            p.update(count_features(replay, p["corpus"], env))
            rows.append((w, p))
        if have_afl:
            afl_feats = count_features(replay, rates[1]["corpus"], env)

        seeds = count_features(replay, SEEDS, env)
        print("\ndistinct feature combinations reached in %ds (inputs of the final corpus that ran)" % args.seconds)
        print("%-44s %8s %8s %10s %8s" % ("engine", "execs", "corpus", "features", "combos"))
        print("%-44s %8s %8d %10d %8d" % ("seed corpus alone", "-", seeds["ran"], seeds["features"], seeds["combos"]))
        for i, (w, p) in enumerate(rows):
            tag = " #%d" % (i + 1) if args.repeat > 1 else ""
            print("%-44s %8d %8d %10d %8d" % ("libFuzzer + custom mutator + feedback" + tag, w["execs"], w["ran"],
                                             w["features"], w["combos"]))
            print("%-44s %8d %8d %10d %8d" % ("libFuzzer plain (bytes, code coverage)" + tag, p["execs"], p["ran"],
                                             p["features"], p["combos"]))
            results["features"].append({"with": {k: v for k, v in w.items() if k != "corpus"},
                                        "without": {k: v for k, v in p.items() if k != "corpus"}})
        if have_afl:
            print("%-44s %8d %8d %10d %8d" % ("AFL++ + custom mutator + edges", rates[1]["execs"], afl_feats["ran"],
                                             afl_feats["features"], afl_feats["combos"]))
            results["afl_features"] = afl_feats
        results["seed_features"] = seeds
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
    finally:
        if args.keep:
            print("work directory kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
