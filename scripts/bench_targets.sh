#!/usr/bin/env bash
# bench_targets.sh - execs/s of real target variants through attnfuzz, one table: for each
# variant a campaign on 1x1x1x1 cases (--tiny) and one on the default distribution, with
# the rate over the campaign's time (from its first case: starting the workers excluded),
# the rate per job (with --jobs N, each job's own rate summed, divided by N; one job is
# attnfuzz and its worker taking turns, about one core), executions per CPU-second (attnfuzz
# and its workers, start-up included), the cases no variant could run (skipped) and the
# share of time spent compiling. Then the targets of
# the "Real targets on CPU" issue with PASS/FAIL: the torch eager variants at least 1,000
# execs/s per core on tiny cases; every compiled variant (ort, openvino, tvm, jax,
# torch.compile, flex) at least 20 execs/s per core on the default distribution; and, on a
# GPU, the eager CUDA variants together at least 1,000 execs/s on tiny cases.
#
# Then, per stack (--stock S), the campaign users run beside the raw one: the stack's
# variants for S seconds as scripts/campaign.sh runs them (its eager and its compiled
# variants as two campaigns where a stack has both, e.g. torch-eager; minimization on, the
# stack's findings bundles as the corpus, known bugs loaded) and the same with --no-minimize
# and no corpus; the table gives both rates, their ratio (the target: at least one half),
# and where the stock campaign's time went (stats "seconds": minimization, restarts, ...).
#
#   scripts/bench_targets.sh [--tiny S] [--default S] [--stock S] [--jobs N] [--out DIR] [VARIANT...]
#
#   --tiny S      seconds of the tiny campaign per variant (default 10; 0 skips it)
#   --default S   seconds of the default-distribution campaign (default 120, the issue's
#                 "2-minute campaign"; 0 skips it)
#   --stock S     seconds of each stack's stock and raw campaigns (default 120; 0 skips them)
#   --jobs N      attnfuzz --jobs (default 1: the per-core figures)
#   --out DIR     where bench.tsv, the stats and the logs go (default a temporary directory)
#   VARIANT       STACK/VARIANT (default: every variant `python -m attnfuzz.targets --list`
#                 says is available here, numpy_ref excepted)
# e.g.  scripts/bench_targets.sh --tiny 10 --default 120 torch/sdpa_math ort/attention
# Environment: ATTNFUZZ_BIN (default build/attnfuzz; or the `attnfuzz` a wheel installed),
# ATTNFUZZ_PYTHON (default .venv/bin/python).
# scripts/gpu_campaign.sh --bench runs it for the CUDA variants.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
tiny=10 dflt=120 stock=120 jobs=1 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --tiny) tiny=$2; shift 2 ;;
    --default) dflt=$2; shift 2 ;;
    --stock) stock=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    -*) echo "bench_targets.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
af=${ATTNFUZZ_BIN:-$repo/build/attnfuzz}
py=${ATTNFUZZ_PYTHON:-$repo/.venv/bin/python}
[ -x "$af" ] || { echo "bench_targets.sh: $af not found (scripts/setup.sh builds it)" >&2; exit 2; }
[ -x "$py" ] || py=$(command -v python3)
[ -x /usr/bin/time ] || { echo "bench_targets.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }
export ATTNFUZZ_PYTHON=$py
# python/ goes on PYTHONPATH, unless this Python has attnfuzz installed from the wheel (as
# gpu_campaign.sh --wheel leaves it): then the installed package runs, as attnfuzz runs it
"$py" -c 'import os, sys, attnfuzz.__main__ as m; sys.exit(not os.access(m.binary(), os.X_OK))' 2>/dev/null \
  || export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "$out" ]; then out=$(mktemp -d); fi
mkdir -p "$out"

variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
  mapfile -t variants < <("$py" -m attnfuzz.targets --names available campaign 2> >(sed 's/^/bench_targets.sh: /' >&2))
fi
[ ${#variants[@]} -gt 0 ] || { echo "bench_targets.sh: no target variant to measure" >&2; exit 2; }

rows=$out/rows
: >"$rows"
for v in "${variants[@]}"; do
  for dist in tiny default; do
    secs=$([ $dist = tiny ] && echo "$tiny" || echo "$dflt")
    [ "$secs" != 0 ] || continue
    flags=(); [ $dist = tiny ] && flags=(--tiny)
    st=$out/stats-${v//\//_}-$dist.json
    rm -rf "$out/crashes-tmp"
    /usr/bin/time -f "%e %U %S" -o "$out/time" "$af" fuzz --backend "target:$v" --jobs "$jobs" --time "$secs" \
      --no-minimize --quiet --crashes "$out/crashes-tmp" --stats "$st" "${flags[@]}" \
      >/dev/null 2>>"$out/bench.log" || true
    echo "$v $dist $st $(cat "$out/time" | tail -1)" >>"$rows"
    echo "bench_targets.sh: $v $dist done" >&2
  done
done
rm -rf "$out/crashes-tmp"

"$py" - "$rows" "$jobs" "$tiny" "$dflt" "$out/bench.tsv" <<'EOF'
import json, os, sys
rows, jobs, tiny, dflt, tsv = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
from attnfuzz import targets
decl = {r["target"]: r for r in targets.declared_rows()}
EAGER = {t for t, r in decl.items() if not r["gpu"] and not r["compiled"] and not r["reference"]}
COMPILED = {t for t, r in decl.items() if not r["gpu"] and r["compiled"]}
CUDA_EAGER = {t for t, r in decl.items() if r["gpu"] and not r["compiled"]}
table, verdicts, cuda = [], [], {}
for line in open(rows):
    v, dist, st, wall, user, system = line.split()
    if not os.path.exists(st):
        table.append([v, dist, "-", "-", "-", "-", "-", "-", "failed (see bench.log)"])
        continue
    s = json.load(open(st))
    el = s.get("elapsed") or 1.0
    ran = s.get("execs", 0) - s.get("skipped", 0)
    frac = ran / s["execs"] if s.get("execs") else 0.0
    per_job = s.get("execs_per_sec_jobs", 0.0) * frac / jobs  # start-up excluded
    cpu = float(user) + float(system)
    per_cpu = ran / cpu if cpu > 0 else 0.0
    compile_share = 100.0 * s.get("compile_seconds", 0.0) / (el * jobs)
    table.append([v, dist, str(ran), "%.0f" % (ran / el), "%.1f" % per_job, "%.1f" % per_cpu,
                  str(s.get("skipped", 0)), "%.0f%%" % compile_share, ""])
    if dist == "tiny" and v in EAGER:
        verdicts.append(("%s: %.0f execs/s per core on tiny cases (target 1,000)" % (v, per_job), per_job >= 1000))
    if dist == "tiny" and v in CUDA_EAGER:
        cuda[v] = per_job * jobs
    if dist == "default" and v in COMPILED:
        verdicts.append(("%s: %.1f execs/s per core over %s s of the default distribution (target 20)"
                         % (v, per_job, dflt), per_job >= 20))
if cuda:
    total = sum(cuda.values())
    verdicts.append(("the eager CUDA variants together (%s): %.0f execs/s on tiny cases with %d jobs each (target 1,000)"
                     % (", ".join(sorted(cuda)), total, jobs), total >= 1000))
head = ["variant", "cases", "ran", "ran/s", "ran/s per job", "ran/CPU-s", "skipped", "compile", ""]
with open(tsv, "w") as f:
    for r in [head] + table:
        f.write("\t".join(r).rstrip("\t") + "\n")
w = [max(len(r[i]) for r in [head] + table) for i in range(len(head))]
for r in [head] + table:
    print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip())
print("\n(ran/s: over the campaign's time, from its first case; per job: each job's own rate, summed and"
      " divided by the %d job(s); CPU-s: attnfuzz and its workers, start-up included)\n" % jobs)
for text, ok in verdicts:
    print("%s  %s" % ("PASS" if ok else "FAIL", text))
EOF
echo "bench_targets.sh: results in $out (bench.tsv, stats-*.json, bench.log)" >&2

# the stock campaign per stack, beside the raw one
[ "$stock" != 0 ] || exit 0
srows=$out/stock-rows
: >"$srows"
# the campaigns scripts/campaign.sh runs over these variants (attnfuzz.targets.campaigns:
# NAME STACK/VARIANT... per line)
while read -r name vs; do
  backends=()
  for v in $vs; do backends+=(--backend "target:$v"); done
  stack=${name%%-*}
  corpus=()
  [ -d "corpus/findings/$stack/bundles" ] && corpus=(--corpus "corpus/findings/$stack/bundles")
  for mode in raw stock; do
    st=$out/stats-stack-$name-$mode.json
    rm -rf "$out/crashes-$name-$mode"
    flags=(--no-minimize)
    [ $mode = stock ] && flags=("${corpus[@]}")
    "$af" fuzz "${backends[@]}" --jobs "$jobs" --time "$stock" --quiet --crashes "$out/crashes-$name-$mode" \
      --stats "$st" "${flags[@]}" >/dev/null 2>>"$out/bench.log" || true
    echo "bench_targets.sh: $name $mode done" >&2
  done
  echo "$name" >>"$srows"
done < <("$py" -m attnfuzz.targets --campaigns "${variants[@]}")
"$py" - "$srows" "$out" "$stock" <<'EOF' | tee -a "$out/bench.tsv"
import json, os, sys
rows, out, secs = sys.argv[1], sys.argv[2], sys.argv[3]


def load(stack, mode):
    try:
        return json.load(open(os.path.join(out, "stats-stack-%s-%s.json" % (stack, mode))))
    except (OSError, ValueError):
        return {}


def rate(s):
    return (s.get("execs", 0) - s.get("skipped", 0)) / (s.get("elapsed") or 1e-9) if s else 0.0


print("\nstock campaigns (%s s each; ran/s: cases some variant ran, per second)" % secs)
print("  ".join(("stack", "raw ran/s", "stock ran/s", "ratio", "minimize", "restarts", "bundles", "known hits",
                 "stock time split (s)")))
verdicts = []
for stack in open(rows).read().split():
    raw, st = load(stack, "raw"), load(stack, "stock")
    r0, r1 = rate(raw), rate(st)
    ratio = r1 / r0 if r0 > 0 else 0.0
    el = st.get("elapsed") or 1e-9
    t = st.get("seconds", {})
    mini = st.get("minimize_seconds", 0.0)
    known = st.get("known_hits", {})
    known = sum(known.values()) if isinstance(known, dict) else known
    split = " ".join("%s %.0f" % (k, t.get(k, 0.0)) for k in ("generate", "reference", "protocol", "target",
                                                               "compile", "checks", "restarts"))
    split += " minimize %.0f" % mini
    print("  ".join([stack, "%.1f" % r0, "%.1f" % r1, "%.2f" % ratio, "%.0f%%" % (100 * mini / el),
                     "%.0f%%" % (100 * t.get("restarts", 0.0) / el), str(len(st.get("signatures", []))),
                     str(known), split]))
    verdicts.append(("%s: the stock campaign runs %.2f of the raw rate (target 0.5)" % (stack, ratio), ratio >= 0.5))
for text, ok in verdicts:
    print("%s  %s" % ("PASS" if ok else "FAIL", text))
EOF
