#!/usr/bin/env bash
# Installs what attnfuzz needs on Debian 12 (apt), builds it (CMake) and sets up the
# project's Python environment .venv/ (scripts/setup_python.sh: the worker kit's and the
# real targets' pinned packages). Idempotent: packages already present are not
# reinstalled, an existing build and environment are reused.
#   scripts/setup.sh              release build in build/, and .venv/
#   scripts/setup.sh --asan       also the address+undefined sanitizer build in build-asan/
#   scripts/setup.sh --no-python  without .venv/ (built-in backends only)
set -euo pipefail
cd "$(dirname "$0")/.."
asan=0 python=1
for a in "$@"; do
  case $a in
    --asan) asan=1 ;;
    --no-python) python=0 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake pkg-config libcjson-dev libxxhash-dev libzstd-dev libopenblas-dev
          libcmocka-dev libpng-dev python3 python3-numpy python3-zstandard python3-venv zstd
          clang libclang-rt-14-dev afl++ chromium  # clang: also tinygrad's CPU device compiler
          munge slurmctld slurmd slurm-client     # the Slurm test starts its own one-node cluster
          python3-yaml python3-kubernetes)        # the Kubernetes manifests' schema check
scripts/apt_install.sh "${packages[@]}"

# before configuring: the Python test groups look for .venv/bin/python
if [ $python = 1 ]; then
  scripts/setup_python.sh
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
if [ $asan = 1 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAF_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$jobs"
fi
