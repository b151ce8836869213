#!/usr/bin/env bash
# Every test: set up (apt packages, release and sanitizer builds), then
#   1. ctest on the release build (unit tests, the 100k-case backend test, CLI, Python loader)
#   2. ctest on the address+undefined sanitizer build: unit tests and a short fuzz smoke
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --asan
echo "== release build =="
(cd build && ctest --output-on-failure -j2)
echo "== address+undefined sanitizer build =="
(cd build-asan && AF_TEST_SCALE=0.05 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j2 -L sanitize)
