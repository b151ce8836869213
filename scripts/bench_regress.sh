#!/usr/bin/env bash
# bench_regress.sh - bundles per second of `attnfuzz regress --strict` over a corpus, for two
# builds of attnfuzz (before and after a change) and, for the one after, each --jobs count
# asked for. One table: bundles, seconds (wall, the workers' start-ups included), bundles/s,
# the ratio to the first row, the workers started (from regress's last stderr line; "-" for a
# build that does not print it) and regress's summary line, which must be the same in every
# row (the verdicts do not depend on the build or on --jobs; a row whose summary differs from
# the first is marked "DIFFERS").
#
#   scripts/bench_regress.sh [--jobs "1 2"] [--out DIR] BEFORE AFTER DIR...
#
#   BEFORE, AFTER  attnfuzz binaries; BEFORE "-" skips it (it runs with one job: a build from
#                  before --jobs has none)
#   DIR            bundle directories, as regress takes them
#   --jobs LIST    the --jobs values AFTER runs with (default "1 2")
#   --out DIR      where each run's stdout and stderr go (default a temporary directory)
# e.g. the CPU corpus (every findings directory but the CUDA ones):
#   scripts/bench_regress.sh /tmp/build-before/attnfuzz build/attnfuzz \
#       $(ls -d corpus/findings/*/bundles | grep -v -- -cuda/)
# and on a GPU machine: ... corpus/findings/*-cuda/bundles
# Run from the repository: target: workers are found from the current directory when the
# binary lies outside it (a build of an older commit elsewhere).
set -euo pipefail
jobs="1 2" out=""
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -lt 3 ]; then
  echo "usage: bench_regress.sh [--jobs LIST] [--out DIR] BEFORE AFTER DIR..." >&2
  exit 2
fi
before=$1 after=$2
shift 2
dirs=("$@")
[ -n "$out" ] || out=$(mktemp -d /tmp/bench-regress.XXXXXX)
mkdir -p "$out"

runs=()
[ "$before" = - ] || runs+=("before 1")
for j in $jobs; do runs+=("after $j"); done

printf '%-8s %4s %8s %9s %10s %7s %8s  %s\n' run jobs bundles seconds bundles/s ratio workers summary
first_rate="" first_summary=""
for r in "${runs[@]}"; do
  name=${r% *} j=${r#* }
  bin=$before
  args=(regress --strict)
  if [ "$name" = after ]; then
    bin=$after
    args+=(--jobs "$j")
  fi
  log="$out/$name-jobs$j"
  t0=$(date +%s.%N)
  rc=0
  "$bin" "${args[@]}" "${dirs[@]}" >"$log.out" 2>"$log.err" || rc=$?
  t1=$(date +%s.%N)
  summary=$(grep -E '^[0-9]+ bundles: ' "$log.out" | tail -1 || true)
  bundles=${summary%% *}
  [ -n "$bundles" ] || bundles=0
  workers=$(sed -nE 's/^attnfuzz regress: .* ([0-9]+) workers started \(([0-9]+) restarts.*/\1+\2r/p' "$log.err" | tail -1)
  [ -n "$workers" ] || workers=-
  read -r secs rate <<<"$(awk -v a="$t0" -v b="$t1" -v n="$bundles" 'BEGIN { s = b - a; printf "%.1f %.3f", s, (s > 0 ? n / s : 0) }')"
  [ -n "$first_rate" ] || first_rate=$rate
  ratio=$(awk -v r="$rate" -v f="$first_rate" 'BEGIN { printf "%.2f", (f > 0 ? r / f : 0) }')
  [ -n "$first_summary" ] || first_summary=$summary
  mark=""
  [ "$summary" = "$first_summary" ] || mark=" DIFFERS"
  printf '%-8s %4s %8s %9s %10s %7s %8s  %s (exit %d)%s\n' "$name" "$j" "$bundles" "$secs" "$rate" "$ratio" "$workers" \
    "${summary#* bundles: }" "$rc" "$mark"
done
echo "(workers: started + restarts after a fault; the runs' output: $out)"
