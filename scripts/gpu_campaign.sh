#!/usr/bin/env bash
# A campaign over the CUDA attention kernels on any Linux machine with an NVIDIA GPU and
# the stacks installed (PyTorch with CUDA; JAX with its CUDA plugin where present),
# needing no network. From this checkout it:
#   1. finds attnfuzz: $ATTNFUZZ_BIN, build/attnfuzz if it runs here, the packed build
#      .gpu/attnfuzz-dist.tar.gz (scripts/pack_gpu.sh makes it on a machine with the
#      build dependencies), or builds it with CMake when the libraries are here;
#   2. puts python/ on PYTHONPATH and uses the python3 that has torch ($ATTNFUZZ_PYTHON);
#   3. lists the CUDA target variants available here (torch/cuda_*, jax/cudnn) and splits
#      them in two campaigns: the eager kernels (torch cuda_sdpa_*, cuda_explicit) and the
#      compiled ones (cuda_compile, cuda_compile_sdpa, cuda_flex, jax/cudnn), each a
#      process per job with its own worker per variant (one CUDA context each);
#   4. optionally measures execs/s per variant (--bench S: tiny cases, then the default
#      distribution, S seconds each, --bench-jobs processes (default --jobs), the variants
#      of --bench-variants (default all));
#   5. runs both campaigns side by side for --time seconds (--eager-jobs, default 6, and
#      --compiled-jobs, default 3, processes: each holds a CUDA context per variant, and 75
#      of them exhausted an 80 GB H100), resuming from --corpus (default corpus/findings/torch-cuda/bundles) and the crashes
#      directory, then replays every bundle once more on the GPU (attnfuzz regress), and
#      the GPU bugs' bundles of corpus/findings/*-cuda/bundles with regress --strict.
# Everything it writes goes under --out (default $OUT when set, else gpu-out/):
# crashes/, stats-eager.json, stats-compiled.json, bench/ (bench.tsv), regress.log, junit.xml,
# summary.txt.
#   scripts/gpu_campaign.sh --time 540
#   scripts/gpu_campaign.sh --bench 10 --time 0          # throughput table only
#   scripts/gpu_campaign.sh --variants torch/cuda_sdpa_flash,torch/cuda_sdpa_math --time 600
#   scripts/gpu_campaign.sh --time 0 --replay            # only replay what crashes/ holds
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

time_s=600 bench=0 jobs=$(nproc 2>/dev/null || echo 4) variants="" out=${OUT:-gpu-out} corpus="" replay=0
bench_jobs="" bench_variants="" eager_jobs=6 compiled_jobs=3
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --time) time_s=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --bench-jobs) bench_jobs=$2; shift 2 ;;
    --eager-jobs) eager_jobs=$2; shift 2 ;;
    --compiled-jobs) compiled_jobs=$2; shift 2 ;;
    --bench-variants) bench_variants=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --replay) replay=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "gpu_campaign.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "gpu_campaign: $*" | tee -a "$out/summary.txt" >&2; }

# 1. attnfuzz
af=${ATTNFUZZ_BIN:-}
if [ -z "$af" ] && [ -x build/attnfuzz ] && build/attnfuzz backends --no-targets >/dev/null 2>&1; then
  af=$repo/build/attnfuzz
fi
if [ -z "$af" ] && [ -f .gpu/attnfuzz-dist.tar.gz ]; then
  dist=$(mktemp -d)
  tar -C "$dist" -xzf .gpu/attnfuzz-dist.tar.gz
  export LD_LIBRARY_PATH="$dist/dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  af=$dist/dist/bin/attnfuzz
fi
if [ -z "$af" ]; then
  log "no usable attnfuzz binary; building with CMake"
  { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j"$jobs" --target attnfuzz >/dev/null; } \
    || { echo "gpu_campaign.sh: cannot build attnfuzz here (libcjson, libxxhash, libzstd, libopenblas, libpng needed); run scripts/pack_gpu.sh on a machine that has them and bring .gpu/" >&2; exit 2; }
  af=$repo/build-gpu/attnfuzz
fi
"$af" backends --no-targets >/dev/null || { echo "gpu_campaign.sh: $af does not run here" >&2; exit 2; }

# 2. Python
py=${ATTNFUZZ_PYTHON:-$(command -v python3)}
export ATTNFUZZ_PYTHON=$py PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "gpu_campaign.sh: $py has no torch with a visible CUDA device" >&2; exit 2; }
gpu=$("$py" -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)')
log "attnfuzz $af, python $py, GPU: $gpu, jobs $jobs"

# 3. the GPU variants available here (the stacks' declarations), as two groups: eager
# kernels and compiled ones
if [ -z "$variants" ]; then
  variants=$("$py" -m attnfuzz.targets --names available gpu campaign 2>>"$out/summary.txt" | paste -sd, -)
fi
[ -n "$variants" ] || { echo "gpu_campaign.sh: no GPU target variant is available here" >&2; exit 2; }
IFS=, read -r -a vlist <<<"$variants"
compiled_set=" $("$py" -m attnfuzz.targets --names compiled | tr '\n' ' ') "
eager=() compiled=()
for v in "${vlist[@]}"; do
  case $compiled_set in
    *" $v "*) compiled+=(--backend "target:$v") ;;
    *) eager+=(--backend "target:$v") ;;
  esac
done
log "variants: ${vlist[*]}"

# stats.json jobs -> cases run, run/s over the wall time (worker start-up included), run/s
# summed over the jobs from each one's first case, cases skipped (no variant runs them),
# compile share
stat_line() {
  "$py" -c 'import json, sys
s = json.load(open(sys.argv[1])); e = s.get("elapsed") or 1; x = s.get("execs", 0) or 1
ran = s.get("execs", 0) - s.get("skipped", 0); jr = s.get("execs_per_sec_jobs", 0) * ran / x
print("%d\t%.0f\t%.0f\t%d\t%.0f%%" % (ran, ran / e, jr, s.get("skipped", 0), 100 * s.get("compile_seconds", 0) / (e * int(sys.argv[2]))))' "$1" "$2" 2>/dev/null || printf -- '-\t-\t-\t-\t-'
}

# 4. throughput per variant (scripts/bench_targets.sh: tiny cases, then the default
# distribution, --bench seconds each)
if [ "$bench" != 0 ]; then
  IFS=, read -r -a blist <<<"${bench_variants:-$variants}"
  ATTNFUZZ_BIN=$af scripts/bench_targets.sh --tiny "$bench" --default "$bench" --jobs "${bench_jobs:-$jobs}" \
    --out "$out/bench" "${blist[@]}" 2>>"$out/bench.log" | tee -a "$out/summary.txt"
fi

# 5. the campaigns, then every bundle replayed once more
if [ "$time_s" != 0 ]; then
  [ -z "$corpus" ] && [ -d corpus/findings/torch-cuda/bundles ] && corpus=corpus/findings/torch-cuda/bundles
  cargs=(--time "$time_s" --crashes "$out/crashes")
  [ -n "$corpus" ] && cargs+=(--corpus "$corpus")
  je=$eager_jobs jc=$compiled_jobs
  pids=()
  if [ ${#eager[@]} -gt 0 ]; then
    "$af" fuzz "${eager[@]}" --jobs "$je" --stats "$out/stats-eager.json" "${cargs[@]}" "${extra[@]}" \
      2>"$out/campaign-eager.log" & pids+=($!)
  fi
  if [ ${#compiled[@]} -gt 0 ]; then
    "$af" fuzz "${compiled[@]}" --jobs "$jc" --stats "$out/stats-compiled.json" "${cargs[@]}" "${extra[@]}" \
      2>"$out/campaign-compiled.log" & pids+=($!)
  fi
  for p in "${pids[@]}"; do wait "$p" || true; done
  for g in eager compiled; do
    [ -f "$out/stats-$g.json" ] || continue
    n=$([ $g = eager ] && echo "$je" || echo "$jc")
    log "$g campaign ($n jobs, ${time_s}s): execs, execs/s, compile share: $(stat_line "$out/stats-$g.json" "$n")"
    tail -n 25 "$out/campaign-$g.log" | grep -v '^#' >>"$out/summary.txt" || true
  done
  replay=1
fi
# the GPU bugs' bundles in corpus/findings (<stack>-cuda/bundles; ctest's regress_findings
# replays the CPU ones): each must still fail as recorded
if [ "$replay" = 1 ] && compgen -G "corpus/findings/*-cuda/bundles" >/dev/null; then
  rc=0
  "$af" regress --strict corpus/findings/*-cuda/bundles >"$out/regress-findings.log" 2>&1 || rc=$?
  log "corpus/findings GPU bundles replayed (regress --strict exit $rc): $(tail -n 1 "$out/regress-findings.log")"
fi
if [ "$replay" = 1 ] && compgen -G "$out/crashes/*-*" >/dev/null; then
  rc=0
  "$af" regress --junit "$out/junit.xml" "$out/crashes" >"$out/regress.log" 2>&1 || rc=$?
  log "replayed $(ls -d "$out"/crashes/*-*/ | wc -l) bundles on the GPU (regress exit $rc): $(grep -c '^same' "$out/regress.log" || true) same, $(grep -c '^fixed' "$out/regress.log" || true) fixed, $(grep -c '^REGRESSED' "$out/regress.log" || true) regressed"
fi
