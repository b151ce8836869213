#!/usr/bin/env bash
# bench_worker.sh - what the worker protocol costs, in one table: execs/s of the built-in
# explicit backend in-process, of the C worker (tests/worker/c_worker.c) and of the
# numpy_ref Python worker, each on 1x1x1x1 cases (--tiny) and on the default distribution;
# the protocol's cost per execution (C worker minus in-process; and with --no-bind, the job
# and its worker free to run on different CPUs); and a C worker that
# "compiles" for 0.5 s on each new compile_key (execs/s and the share of time compiling).
#
#   scripts/bench_worker.sh [SECONDS]       (each campaign runs SECONDS, default 5)
#
# Environment: BUILD (default build/; needs attnfuzz and tests/c_worker), PY (default
# .venv/bin/python, with numpy). Every campaign is `attnfuzz fuzz --backend B --time S
# --no-minimize --quiet --stats F`; CPU seconds are those of attnfuzz and its worker
# together (GNU time; the worker is attnfuzz's child), so execs per CPU second is the
# rate one core would sustain. Exit 0 when every target passes, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
BUILD=${BUILD:-build}
PY=${PY:-.venv/bin/python}
AF=$BUILD/attnfuzz
CW=$BUILD/tests/c_worker
for f in "$AF" "$CW" "$PY"; do
    [[ -x $f ]] || { echo "bench_worker.sh: $f not found (cmake --build $BUILD; scripts/setup.sh for .venv)" >&2; exit 2; }
done
[[ -x /usr/bin/time ]] || { echo "bench_worker.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run NAME SPEC FLAGS...: one campaign; appends "name execs wall cpu compile findings" to rows
run() {
    local name=$1 spec=$2
    shift 2
    rm -rf "$TMP/crashes"
    /usr/bin/time -f "%e %U %S" -o "$TMP/time" "$AF" fuzz --backend "$spec" --time "$SECS" --no-minimize --quiet \
        --crashes "$TMP/crashes" --stats "$TMP/stats.json" "$@" >/dev/null 2>"$TMP/err" || {
        local rc=$?
        # exit 1 is "findings", still a measurement; anything else is a failure
        if [[ $rc != 1 ]]; then echo "bench_worker.sh: $name failed (exit $rc):" >&2; tail -5 "$TMP/err" >&2; exit 2; fi
    }
    python3 - "$name" "$TMP/stats.json" "$TMP/time" >>"$TMP/rows" <<'EOF'
import json, sys
name, stats, timef = sys.argv[1:4]
s = json.load(open(stats))
wall, user, system = (float(x) for x in open(timef).read().split()[-3:])
print(name, s["execs"], s["elapsed"], user + system, s.get("compile_seconds", 0.0), s["findings_total"])
EOF
}

NUMPY_REF="worker:$PY -m attnfuzz.targets.numpy_ref"
run explicit_tiny explicit --tiny
run explicit_default explicit
run c_worker_tiny "worker:$CW" --tiny
run c_worker_default "worker:$CW"
run c_worker_nobind "worker:$CW" --tiny --no-bind
run numpy_ref_tiny "$NUMPY_REF" --tiny
run numpy_ref_default "$NUMPY_REF"
run c_worker_compile "worker:$CW --compile-sleep 0.5"

python3 - "$TMP/rows" "$SECS" "$(git log -1 --format=%h 2>/dev/null || echo '?')" <<'EOF'
import sys
rows = {}
for line in open(sys.argv[1]):
    name, execs, elapsed, cpu, compile_s, findings = line.split()
    rows[name] = dict(execs=int(execs), elapsed=float(elapsed), cpu=float(cpu), compile_s=float(compile_s),
                      findings=int(findings))
for r in rows.values():
    r["rate"] = r["execs"] / r["elapsed"]
    r["cpu_rate"] = r["execs"] / r["cpu"] if r["cpu"] > 0 else float("inf")
    r["us"] = 1e6 / r["rate"]

labels = {
    "explicit": "explicit, in-process",
    "c_worker": "worker: c_worker (C)",
    "numpy_ref": "worker: numpy_ref (Python)",
}
print(f"bench_worker.sh: {sys.argv[2]} s per campaign, commit {sys.argv[3]}")
print()
print(f"| {'backend':<34} | {'cases':<7} | {'execs':>7} | {'execs/s':>8} | {'us/exec':>8} | {'execs/CPU-s':>11} | {'findings':>8} |")
print(f"|{'-' * 36}|{'-' * 9}|{'-' * 9}|{'-' * 10}|{'-' * 10}|{'-' * 13}|{'-' * 10}|")
for key, label in labels.items():
    for dist in ("tiny", "default"):
        r = rows[f"{key}_{dist}"]
        print(f"| {label:<34} | {dist:<7} | {r['execs']:>7} | {r['rate']:>8.0f} | {r['us']:>8.1f} | "
              f"{r['cpu_rate']:>11.0f} | {r['findings']:>8} |")
r = rows["c_worker_compile"]
share = r["compile_s"] / r["elapsed"]
print(f"| {'c_worker --compile-sleep 0.5':<34} | {'default':<7} | {r['execs']:>7} | {r['rate']:>8.0f} | "
      f"{r['us']:>8.1f} | {r['cpu_rate']:>11.0f} | {r['findings']:>8} |")
print()
proto_tiny = rows["c_worker_tiny"]["us"] - rows["explicit_tiny"]["us"]
print(f"protocol cost per execution (C worker minus in-process, tiny cases): {proto_tiny:.1f} us")
nb = rows["c_worker_nobind"]
print(f"  with --no-bind (the job and its worker on any CPU): {nb['us'] - rows['explicit_tiny']['us']:.1f} us "
      f"({nb['rate']:.0f} execs/s): the difference is waking a process on another CPU")
print("  (on the default distribution the difference is mostly c_worker's naive float64 loops against the")
print("  explicit backend's BLAS, not the protocol)")
print(f"simulated compiler: {r['compile_s']:.1f} s of {r['elapsed']:.1f} s compiling "
      f"({100 * share:.0f}%, {r['compile_s'] / 0.5:.0f} compile keys)")
print()
targets = [
    (f"protocol overhead under 20 us per execution on tiny cases: {proto_tiny:.1f} us", proto_tiny < 20.0),
    (f"numpy_ref at least 2,000 execs/s per core on tiny cases: {rows['numpy_ref_tiny']['cpu_rate']:.0f} "
     f"per CPU-second ({rows['numpy_ref_tiny']['rate']:.0f}/s wall)", rows["numpy_ref_tiny"]["cpu_rate"] >= 2000),
    (f"with a 0.5 s compile per compile_key, at least 50 execs/s: {r['rate']:.0f}/s", r["rate"] >= 50),
]
for text, ok in targets:
    print(f"{'PASS' if ok else 'FAIL'}  {text}")
sys.exit(0 if all(ok for _, ok in targets) else 1)
EOF
