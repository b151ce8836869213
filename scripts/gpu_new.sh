#!/usr/bin/env bash
# The GPU variants and declarations added for the softmax statistics, FP8 and batch
# invariance, exercised on a machine with an NVIDIA GPU and the stacks installed (torch with
# CUDA, nvidia-cudnn-frontend, flashinfer-python with nvcc, flash-attn-4 where it runs):
#   1. each variant's self-test (tests/targets_selftest.py: its cases against the float64
#      reference, its statistics against reference.lse where it returns them (a fully
#      masked row's value printed as a note), FP8 cases where it declares e4m3/e5m2/fp8_kv,
#      its conventions, cache, snippet and protocol round trip), one log per variant;
#   2. short campaigns (--time S each, default 120):
#        lse        torch/cuda_sdpa_{flash,efficient,cudnn}_lse, cudnn/sdpa, fa4/func: the
#                   statistics asked on every forward case (lse_diverge findings)
#        fp8kv      flashinfer/single_prefill, batch_paged, decode with --fp8 0.5 (a third
#                   of the FP8 cases are the KV-cache form they run; the rest they refuse)
#        invariant  flashinfer/batch_paged_fixed_split (declares batch_invariant: bitwise)
#                   and batch_paged (within tolerance) under --relation batch_split
#        cudnn_fp8  cudnn/sdpa_fp8 with --fp8 1, judged under the roundings it declares (P in
#                   the FP8 format before P @ V: fp8_probs; on Hopper O too: fp8_out "v_amax")
#   3. summary.txt: each self-test's last line, each campaign's cases and findings per kind.
# Everything goes under --out (default $OUT when set, else gpu-new-out/): selftest-*.log,
# campaign-*.log, stats-*.json, crashes-*/ (also packed as crashes.tar.gz), summary.txt.
#   scripts/gpu_new.sh                         # self-tests, then 120 s campaigns
#   scripts/gpu_new.sh --only selftest         # self-tests only
#   scripts/gpu_new.sh --only campaign --time 300 --campaigns lse,invariant
#   scripts/gpu_new.sh --variants flashinfer/batch_paged,cudnn/sdpa_fp8 --only selftest
# The attnfuzz binary: $ATTNFUZZ_BIN, else build/attnfuzz, else a CMake build into build-gpu/.
# The Python: $ATTNFUZZ_PYTHON, else python3 (it must import torch with CUDA).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 2

out=${OUT:-gpu-new-out} time_s=120 only=all selftest_timeout=1500
campaigns="lse,fp8kv,invariant,cudnn_fp8"
variants="torch/cuda_sdpa_flash_lse,torch/cuda_sdpa_efficient_lse,torch/cuda_sdpa_cudnn_lse,cudnn/sdpa,cudnn/sdpa_fp8"
variants+=",flashinfer/single_prefill,flashinfer/batch_paged,flashinfer/decode,flashinfer/batch_paged_fixed_split"
variants+=",fa4/func"
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --time) time_s=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --campaigns) campaigns=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --selftest-timeout) selftest_timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "gpu_new.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $only in all|selftest|campaign) ;; *) echo "gpu_new.sh: --only all|selftest|campaign" >&2; exit 2 ;; esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
: >"$out/summary.txt"
log() { echo "gpu_new: $*" | tee -a "$out/summary.txt" >&2; }

py=${ATTNFUZZ_PYTHON:-$(command -v python3)}
export ATTNFUZZ_PYTHON=$py PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null \
  || { echo "gpu_new.sh: $py has no torch with a visible CUDA device" >&2; exit 2; }
log "$("$py" -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)')"
for m in cudnn flashinfer flash_attn; do
  log "$m: $("$py" -c "import importlib.metadata as md, sys
for d in {'cudnn': 'nvidia-cudnn-frontend', 'flashinfer': 'flashinfer-python', 'flash_attn': 'flash-attn-4'}['$m'],:
    try: print(md.version(d))
    except Exception as e: print('not installed (%s)' % type(e).__name__)" 2>&1 | tail -1)"
done

# 1. self-tests, one process and one log per variant
if [ "$only" != campaign ]; then
  IFS=, read -r -a vs <<<"$variants"
  for v in "${vs[@]}"; do
    name=${v//\//_}
    t0=$(date +%s)
    timeout "$selftest_timeout" "$py" tests/targets_selftest.py "$v" >"$out/selftest-$name.log" 2>&1
    rc=$?
    log "selftest $v: exit $rc in $(( $(date +%s) - t0 )) s: $(tail -n 1 "$out/selftest-$name.log")"
    grep -h "note:" "$out/selftest-$name.log" | sort | uniq -c | head -n 20 | sed 's/^/    /' | tee -a "$out/summary.txt" >&2
    grep -h "^FAIL" "$out/selftest-$name.log" | head -n 20 | sed 's/^/    /' | tee -a "$out/summary.txt" >&2
  done
fi

# 2. campaigns
if [ "$only" != selftest ]; then
  af=${ATTNFUZZ_BIN:-}
  if [ -z "$af" ] && [ -x build/attnfuzz ] && build/attnfuzz backends --no-targets >/dev/null 2>&1; then
    af=$repo/build/attnfuzz
  fi
  if [ -z "$af" ]; then
    log "no attnfuzz binary; building with CMake into build-gpu/"
    { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DAF_TESTS=OFF >/dev/null &&
      cmake --build build-gpu -j"$(nproc)" --target attnfuzz >/dev/null; } \
      || { echo "gpu_new.sh: cannot build attnfuzz here; set ATTNFUZZ_BIN" >&2; exit 2; }
    af=$repo/build-gpu/attnfuzz
  fi
  avail=" $("$py" -m attnfuzz.targets --names available gpu 2>/dev/null | tr '\n' ' ') "
  backends() { # the --backend options of the named variants available here
    local v
    for v in "$@"; do
      case $avail in *" $v "*) printf -- '--backend\ntarget:%s\n' "$v" ;; esac
    done
  }
  run() { # NAME [ENV=VALUE ...] -- fuzz options (the backends among them)
    local name=$1; shift
    local env=()
    while [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    case " $* " in *" --backend "*) ;; *) log "campaign $name: none of its variants is available here"; return ;; esac
    log "campaign $name: $*"
    env "${env[@]}" "$af" fuzz "$@" --time "$time_s" --crashes "$out/crashes-$name" --stats "$out/stats-$name.json" \
      --quiet 2>"$out/campaign-$name.log"
    log "campaign $name: exit $?"
  }
  IFS=, read -r -a cs <<<"$campaigns"
  for c in "${cs[@]}"; do
    case $c in
      lse) mapfile -t b < <(backends torch/cuda_sdpa_flash_lse torch/cuda_sdpa_efficient_lse torch/cuda_sdpa_cudnn_lse \
                                     cudnn/sdpa fa4/func)
           run lse -- "${b[@]}" --batch 16 --seed 11 ;;
      fp8kv) mapfile -t b < <(backends flashinfer/single_prefill flashinfer/batch_paged flashinfer/decode)
             run fp8kv -- "${b[@]}" --fp8 0.5 --batch 16 --seed 12 ;;
      invariant) mapfile -t b < <(backends flashinfer/batch_paged_fixed_split flashinfer/batch_paged)
                 run invariant -- "${b[@]}" --relation batch_split --batch 16 --seed 13 ;;
      cudnn_fp8) mapfile -t b < <(backends cudnn/sdpa_fp8)
                 run cudnn_fp8 -- "${b[@]}" --fp8 1 --max-findings 20 --seed 14 ;;
      *) log "unknown campaign $c (lse, fp8kv, invariant, cudnn_fp8)" ;;
    esac
  done
  "$py" - "$out" <<'EOF' | tee -a "$out/summary.txt"
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "stats-*.json"))):
    s = json.load(open(path))
    name = os.path.basename(path)[6:-5]
    print("%-10s %8d cases in %5.0f s, skipped %d; findings %s; known hits %d"
          % (name, s.get("execs", 0), s.get("elapsed", 0.0), s.get("skipped", 0),
             json.dumps(s.get("findings_per_kind", {}), sort_keys=True), s.get("known_hits", 0)))
EOF
  (cd "$out" && ls -d crashes-* >/dev/null 2>&1 && tar czf crashes.tar.gz crashes-*) || true
fi
log "done: $out"
