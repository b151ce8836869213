#!/usr/bin/env bash
# fuzz_afl.sh - a parallel AFL++ campaign of the attnfuzz harness: one -M main instance
# and N-1 -S secondaries on one sync directory, stopped after a time.
#
#   scripts/fuzz_afl.sh [options] [-- extra afl-fuzz flags]
#
#   -j N           instances (default: number of CPUs): 1 main + N-1 secondaries
#   -t SECONDS     stop after this long (afl-fuzz -V; default 600)
#   -o DIR         sync directory (default build-fuzz-afl/sync); resumed when it exists
#   -c DIR         bundle directory (default: crashes/ of the repository)
#   -b DIR         build directory (default build-fuzz-afl; built with afl-clang-fast)
#   -n NAME        instance name prefix (default: the host name): unique per machine
#   --secondary    only -S instances here (another machine runs the -M main)
#   --no-mutator   AFL++'s own mutators only (no structure-aware custom mutator)
#   --mutator-only the custom mutator only (AFL_CUSTOM_MUTATOR_ONLY=1)
#
# Several machines: give each a different -n, run --secondary on all but one, and merge
# the sync directories (fuzz/README.md: rsync of each instance's queue, or one shared
# filesystem path as -o). Bundles from all machines merge with scripts/fuzz_merge_bundles.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fuzz_env.sh"

n=$(nproc)
seconds=600
build="$AF_REPO/build-fuzz-afl"
sync=""
bundles="${ATTNFUZZ_CRASHES:-$AF_REPO/crashes}"
name=$(hostname -s 2>/dev/null || echo host)
secondary_only=0
mutator=1
mutator_only=0
while [ $# -gt 0 ]; do
    case $1 in
    -j) n=$2; shift 2 ;;
    -t) seconds=$2; shift 2 ;;
    -o) sync=$2; shift 2 ;;
    -c) bundles=$2; shift 2 ;;
    -b) build=$2; shift 2 ;;
    -n) name=$2; shift 2 ;;
    --secondary) secondary_only=1; shift ;;
    --no-mutator) mutator=0; shift ;;
    --mutator-only) mutator_only=1; shift ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    --) shift; break ;;
    *) af_die "unknown option $1 (see --help)" ;;
    esac
done
[ -n "$sync" ] || sync="$build/sync"
name=${name//[^A-Za-z0-9_-]/_}

command -v afl-fuzz >/dev/null || af_die "afl-fuzz (AFL++) is needed"
af_build afl "$build" afl-clang-fast
bin="$build/fuzz/attnfuzz_harness"
mkdir -p "$sync" "$bundles"

# container-safe: no CPU frequency or core_pattern checks, no curses UI, no core pinning
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_NO_AFFINITY=1
export AFL_AUTORESUME=1
export ATTNFUZZ_CRASHES="$bundles" ATTNFUZZ_QUIET=1
if [ "$mutator" = 1 ]; then
    export AFL_CUSTOM_MUTATOR_LIBRARY="$build/fuzz/libattnfuzz_afl_mutator.so"
    [ "$mutator_only" = 1 ] && export AFL_CUSTOM_MUTATOR_ONLY=1
fi

common=(-i "$AF_REPO/corpus/seeds" -o "$sync" -x "$AF_REPO/fuzz/attnfuzz.dict" -t 5000 -V "$seconds")
before=$(af_count_bundles "$bundles")
pids=()
names=()
for ((k = 0; k < n; k++)); do
    if [ $k = 0 ] && [ "$secondary_only" = 0 ]; then
        role=(-M "$name-main"); id="$name-main"
    else
        role=(-S "$name-s$k"); id="$name-s$k"
    fi
    afl-fuzz "${role[@]}" "${common[@]}" "$@" -- "$bin" >"$sync/$id.log" 2>&1 &
    pids+=($!)
    names+=("$id")
done
echo "AFL++: ${#pids[@]} instances (${names[*]}) for ${seconds}s, sync $sync, bundles $bundles" >&2
trap 'kill "${pids[@]}" 2>/dev/null || true' INT TERM
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done

printf '%-24s %12s %10s %8s %8s\n' instance execs_done execs/s corpus crashes >&2
for id in "${names[@]}"; do
    s="$sync/$id/fuzzer_stats"
    if [ -f "$s" ]; then
        get() { awk -F' *: *' -v k="$1" '$1 == k { print $2 }' "$s"; }
        printf '%-24s %12s %10s %8s %8s\n' "$id" "$(get execs_done)" "$(get execs_per_sec)" \
            "$(get corpus_count)" "$(get saved_crashes)" >&2
    else
        echo "$id: no fuzzer_stats (see $sync/$id.log)" >&2
        tail -5 "$sync/$id.log" >&2 || true
    fi
done
after=$(af_count_bundles "$bundles")
echo "AFL++: bundles $before -> $after in $bundles" >&2
exit $status
