#!/usr/bin/env bash
# fuzz_smoke_libfuzzer.sh - the libFuzzer harness under AddressSanitizer and UBSan, briefly.
# Used by ctest (tests/fuzz.cmake) from any build, gcc or clang: it keeps its own clang
# build in DIR, so the main build's compiler does not matter.
#
#   scripts/fuzz_smoke_libfuzzer.sh build DIR   configure (once) and build DIR
#   scripts/fuzz_smoke_libfuzzer.sh run DIR     fuzz a few thousand inputs in DIR
#   scripts/fuzz_smoke_libfuzzer.sh all DIR     both
#
# The run checks every kind of code the harness reaches (then the frame harness reads
# worker frames, fuzz/frame_harness.c): the default pair explicit,fused,
# a seeded-bug backend (so bundles get written), and every relation, on small cases
# (ATTNFUZZ_MAX_FLOPS) for speed. Any sanitizer report or crash fails it; findings do not
# (they are bundles, the harness's normal output). Exit 0 with an "OK" line on success,
# 77 (ctest: skipped) when clang or its libFuzzer runtime is missing.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_env.sh"

what=${1:-all}
dir=${2:-$AF_REPO/build-fuzz-smoke}
runs=${AF_SMOKE_RUNS:-1500}
tag="fuzz_libfuzzer_smoke"

skip() { echo "$tag: SKIPPED: $*"; exit 77; }
fail() { echo "$tag: FAILED: $*"; exit 1; }

command -v clang >/dev/null || skip "no clang"

do_build() {
    local probe
    probe=$(mktemp -d)
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
    clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1 || { rm -rf "$probe"; skip "clang cannot link -fsanitize=fuzzer,address,undefined"; }
    rm -rf "$probe"
    : >"$dir.build.log"
    if [ ! -f "$dir/CMakeCache.txt" ]; then
        cmake -S "$AF_REPO" -B "$dir" -DCMAKE_C_COMPILER=clang -DAF_FUZZ_ENGINE=libfuzzer -DAF_SANITIZE=ON \
            -DAF_TESTS=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O1 -g" >"$dir.configure.log" 2>&1 ||
            { cat "$dir.configure.log"; fail "cmake configure"; }
    fi
    # one target per call: the first may regenerate the build files (a new target), and a
    # make already running does not read them again
    local t
    for t in attnfuzz_harness attnfuzz_frame_harness; do
        cmake --build "$dir" -j"$(nproc)" --target "$t" >>"$dir.build.log" 2>&1 ||
            { tail -30 "$dir.build.log"; fail "build of $t (log: $dir.build.log)"; }
    done
    echo "$tag: built $dir/fuzz/attnfuzz_harness and attnfuzz_frame_harness (clang, address+undefined, libFuzzer)"
}

do_run() {
    local bin="$dir/fuzz/attnfuzz_harness"
    [ -x "$bin" ] || fail "$bin missing: run '$0 build $dir' first"
    local work="$dir/smoke-run"
    rm -rf "$work"
    mkdir -p "$work/corpus"
    cp "$AF_REPO"/corpus/seeds/* "$work/corpus/"
    local log="$work/libfuzzer.log"
    # only the variables set here: a caller's ATTNFUZZ_* must not change the test
    env -u ATTNFUZZ_ABORT -u ATTNFUZZ_SAMPLE_RELATIONS -u ATTNFUZZ_BUDGET_MIB -u ATTNFUZZ_WAIVE \
        ATTNFUZZ_BACKENDS=mutant:bshd_as_bhsd ATTNFUZZ_PAIRS="explicit,fused" ATTNFUZZ_RELATIONS=all \
        ATTNFUZZ_MAX_FLOPS=2e5 ATTNFUZZ_CRASHES="$work/bundles" ATTNFUZZ_QUIET=1 \
        ASAN_OPTIONS="abort_on_error=1:detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
        "$bin" -runs="$runs" -seed=1 -max_len=512 -dict="$AF_REPO/fuzz/attnfuzz.dict" -timeout=20 \
        -artifact_prefix="$work/" -print_final_stats=1 "$work/corpus" >"$log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] || grep -qE "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:" "$log"; then
        grep -E -A12 "ERROR:|runtime error:" "$log" | head -60
        fail "libFuzzer exit $rc (log: $log)"
    fi
    local done_runs
    done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "$tag: OK: $done_runs inputs under address+undefined, no sanitizer report; $(af_count_bundles "$work/bundles") bundles written"

    # the frame reader: what a broken or hostile worker may send (frame_harness.c)
    local fbin="$dir/fuzz/attnfuzz_frame_harness" flog="$work/frames.log"
    [ -x "$fbin" ] || fail "$fbin missing: run '$0 build $dir' first"
    mkdir -p "$work/frames"
    cp "$AF_REPO"/fuzz/frame_seeds/* "$work/frames/"
    ASAN_OPTIONS="abort_on_error=1:detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
        "$fbin" -runs="${AF_SMOKE_FRAME_RUNS:-200000}" -seed=1 -max_len=2048 -dict="$AF_REPO/fuzz/frames.dict" \
        -artifact_prefix="$work/frame-" -print_final_stats=1 "$work/frames" >"$flog" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || grep -qE "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:" "$flog"; then
        grep -E -A12 "ERROR:|runtime error:|deadly signal" "$flog" | head -60
        fail "frame harness: libFuzzer exit $rc (log: $flog)"
    fi
    done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$flog")
    echo "$tag: OK: $done_runs worker frames read under address+undefined, no sanitizer report"
}

case $what in
build) do_build ;;
run) do_run ;;
all) do_build && do_run ;;
*) echo "usage: $0 build|run|all [DIR]" >&2; exit 2 ;;
esac
