#!/usr/bin/env bash
# Speed of the core, in one run on one core: BLAS yardsticks, fused/ref GFLOP/s and
# pipeline cases/s (targets: fused >= 40% sgemm, ref >= 50% dgemm, >= 100,000 tiny cases/s).
#   scripts/bench_core.sh [SECONDS_PER_PIPELINE_RUN]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
core=""
if grep -q avx512bw /proc/cpuinfo; then core=SkylakeX; elif grep -q avx2 /proc/cpuinfo; then core=Haswell; fi
# OpenBLAS 0.3.21 falls back to generic kernels on CPUs newer than it knows
OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$core} OPENBLAS_NUM_THREADS=1 taskset -c 0 build/bench_core "${1:-5}"
