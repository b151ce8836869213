#!/usr/bin/env bash
# The main job: set up (apt packages, the project's .venv, build), then fuzz every real CPU
# stack the set-up installed (PyTorch, ONNX Runtime, OpenVINO, TVM, JAX: one campaign per
# stack over all its available variants) beside the built-in backends (the pair
# explicit,fused and every relation on both), and end with a table per campaign: cases,
# known-bug hits by entry, new bundles and where they are (python -m attnfuzz.summary).
#   scripts/campaign.sh                        10 minutes, findings in crashes/
#   scripts/campaign.sh --time 28800           overnight
#   scripts/campaign.sh --builtin-only         the built-ins alone, on all cores (--targets none)
#   scripts/campaign.sh --targets torch,ort    those stacks only (--targets cpu: every CPU
#                                              one, the default; all: GPU ones too)
# Each stack's campaign writes to crashes/ with stats in crashes/stats-STACK.json; a stack
# with eager and compiled variants (torch) runs them as two campaigns,
# crashes/stats-STACK-eager.json and -compiled.json, so that its eager kernels are not
# held to the compilers' pace (every case of a campaign runs through all its variants).
# The cores: a campaign (attnfuzz and its worker taking turns) keeps about one core busy.
# With fewer stack campaigns than cores they all run for --time and the built-ins take the
# cores left (--jobs); with more, they run nproc at a time, each for its share of --time
# (--time / ceil(campaigns / cores), in waves, each campaign then minimizing for a tenth of
# its time, at least 10 s), and the built-ins run for --time beside them at nice 19 and unbound,
# taking only what the stacks leave idle (worker start-up, a wave's idle core): the
# machine is busy, never oversubscribed (an oversubscribed worker misses its --timeout).
# Any other `attnfuzz fuzz` option is passed to every campaign. Ctrl-C stops every
# campaign (each writes its stats and stops) and still prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=cpu
explicit=0   # --targets given: no stack available is then an error
time_s=600
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --targets) targets="${2:?--targets needs cpu, all, none or a comma-separated list of stacks}"; explicit=1; shift 2 ;;
    --targets=*) targets="${1#--targets=}"; explicit=1; shift ;;
    --builtin-only) targets=none; shift ;;
    --time) time_s="${2:?--time needs seconds}"; shift 2 ;;
    --time=*) time_s="${1#--time=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
awk -v t="$time_s" 'BEGIN { exit !(t + 0 > 0) }' || { echo "campaign.sh: --time needs seconds > 0, not '$time_s'" >&2; exit 2; }

scripts/setup.sh
mkdir -p crashes
cores="$(nproc 2>/dev/null || echo 2)"
py=.venv/bin/python
[ -x "$py" ] || py=python3
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

# one campaign per line: NAME STACK/VARIANT... (attnfuzz.targets.campaigns; the stacks'
# declarations say which need a GPU; numpy_ref, a second oracle, is no campaign)
campaigns=""
if [ "$targets" != none ]; then
  case $targets in
    all) where=() ;;
    *) IFS=, read -r -a where <<<"$targets" ;;   # cpu, or stack names
  esac
  campaigns="$("$py" -m attnfuzz.targets --campaigns available campaign "${where[@]}")"
  if [ -z "$campaigns" ]; then
    [ $explicit = 1 ] && { echo "campaign.sh: no real target available for --targets $targets" >&2; exit 2; }
    echo "campaign.sh: no real CPU stack installed (python -m attnfuzz.targets --list says why): the built-ins alone" >&2
  fi
fi
names=()
[ -n "$campaigns" ] && while read -r name _; do names+=("$name"); done <<<"$campaigns"
n=${#names[@]}

# the stats this run writes, and only those (a campaign not reached reads "not run")
stats=(crashes/stats.json)
for name in "${names[@]}"; do stats+=("crashes/stats-$name.json"); done
rm -f "${stats[@]}"

pids=()          # every campaign started
running=()       # the stack campaigns running now
declare -A ended # pid -> 1 once its exit status is taken
stop=0
rc=0
trap 'stop=1; kill -INT "${pids[@]}" 2>/dev/null || true' INT TERM
status() { # an ended campaign's exit status: the worst is kept (0 clean, 1 new findings, 2 error)
  ended[$1]=1
  if [ "$2" -gt "$rc" ]; then rc=$2; fi
}
reap() { # waits for campaign $1 (a trapped Ctrl-C interrupts wait while it writes its stats)
  local r
  while :; do
    if wait "$1"; then r=0; else r=$?; fi
    if [ "$r" -gt 128 ] && kill -0 "$1" 2>/dev/null; then continue; fi
    break
  done
  status "$1" "$r"
}

if [ "$n" = 0 ]; then
  build/attnfuzz fuzz --jobs "$cores" --time "$time_s" --crashes crashes --stats crashes/stats.json "${args[@]}" &
  pids+=($!)
else
  if [ "$n" -lt "$cores" ]; then
    share="$time_s"
    build/attnfuzz fuzz --jobs $((cores - n)) --time "$time_s" --crashes crashes --stats crashes/stats.json \
      --quiet "${args[@]}" &
  else
    waves=$(((n + cores - 1) / cores))
    share="$(awk -v t="$time_s" -v w="$waves" 'BEGIN { printf "%g", t / w }')"
    nice -n 19 build/attnfuzz fuzz --jobs 1 --no-bind --time "$time_s" --crashes crashes \
      --stats crashes/stats.json --quiet "${args[@]}" &
  fi
  pids+=($!)
  echo "campaign.sh: built-ins: ${time_s} s; ${n} stack campaign(s), $((n < cores ? n : cores)) at a time, ${share} s each" >&2
  while read -r name vs; do
    [ $stop = 0 ] || break
    # a free core: wait for one of the running campaigns to end
    while [ ${#running[@]} -ge "$cores" ] && [ $stop = 0 ]; do
      fin=""
      if wait -n -p fin "${running[@]}"; then r=0; else r=$?; fi
      [ -n "${fin:-}" ] || continue   # interrupted (Ctrl-C): the loop ends
      status "$fin" "$r"
      alive=()
      for p in "${running[@]}"; do [ "$p" = "$fin" ] || alive+=("$p"); done
      running=("${alive[@]}")
    done
    [ $stop = 0 ] || break
    backends=()
    for v in $vs; do backends+=(--backend "target:$v"); done
    echo "campaign.sh: $name: ${backends[*]}" >&2
    build/attnfuzz fuzz "${backends[@]}" --time "$share" --crashes crashes --stats "crashes/stats-$name.json" \
      --quiet "${args[@]}" </dev/null &
    pids+=($!)
    running+=($!)
  done <<<"$campaigns"
fi
for p in "${pids[@]}"; do [ -n "${ended[$p]:-}" ] || reap "$p"; done
trap - INT TERM

echo >&2
"$py" -m attnfuzz.summary crashes "${stats[@]}" || true
echo "campaign.sh: findings in crashes/ (attnfuzz report crashes -o report/)" >&2
exit "$rc"
