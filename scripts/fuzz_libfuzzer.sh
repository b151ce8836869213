#!/usr/bin/env bash
# fuzz_libfuzzer.sh - a parallel libFuzzer campaign of the attnfuzz harness.
#
#   scripts/fuzz_libfuzzer.sh [options] [-- extra libFuzzer flags]
#
#   -j N          parallel workers (default: number of CPUs)
#   -t SECONDS    stop after this long (-max_total_time; default 600)
#   -m fork|jobs  -fork=N (default: one process merging new coverage, survives crashes)
#                 or -jobs=N -workers=N (independent processes sharing the corpus dir)
#   -o DIR        campaign directory (default build-fuzz-libfuzzer/campaign): corpus/,
#                 artifacts/ (libFuzzer crash/timeout/oom files), logs
#   -c DIR        bundle directory (default: crashes/ of the repository)
#   -b DIR        build directory (default build-fuzz-libfuzzer; built with clang if missing)
#   --plain       the baseline harness without custom mutator and semantic feedback
#
# What is checked comes from ATTNFUZZ_* (fuzz/README.md), e.g.
#   ATTNFUZZ_BACKENDS=mutant:bshd_as_bhsd scripts/fuzz_libfuzzer.sh -j 2 -t 60
# The corpus starts from corpus/seeds/ and grows in the campaign directory; every new
# finding signature is written once as a bundle (attnfuzz replay DIR replays it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_env.sh"

jobs=$(nproc)
seconds=600
mode=fork
build="$AF_REPO/build-fuzz-libfuzzer"
out=""
bundles="${ATTNFUZZ_CRASHES:-$AF_REPO/crashes}"
harness=attnfuzz_harness
while [ $# -gt 0 ]; do
    case $1 in
    -j) jobs=$2; shift 2 ;;
    -t) seconds=$2; shift 2 ;;
    -m) mode=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    -c) bundles=$2; shift 2 ;;
    -b) build=$2; shift 2 ;;
    --plain) harness=attnfuzz_harness_plain; shift ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    --) shift; break ;;
    *) af_die "unknown option $1 (see --help)" ;;
    esac
done
[ -n "$out" ] || out="$build/campaign"
case $mode in fork | jobs) ;; *) af_die "-m wants fork or jobs" ;; esac

command -v clang >/dev/null || af_die "clang with libFuzzer is needed"
af_build libfuzzer "$build" clang
bin="$build/fuzz/$harness"

mkdir -p "$out/corpus" "$out/artifacts" "$bundles"
if [ -z "$(ls -A "$out/corpus")" ]; then cp "$AF_REPO"/corpus/seeds/* "$out/corpus/"; fi
export ATTNFUZZ_CRASHES="$bundles"
export ATTNFUZZ_QUIET="${ATTNFUZZ_QUIET:-1}"

flags=(-dict="$AF_REPO/fuzz/attnfuzz.dict" -max_len=512 -timeout=30 -rss_limit_mb=2560
       -max_total_time="$seconds" -artifact_prefix="$out/artifacts/" -print_final_stats=1)
if [ "$mode" = fork ]; then
    flags+=(-fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
else
    flags+=(-jobs="$jobs" -workers="$jobs")
fi

before=$(af_count_bundles "$bundles")
echo "libFuzzer: $bin, $mode x$jobs, ${seconds}s, corpus $out/corpus, bundles $bundles" >&2
start=$(date +%s)
# -jobs mode writes fuzz-N.log in the current directory
(cd "$out" && "$bin" "${flags[@]}" "$@" "$out/corpus" 2>&1 | tee "$out/libfuzzer.log" | grep -E "^#|NEW |DONE|ERROR|stat::" | tail -n 40) || true
after=$(af_count_bundles "$bundles")
echo "libFuzzer: $(( $(date +%s) - start ))s, corpus $(ls "$out/corpus" | wc -l) inputs, bundles $before -> $after in $bundles" >&2
