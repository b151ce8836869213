#!/usr/bin/env bash
# Every test: set up (apt packages, release and sanitizer builds), then
#   1. ctest on the release build (unit tests, the 100k-case backend test, CLI, Python loader),
#      but the wheel's test;
#   2. ctest on the address+undefined sanitizer build: unit tests and a short fuzz smoke;
#   3. the wheel end to end (ctest -L wheel: built from a clean clone, installed into a fresh
#      environment, run there; about two minutes, PyPI or pip's cache), when what goes into
#      the wheel changed since it last passed on this machine: the packaging (pyproject.toml,
#      CMakeLists.txt, scripts/build_wheel.sh, the test), the Python package and its
#      requirements, the code that finds an installed attnfuzz's Python and data, the known
#      bugs it ships. --wheel runs it regardless.
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=auto
for a in "$@"; do
  case $a in
    --wheel) wheel=always ;;
    *) echo "test.sh: unknown option $a (--wheel: run the wheel's test even when it passed before)" >&2; exit 2 ;;
  esac
done
scripts/setup.sh --asan
cache=${ATTNFUZZ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnfuzz}
# torch.compile's compiled code (Inductor's on-disk cache, keyed by the graph, the inputs'
# properties and torch's version) beside the Python environment rather than in /tmp: the
# self-tests and repros of the compiled variants spend four fifths of their time compiling
# (targets_torch_flex: 175 s cold, 37 s warm), and a machine that keeps the environment
# keeps this too. Each test still compiles what it runs, from the cache or anew.
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$cache/inductor}
# a test per core (the tests are single processes), 2 at least and 8 at most (memory)
jobs=$(nproc 2>/dev/null || echo 2)
jobs=$(( jobs < 2 ? 2 : jobs > 8 ? 8 : jobs ))
echo "== release build =="
(cd build && ctest --output-on-failure -j$jobs -LE wheel)
echo "== address+undefined sanitizer build =="
(cd build-asan && AF_TEST_SCALE=0.05 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j$jobs -L sanitize)

echo "== the wheel =="
# the committed contents the test's clone builds, hashed: the same inputs pass once per machine
key=$(git ls-tree -r HEAD -- pyproject.toml CMakeLists.txt scripts/build_wheel.sh tests/wheel_test.sh \
        tests/wheel.cmake python src/core/proc.c src/core/proc.h src/oracle/known.c corpus/findings 2>/dev/null \
      | awk -F'\t' '$2 !~ /^corpus\/findings\// || $2 ~ /\/known\.json$/' | sha256sum | cut -c1-16)
stamp=$cache/wheel-test-passed-$key
if [ $wheel = auto ] && git rev-parse -q --verify HEAD >/dev/null && [ -f "$stamp" ]; then
  echo "the wheel's inputs passed on this machine before ($stamp); scripts/test.sh --wheel runs it again"
else
  (cd build && ctest --output-on-failure -L wheel) | tee build/wheel-ctest.log
  # a pass, not a skip (no PyPI), is remembered
  if ! grep -q "Skipped" build/wheel-ctest.log; then mkdir -p "$cache" && touch "$stamp"; fi
fi
