#!/usr/bin/env bash
# What a backward case costs in a campaign with the built-ins, in one run on one core: the
# default campaign (explicit,fused, every relation sampled) on the same seed three times,
# forward-only (--backward 0), every case backward (--backward 1) and the default share
# (1/3), and where the time goes; the ratio is the time per backward case over the time per
# forward case (target: at most about 3). The flop cap counts a backward case 3.5 times its
# forward, so backward cases are drawn smaller; the same pair of runs with a cap that binds no
# case (--max-flops 1e15) gives the cost of a backward case of the same shapes (distribution).
#   scripts/bench_backward.sh [RUNS [SEED]]     (default 4000 runs, seed 1)
# ATTNFUZZ=path picks the executable (default build/attnfuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-4000}
seed=${2:-1}
af=${ATTNFUZZ:-build/attnfuzz}
[ -x "$af" ] || { echo "bench_backward.sh: $af not found (build first, or set ATTNFUZZ)" >&2; exit 2; }
core=""
if grep -q avx512bw /proc/cpuinfo; then core=SkylakeX; elif grep -q avx2 /proc/cpuinfo; then core=Haswell; fi
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$core} OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "$(date -u +%FT%TZ) $(uname -n), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); $af"
for mode in 0 1 default u0 u1; do
  opts=()
  case $mode in
    0 | 1) opts=(--backward "$mode") ;;
    u0 | u1) opts=(--backward "${mode#u}" --max-flops 1e15) ;;
  esac
  taskset -c 0 "$af" fuzz --runs "$runs" --seed "$seed" "${opts[@]}" --crashes "$tmp/c-$mode" \
    --stats "$tmp/s-$mode.json" --quiet 2>"$tmp/err-$mode" || { [ $? -eq 1 ] || { cat "$tmp/err-$mode" >&2; exit 2; }; }
done
python3 - "$tmp" "$runs" "$seed" <<'EOF'
import json, sys
tmp, runs, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for mode in ("0", "1", "default", "u0", "u1"):
    with open("%s/s-%s.json" % (tmp, mode)) as f:
        rows[mode] = json.load(f)
print("fuzz --runs %d --seed %s [--backward 0 | 1 | default], one process on CPU 0" % (runs, seed))
print()
head = "%-18s %6s %9s %8s %8s %9s %8s %8s %8s %8s %9s" % ("campaign", "execs", "backward", "seconds", "cases/s",
                                                          "ms/case", "gen ms", "ref ms", "bknd ms", "check ms", "findings")
print(head)
print("-" * len(head))
for mode, name in (("0", "--backward 0"), ("1", "--backward 1"), ("default", "default (1/3)"),
                   ("u0", "uncapped, bwd 0"), ("u1", "uncapped, bwd 1")):
    s = rows[mode]
    n = max(1, s["execs"])
    ms = lambda k: 1e3 * s.get("seconds", {}).get(k, 0.0) / n
    print("%-18s %6d %9d %8.2f %8.0f %9.3f %8.3f %8.3f %8.3f %8.3f %9d" % (
        name, s["execs"], s.get("backward_execs", 0), s["elapsed"], s["execs"] / max(1e-9, s["elapsed"]),
        1e3 * s["elapsed"] / n, ms("generate"), ms("reference"), ms("backends"),
        ms("checks"), s.get("unique_signatures", 0)))
per = lambda m: rows[m]["elapsed"] / max(1, rows[m]["execs"])
print()
print("uncapped (--max-flops 1e15): backward case / forward case %.2fx" % (per("u1") / per("u0")))
fwd = rows["0"]["elapsed"] / max(1, rows["0"]["execs"])
bwd = rows["1"]["elapsed"] / max(1, rows["1"]["execs"])
d = rows["default"]
nb = d.get("backward_execs", 0)
print()
print("backward case / forward case: %.2fx (ms per case, all-backward over forward-only)" % (bwd / fwd))
if 0 < nb < d["execs"]:
    # within the default campaign: its time = nf * f + nb * b, f from the forward-only run
    b_in = (d["elapsed"] - (d["execs"] - nb) * fwd) / nb
    print("in the default campaign (%d of %d backward): about %.2fx, its rate %.0f%% of the forward-only one's" % (
        nb, d["execs"], b_in / fwd, 100.0 * (d["execs"] / d["elapsed"]) / (rows["0"]["execs"] / rows["0"]["elapsed"])))
EOF
