#!/usr/bin/env bash
# A campaign over the CUDA attention kernels on a machine with an NVIDIA GPU and the
# stacks installed (PyTorch with CUDA; JAX with its CUDA plugin where present), needing
# no network. From this checkout it:
#   1. finds attnfuzz: $ATTNFUZZ_BIN, build/attnfuzz if it loads here, the packed build
#      .gpu/attnfuzz-dist.tar.gz (scripts/pack_gpu.sh makes it on a machine with the
#      build dependencies), or builds with CMake when the libraries are here;
#   2. puts python/ on PYTHONPATH and uses the python3 that has torch ($ATTNFUZZ_PYTHON);
#   3. lists the CUDA target variants that are available here (torch/cuda_*, jax/cudnn);
#   4. optionally measures execs/s per variant (--bench S: tiny cases, then the default
#      distribution, each S seconds with --jobs);
#   5. runs one campaign over every variant with --jobs = cores, resuming from --corpus
#      and the crashes directory, then replays every bundle once more on the GPU.
# Everything it writes goes under --out (default $OUT when set, else gpu-out/):
# crashes/, stats.json, bench.tsv, replay.log, summary.txt.
#   scripts/gpu_campaign.sh --time 540
#   scripts/gpu_campaign.sh --bench 20 --time 0            # throughput table only
#   scripts/gpu_campaign.sh --variants torch/cuda_sdpa_flash,torch/cuda_sdpa_math --time 600
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

time_s=600 bench=0 jobs=$(nproc 2>/dev/null || echo 4) variants="" out=${OUT:-gpu-out} corpus=""
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --time) time_s=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu_campaign.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "gpu_campaign: $*" | tee -a "$out/summary.txt" >&2; }

# 1. attnfuzz
af=${ATTNFUZZ_BIN:-}
if [ -z "$af" ] && [ -x build/attnfuzz ] && build/attnfuzz backends >/dev/null 2>&1; then af=$repo/build/attnfuzz; fi
if [ -z "$af" ] && [ -f .gpu/attnfuzz-dist.tar.gz ]; then
  dist=$(mktemp -d)
  tar -C "$dist" -xzf .gpu/attnfuzz-dist.tar.gz
  export LD_LIBRARY_PATH="$dist/dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  af=$dist/dist/bin/attnfuzz
fi
if [ -z "$af" ]; then
  log "no usable attnfuzz binary; building with CMake"
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAF_TESTS=OFF >/dev/null && cmake --build build-gpu -j"$jobs" --target attnfuzz >/dev/null \
    || { echo "gpu_campaign.sh: cannot build attnfuzz here (libcjson, libxxhash, libzstd, libopenblas, libpng needed); run scripts/pack_gpu.sh on a machine that has them and bring .gpu/" >&2; exit 2; }
  af=$repo/build-gpu/attnfuzz
fi
"$af" backends >/dev/null || { echo "gpu_campaign.sh: $af does not run here" >&2; exit 2; }

# 2. Python
py=${ATTNFUZZ_PYTHON:-$(command -v python3)}
export ATTNFUZZ_PYTHON=$py PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || { echo "gpu_campaign.sh: $py has no torch with a visible CUDA device" >&2; exit 2; }
gpu=$("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')
log "attnfuzz $af, python $py, GPU: $gpu, jobs $jobs"

# 3. the CUDA variants available here
if [ -z "$variants" ]; then
  variants=$("$py" -m attnfuzz.targets --list | "$py" -c '
import json, sys
rows = json.load(sys.stdin)
print(",".join(r["target"] for r in rows if r["available"] and r.get("device") == "cuda"))')
fi
[ -n "$variants" ] || { echo "gpu_campaign.sh: no CUDA target variant is available here" >&2; exit 2; }
IFS=, read -r -a vlist <<<"$variants"
log "variants: ${vlist[*]}"
backends=()
for v in "${vlist[@]}"; do backends+=(--backend "target:$v"); done

execs_per_s() { "$py" -c 'import json, sys; s = json.load(open(sys.argv[1])); print(f"{s.get(\"execs_per_s\", 0):.0f}\t{s.get(\"compile_share\", 0):.2f}")' "$1"; }

# 4. throughput per variant
if [ "$bench" != 0 ]; then
  printf 'variant\tcases\texecs/s\tcompile share\n' >"$out/bench.tsv"
  for v in "${vlist[@]}"; do
    for dist in tiny default; do
      flags=(); [ $dist = tiny ] && flags=(--tiny)
      st=$out/bench-${v//\//_}-$dist.json
      "$af" fuzz --backend "target:$v" --jobs "$jobs" --time "$bench" --quiet --crashes "$out/crashes" \
        --stats "$st" "${flags[@]}" >/dev/null 2>>"$out/bench.log" || true
      printf '%s\t%s\t%s\n' "$v" "$dist" "$(execs_per_s "$st")" >>"$out/bench.tsv"
    done
  done
  column -t -s $'\t' "$out/bench.tsv" | tee -a "$out/summary.txt"
fi

# 5. the campaign, then every bundle replayed once more
if [ "$time_s" != 0 ]; then
  cargs=(--jobs "$jobs" --time "$time_s" --crashes "$out/crashes" --stats "$out/stats.json")
  [ -n "$corpus" ] && cargs+=(--corpus "$corpus")
  [ -z "$corpus" ] && [ -d corpus/findings/torch-cuda ] && cargs+=(--corpus corpus/findings/torch-cuda)
  rc=0
  "$af" fuzz "${backends[@]}" "${cargs[@]}" "${extra[@]}" 2>"$out/campaign.log" || rc=$?
  tail -n 3 "$out/campaign.log" | tee -a "$out/summary.txt"
  log "campaign exit $rc"
  if compgen -G "$out/crashes/*-*" >/dev/null; then
    "$af" replay "$out"/crashes/*-*/ >"$out/replay.log" 2>&1 || true
    log "replayed $(ls -d "$out"/crashes/*-*/ | wc -l) bundles: $(grep -c 'still' "$out/replay.log" || true) still failing (replay.log)"
  fi
fi
