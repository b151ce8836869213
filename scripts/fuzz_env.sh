# shellcheck shell=bash
# fuzz_env.sh - shared settings of the fuzz_*.sh campaign scripts (sourced, not run).
#
# OpenBLAS 0.3.21 picks generic kernels on CPUs newer than it knows and reads
# OPENBLAS_CORETYPE only when the process starts: set it here, before any harness runs.
# One BLAS thread per process: the campaigns parallelize over processes.

AF_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

af_blas_coretype() {
    if [ -n "${OPENBLAS_CORETYPE:-}" ]; then echo "$OPENBLAS_CORETYPE"; return; fi
    if grep -qw avx512bw /proc/cpuinfo 2>/dev/null; then echo SkylakeX
    elif grep -qw avx2 /proc/cpuinfo 2>/dev/null; then echo Haswell
    fi
}
_af_core=$(af_blas_coretype)
if [ -n "$_af_core" ]; then export OPENBLAS_CORETYPE="$_af_core"; fi
export OPENBLAS_NUM_THREADS=1

af_die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# af_build ENGINE DIR [CC]: configures and builds the fuzz targets of DIR when missing or stale.
af_build() {
    local engine=$1 dir=$2 cc=${3:-}
    local args=(-S "$AF_REPO" -B "$dir" -DAF_FUZZ_ENGINE="$engine" -DAF_TESTS=OFF)
    [ -n "$cc" ] && args+=(-DCMAKE_C_COMPILER="$cc")
    if [ ! -f "$dir/CMakeCache.txt" ]; then
        cmake "${args[@]}" >/dev/null || af_die "cmake configure of $dir failed"
    fi
    local targets=(--target attnfuzz_replay)
    case $engine in
    libfuzzer) targets+=(--target attnfuzz_harness --target attnfuzz_harness_plain) ;;
    afl) targets+=(--target attnfuzz_harness --target attnfuzz_afl_mutator) ;;
    replay) targets+=(--target attnfuzz_afl_mutator) ;;
    esac
    cmake --build "$dir" -j"$(nproc)" "${targets[@]}" >"$dir/fuzz-build.log" 2>&1 ||
        { tail -20 "$dir/fuzz-build.log" >&2; af_die "build of $dir failed (log: $dir/fuzz-build.log)"; }
}

# af_count_bundles DIR: bundle directories (with a case.json) directly under DIR.
af_count_bundles() {
    local n=0 d
    for d in "$1"/*/; do [ -f "$d/case.json" ] && n=$((n + 1)); done
    echo "$n"
}
