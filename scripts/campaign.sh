#!/usr/bin/env bash
# The main job: set up (apt packages, the project's .venv, build) and run a fuzz campaign
# on the built-in backends - the pair explicit,fused and every relation on both - on all
# cores.
#   scripts/campaign.sh                        10 minutes, findings in crashes/
#   scripts/campaign.sh --time 28800           overnight
#   scripts/campaign.sh --targets cpu          also every real CPU target that installed
#   scripts/campaign.sh --targets torch,ort    ... or those stacks only
# With --targets, each stack runs as a campaign of its own over all its variants (one
# process per stack, next to the built-ins' campaign, all for the same --time), writing
# to the same crashes/ with stats in crashes/stats-STACK.json; a stack with eager and
# compiled variants (torch) runs them as two campaigns, crashes/stats-STACK-eager.json and
# -compiled.json, so that its eager kernels are not held to the compilers' pace (every case
# of a campaign runs through all its variants). Any other `attnfuzz fuzz` option is passed
# to every campaign; later ones override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --targets) targets="${2:?--targets needs cpu or a comma-separated list of stacks}"; shift 2 ;;
    --targets=*) targets="${1#--targets=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

scripts/setup.sh
mkdir -p crashes
jobs="$(nproc 2>/dev/null || echo 2)"
if [ -z "$targets" ]; then
  exec build/attnfuzz fuzz --jobs "$jobs" --time 600 --crashes crashes --stats crashes/stats.json "${args[@]}"
fi

# STACK/VARIANT per line: the variants available here (the stacks' declarations say which
# need a GPU; numpy_ref, a second oracle, is no campaign)
case $targets in
  all) where=() ;;
  *) IFS=, read -r -a where <<<"$targets" ;;   # cpu, or stack names
esac
# one campaign per line: NAME STACK/VARIANT... (attnfuzz.targets.campaigns)
campaigns="$(PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/python -m attnfuzz.targets \
  --campaigns available campaign "${where[@]}")"
[ -n "$campaigns" ] || { echo "campaign.sh: no real target available for --targets $targets" >&2; exit 2; }

pids=()
build/attnfuzz fuzz --jobs 1 --time 600 --crashes crashes --stats crashes/stats.json --quiet "${args[@]}" &
pids+=($!)
while read -r name vs; do
  backends=()
  for v in $vs; do backends+=(--backend "target:$v"); done
  echo "campaign.sh: $name: ${backends[*]}" >&2
  build/attnfuzz fuzz "${backends[@]}" --time 600 --crashes crashes --stats "crashes/stats-$name.json" --quiet \
    "${args[@]}" &
  pids+=($!)
done <<<"$campaigns"
trap 'kill -INT "${pids[@]}" 2>/dev/null' INT TERM
rc=0
for p in "${pids[@]}"; do
  wait "$p" || { r=$?; [ "$r" -gt "$rc" ] && rc=$r; }
done
echo "campaign.sh: findings in crashes/ (attnfuzz report crashes -o report/)" >&2
exit "$rc"
