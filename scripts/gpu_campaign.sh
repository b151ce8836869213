#!/usr/bin/env bash
# The campaign over the GPU targets (torch/cuda_*, jax/cudnn, tensorrt where installed) on a
# Linux machine with NVIDIA GPUs and the stacks installed; needs no network. From this
# checkout it:
#   1. uses the python3 that has torch ($ATTNFUZZ_PYTHON to choose);
#   2. finds attnfuzz: with --wheel PATH, the wheel (scripts/build_wheel.sh, built where the
#      C libraries are) installed into that Python's environment offline (pip --no-deps
#      --no-index; the environment needs numpy and ml_dtypes, as a torch or jax one has);
#      else $ATTNFUZZ_BIN, build/attnfuzz if it runs here, an attnfuzz already installed in
#      that environment, or a build with CMake. A checkout binary gets python/ on
#      PYTHONPATH; an installed one runs the package installed beside it;
#   3. lists the GPU variants available here (the stacks' declarations) in groups: the
#      eager kernels, the eager serving paths (variants that declare a serving form: nested
#      jagged tensors and varlen_attn, whose Python dispatch costs several milliseconds a
#      case, where a dense kernel's case costs about one; the dense kernels would wait on
#      them), the eager variants of each GPU-only stack (a `gpu_pip` declaration: cudnn's
#      frontend) as a group of their own, and the compiled ones, a group per stack (torch's,
#      jax's, flashinfer's and fa4's compile per shape apart: a batch waits for its slowest
#      worker, and one stack's compiles need not hold the other's cases; a compiled group
#      waits up to --compile-timeout S, default 900, for a structure's first build);
#   4. runs, per GPU (--gpus N, default every visible one, each group pinned to its card by
#      CUDA_VISIBLE_DEVICES; --cards LIST names the card of each, e.g. 0,0 to run two cards'
#      groups on one and check they do not get in each other's way), one campaign of each group,
#      all for --time seconds: the eager group as --eager-jobs campaigns (default 3: the
#      explicit and math workers' Python is the bound, one core each per job; on an H200
#      the eager group alone ran 928 cases/s with 2 jobs and 1,484 with 3; each job one
#      CUDA context per variant), the serving group and each stack's compiled group as one each,
#      cases in batches (--batch: a
#      worker runs a batch's cases back to back and answers them in one frame), the inputs
#      and float64 references on --threads host threads per job (default: the cores
#      divided among the jobs), resuming from --corpus (default
#      corpus/findings/torch-cuda/bundles) and from the crashes directory, known bugs loaded;
#      nvidia-smi sampled once a second meanwhile;
#   5. replays the GPU bugs' bundles (corpus/findings/*-cuda/bundles, regress --strict; not
#      with --no-regress) and, with --replay, every bundle found (bounded in time);
#   6. writes summary.txt: cases per second per group and card and in total, GPU busy per
#      card, the time split (generation, reference, protocol, targets, compile,
#      minimization, restarts) from the stats.
# Optionally (--bench S) it first measures each variant alone (scripts/bench_targets.sh:
# tiny cases, then the default distribution, S seconds each, --bench-jobs processes,
# default 1).
# Everything goes under --out (default gpu-out/): crashes/ (also packed as crashes.tar.gz,
# one file, for machines that return few files), stats-<group>-gpu<N>.json,
# campaign-<group>-gpu<N>.log, gpu-util.csv, bench/ (bench.tsv), regress*.log, summary.txt.
#   scripts/gpu_campaign.sh --time 600
#   scripts/gpu_campaign.sh --wheel dist/attnfuzz-0.1.0-py3-none-manylinux_2_34_x86_64.whl --time 60
#   scripts/gpu_campaign.sh --gpus 2 --time 3600 --out run1
#   scripts/gpu_campaign.sh --bench 10 --time 0          # throughput table only
#   scripts/gpu_campaign.sh --variants torch/cuda_sdpa_flash,torch/cuda_sdpa_math --time 600
#   scripts/gpu_campaign.sh --time 0 --replay            # only replay what crashes/ holds
#   scripts/gpu_campaign.sh --cards 0,0 --time 120       # two card groups simulated on card 0
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

compile_timeout=900 time_s=600 bench=0 bench_jobs=1 variants="" out=gpu-out corpus="" replay=0 gpus="" batch=64 threads="" cards="" wheel="" regress=1 eager_jobs=3
bench_variants=""
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --time) time_s=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --cards) cards=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --eager-jobs) eager_jobs=$2; shift 2 ;;
    --compile-timeout) compile_timeout=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --bench-jobs) bench_jobs=$2; shift 2 ;;
    --bench-variants) bench_variants=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --replay) replay=1; shift ;;
    --no-regress) regress=0; shift ;;
    --wheel) wheel=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,51p' "$0"; exit 0 ;;
    *) echo "gpu_campaign.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
: >"$out/summary.txt"
log() { echo "gpu_campaign: $*" | tee -a "$out/summary.txt" >&2; }

# 1. Python
py=${ATTNFUZZ_PYTHON:-$(command -v python3)}

# 2. attnfuzz
installed() { # does $py's environment hold attnfuzz installed from the wheel (its binary)?
  "$py" -c 'import os, sys, attnfuzz.__main__ as m; sys.exit(not os.access(m.binary(), os.X_OK))' 2>/dev/null
}
if [ -n "$wheel" ]; then
  [ -f "$wheel" ] || { echo "gpu_campaign.sh: --wheel $wheel: no such file" >&2; exit 2; }
  log "installing $(basename "$wheel") into the environment of $py (pip --no-deps --no-index)"
  "$py" -m pip install -q --disable-pip-version-check --no-deps --no-index --force-reinstall "$wheel" \
    >"$out/pip.log" 2>&1 || { tail -n 5 "$out/pip.log" >&2
      echo "gpu_campaign.sh: pip cannot install $wheel for $py (ATTNFUZZ_PYTHON=VENV/bin/python picks a writable environment)" >&2
      exit 2; }
  "$py" -c 'import numpy, ml_dtypes' || { echo "gpu_campaign.sh: $py lacks numpy or ml_dtypes, which the worker kit needs" >&2; exit 2; }
  "$py" -c 'import zstandard' 2>/dev/null \
    || log "no zstandard for $py: the campaign does not need it (the bundle loader and the report's repro scripts do)"
  installed || { echo "gpu_campaign.sh: $py does not import the attnfuzz it installed (PYTHONPATH hides it?)" >&2; exit 2; }
fi
af="" mode=checkout
if [ -n "$wheel" ]; then
  mode=installed
elif [ -n "${ATTNFUZZ_BIN:-}" ]; then
  af=$ATTNFUZZ_BIN
elif [ -x build/attnfuzz ] && build/attnfuzz backends --no-targets >/dev/null 2>&1; then
  af=$repo/build/attnfuzz
elif installed; then
  mode=installed
else
  log "no usable attnfuzz binary; building with CMake"
  { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DAF_TESTS=OFF >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" --target attnfuzz >/dev/null; } \
    || { echo "gpu_campaign.sh: cannot build attnfuzz here (libcjson, libxxhash, libzstd, libopenblas, libpng needed); build the wheel on a machine that has them (scripts/build_wheel.sh) and pass --wheel dist/attnfuzz-*.whl" >&2; exit 2; }
  af=$repo/build-gpu/attnfuzz
fi
if [ $mode = installed ]; then
  # the `attnfuzz` command pip wrote beside the environment's python: the packaged binary,
  # run with this Python, the package and its targets as installed (no PYTHONPATH)
  af=$("$py" -c 'import os, sysconfig; print(os.path.join(sysconfig.get_path("scripts"), "attnfuzz"))')
  export ATTNFUZZ_PYTHON=$py
else
  export ATTNFUZZ_PYTHON=$py PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
fi
"$af" backends --no-targets >/dev/null || { echo "gpu_campaign.sh: $af does not run here" >&2; exit 2; }

# the GPUs
ngpu=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
[ "$ngpu" -gt 0 ] || { echo "gpu_campaign.sh: $py has no torch with a visible CUDA device" >&2; exit 2; }
visible=()
if [ -n "$cards" ]; then
  IFS=, read -r -a visible <<<"$cards"
  gpus=${#visible[@]}
  for c in "${visible[@]}"; do
    [ "$c" -lt "$ngpu" ] 2>/dev/null || { echo "gpu_campaign.sh: --cards $cards: no card $c ($ngpu visible)" >&2; exit 2; }
  done
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then IFS=, read -r -a visible <<<"$CUDA_VISIBLE_DEVICES"; else
  for ((g = 0; g < ngpu; g++)); do visible+=("$g"); done; fi
gpus=${gpus:-$ngpu}
[ "$gpus" -le "${#visible[@]}" ] || { echo "gpu_campaign.sh: --gpus $gpus, but $ngpu visible" >&2; exit 2; }
gpu=$("$py" -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)')
cores=$(nproc)
log "attnfuzz $af, python $py, $gpus of $ngpu GPUs ($gpu), $cores cores"

# 3. the GPU variants available here, as groups
if [ -z "$variants" ]; then
  variants=$("$py" -m attnfuzz.targets --names available gpu campaign 2>>"$out/summary.txt" | paste -sd, -)
fi
[ -n "$variants" ] || { echo "gpu_campaign.sh: no GPU target variant is available here" >&2; exit 2; }
IFS=, read -r -a vlist <<<"$variants"
compiled_set=" $("$py" -m attnfuzz.targets --names compiled | tr '\n' ' ') "
serving_set=" $("$py" -m attnfuzz.targets --names eager serving | tr '\n' ' ') "
# the GPU-only stacks (a `gpu_pip` declaration: cudnn's frontend, flashinfer, fa4): each
# stack's eager variants are a group of their own, beside torch's and jax's kernels
gpu_only=" $("$py" -c 'import json, sys; print(" ".join(s["stack"] for s in json.load(sys.stdin) if s.get("gpu_pip")))' \
  < <("$py" -m attnfuzz.targets --declared)) "
eager=() serving=() compiled_stacks=() own_stacks=()
declare -A compiled_of=()  # stack -> its compiled variants as --backend options
declare -A own_of=()       # GPU-only stack -> its eager variants as --backend options
for v in "${vlist[@]}"; do
  st=${v%%/*}
  case $compiled_set in
    *" $v "*) [ -n "${compiled_of[$st]:-}" ] || compiled_stacks+=("$st")
              compiled_of[$st]+=" --backend target:$v"; continue ;;
  esac
  case $gpu_only in
    *" $st "*) [ -n "${own_of[$st]:-}" ] || own_stacks+=("$st")
               own_of[$st]+=" --backend target:$v"; continue ;;
  esac
  case $serving_set in
    *" $v "*) serving+=(--backend "target:$v") ;;
    *) eager+=(--backend "target:$v") ;;
  esac
done
log "variants: ${vlist[*]}"

# the bench: each variant alone
if [ "$bench" != 0 ]; then
  IFS=, read -r -a blist <<<"${bench_variants:-$variants}"
  log "bench: ${#blist[@]} variants, $bench s each distribution, $bench_jobs job(s) each"
  ATTNFUZZ_BIN=$af scripts/bench_targets.sh --tiny "$bench" --default "$bench" --jobs "$bench_jobs" \
    --out "$out/bench" "${blist[@]}" 2>>"$out/bench.log" | tee -a "$out/summary.txt"
fi

# 4. the campaigns: per card, the eager, serving and compiled groups
if [ "$time_s" != 0 ]; then
  [ -z "$corpus" ] && [ -d corpus/findings/torch-cuda/bundles ] && corpus=corpus/findings/torch-cuda/bundles
  groups=0 jobs_per_card=0
  [ ${#eager[@]} -gt 0 ] && groups=$((groups + 1)) jobs_per_card=$((jobs_per_card + eager_jobs))
  [ ${#serving[@]} -gt 0 ] && groups=$((groups + 1)) jobs_per_card=$((jobs_per_card + 1))
  groups=$((groups + ${#compiled_stacks[@]} + ${#own_stacks[@]}))
  jobs_per_card=$((jobs_per_card + ${#compiled_stacks[@]} + ${#own_stacks[@]}))
  th=${threads:-$(( cores / (gpus * jobs_per_card) > 1 ? cores / (gpus * jobs_per_card) : 1 ))}
  cargs=(--time "$time_s" --crashes "$out/crashes" --threads "$th" --quiet)
  [ -n "$corpus" ] && cargs+=(--corpus "$corpus")
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader,nounits -l 1 \
    >"$out/gpu-util.csv" 2>/dev/null & smi=$!
  pids=()
  # start GROUP CARD SEED BATCH JOBS --backend ...: one group's campaign on one card
  start() {
    local group=$1 g=$2 seed=$3 b=$4 jobs=$5
    shift 5
    [ $# -gt 0 ] || return 0
    local j=(); [ "$jobs" -gt 1 ] && j=(--jobs "$jobs")
    # a compiled group's first case of a structure waits for its build: FlashInfer's nvcc JIT
    # takes 84 s alone and minutes while other groups load the cores (with the default 60 s
    # its campaign of 2026-12-02 stored every build as a timeout and ran 6 cases)
    case $group in compiled-*) j+=(--compile-timeout "$compile_timeout") ;; esac
    CUDA_VISIBLE_DEVICES=${visible[$g]} "$af" fuzz "$@" "${j[@]}" --batch "$b" --seed "$seed" \
      --stats "$out/stats-$group-gpu$g.json" "${cargs[@]}" "${extra[@]}" 2>"$out/campaign-$group-gpu$g.log" &
    pids+=($!)
  }
  for ((g = 0; g < gpus; g++)); do
    start eager "$g" $((1 + g)) "$batch" "$eager_jobs" "${eager[@]}"
    start serving "$g" $((201 + g)) "$batch" 1 "${serving[@]}"
    for ((i = 0; i < ${#own_stacks[@]}; i++)); do
      read -r -a ob <<<"${own_of[${own_stacks[$i]}]}"
      start "gpu-${own_stacks[$i]}" "$g" $((301 + g + 10 * i)) "$batch" 1 "${ob[@]}"
    done
    for ((i = 0; i < ${#compiled_stacks[@]}; i++)); do
      read -r -a cb <<<"${compiled_of[${compiled_stacks[$i]}]}"
      start "compiled-${compiled_stacks[$i]}" "$g" $((101 + g + 10 * i)) 16 1 "${cb[@]}"
    done
  done
  log "campaigns: ${#pids[@]} campaigns ($gpus card(s) x $groups group(s); the eager group $eager_jobs job(s)), --threads $th, --batch $batch (eager, serving, GPU-only stacks: ${own_stacks[*]:-none}) / 16 (compiled: ${compiled_stacks[*]:-none}), $time_s s"
  for p in "${pids[@]}"; do wait "$p" || true; done
  kill "$smi" 2>/dev/null || true
  wait "$smi" 2>/dev/null || true
  "$py" - "$out" "$time_s" <<'EOF' | tee -a "$out/summary.txt"
import csv, glob, json, os, statistics, sys
out, want = sys.argv[1], float(sys.argv[2])
rows, total = [], {}
for path in sorted(glob.glob(os.path.join(out, "stats-*-gpu*.json"))):
    group, gpu = os.path.basename(path)[6:-5].rsplit("-", 1)
    s = json.load(open(path))
    el = s.get("elapsed") or 1e-9
    ran = s.get("execs", 0) - s.get("skipped", 0)
    t = s.get("seconds", {})
    mini = s.get("minimize_seconds", 0.0)
    busy = {k: t.get(k, 0.0) for k in ("generate", "reference", "protocol", "target", "compile", "restarts")}
    # job time: every job's wall time, and the end-of-run minimization pass
    job = el * max(1, s.get("jobs", 1)) + s.get("minimize_end_seconds", 0.0)
    rows.append((group, gpu, s.get("execs", 0), ran, el, ran / el, 100 * (mini + busy["restarts"]) / job, busy,
                 sum(s.get("findings_per_kind", {}).values()), s.get("known_hits", 0),
                 s.get("execs", 0) / max(1, s.get("batches", 0))))
    total[group] = total.get(group, 0.0) + ran / el
print("%-15s %-5s %9s %9s %8s %10s %13s  %s" % ("group", "card", "cases", "ran", "seconds", "ran/s", "minim+restart", "time split (s)"))
for g, gpu, ex, ran, el, rate, share, busy, nf, kh, per in rows:
    split = " ".join("%s %.0f" % (k, v) for k, v in busy.items())
    print("%-15s %-5s %9d %9d %8.0f %10.1f %12.1f%%  %s; bundles %d, known hits %d, %.1f cases a batch"
          % (g, gpu, ex, ran, el, rate, share, split, nf, kh, per))
for g, r in sorted(total.items()):
    print("total %s: %.1f cases/s (each case through every variant of the group)" % (g, r))
util = {}
try:
    for r in csv.reader(open(os.path.join(out, "gpu-util.csv"))):
        if len(r) >= 4:
            util.setdefault(r[1].strip(), []).append(float(r[2]))
except (OSError, ValueError):
    pass
for card, u in sorted(util.items()):
    print("GPU %s busy: mean %.0f%%, median %.0f%% over %d samples" % (card, statistics.mean(u), statistics.median(u), len(u)))
EOF
fi

# 5. replays: the GPU bugs' bundles must still fail as recorded; what this run found, on request
if [ "$regress" = 1 ] && compgen -G "corpus/findings/*-cuda/bundles" >/dev/null; then
  rc=0
  timeout 600 "$af" regress --strict corpus/findings/*-cuda/bundles >"$out/regress-findings.log" 2>&1 || rc=$?
  log "corpus/findings GPU bundles replayed (regress --strict exit $rc): $(tail -n 1 "$out/regress-findings.log")"
fi
if [ "$replay" = 1 ] && compgen -G "$out/crashes/*-*" >/dev/null; then
  rc=0
  timeout "$(( time_s > 600 ? time_s / 4 : 300 ))" "$af" regress --junit "$out/junit.xml" "$out/crashes" \
    >"$out/regress.log" 2>&1 || rc=$?
  log "replayed $(ls -d "$out"/crashes/*-*/ | wc -l) bundles on the GPU (regress exit $rc): $(grep -c '^same' "$out/regress.log" || true) same, $(grep -c '^fixed' "$out/regress.log" || true) fixed, $(grep -c '^REGRESSED' "$out/regress.log" || true) regressed"
fi
if [ -d "$out/crashes" ]; then
  tar -C "$out" -czf "$out/crashes.tar.gz" crashes
  log "bundles: $(ls "$out/crashes" | grep -c -- - || true) in $out/crashes (packed: crashes.tar.gz)"
fi
