#!/usr/bin/env bash
# Installs what attnfuzz needs on Debian 12 (apt) and builds it (CMake). Idempotent:
# packages already present are not reinstalled, an existing build is reused.
#   scripts/setup.sh            release build in build/
#   scripts/setup.sh --asan     also the address+undefined sanitizer build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libcjson-dev libxxhash-dev libzstd-dev libopenblas-dev
          libcmocka-dev libpng-dev python3 python3-numpy python3-zstandard zstd
          clang libclang-rt-14-dev afl++)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
if [ "${1:-}" = "--asan" ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAF_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$jobs"
fi
