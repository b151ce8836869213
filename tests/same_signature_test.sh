#!/bin/sh
# same_signature_test.sh ATTNFUZZ LIBFUZZER_HARNESS REPLAY_HARNESS REPO WORK
#
# One bug, one bundle, whichever engine finds it: mutant:causal_top_left fuzzed by the
# campaign (`attnfuzz fuzz`), by libFuzzer (the harness, from the seed corpus) and by the
# replay harness over the seeds. The diverge finding of the mutant must land under the
# same bundle name in all three (the store step minimizes and signs alike), every bundle
# the harness wrote must replay with exit 1, and with minimization off the harness signs
# raw cases, which gives other names too (so the first check could fail).
set -u
AF=$1; LF=$2; RP=$3; REPO=$4; W=$5
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$W"; mkdir -p "$W/lf-corpus"
clean="env -u ATTNFUZZ_PAIRS -u ATTNFUZZ_RELATIONS -u ATTNFUZZ_ABORT -u ATTNFUZZ_SAMPLE_RELATIONS -u ATTNFUZZ_WAIVE"

"$AF" fuzz --backend mutant:causal_top_left --runs 400 --seed 1 --crashes "$W/campaign" --quiet >/dev/null 2>&1
[ $? -le 1 ] || fail "campaign failed"
$clean ATTNFUZZ_BACKENDS=mutant:causal_top_left ATTNFUZZ_CRASHES="$W/libfuzzer" ATTNFUZZ_QUIET=1 \
    ASAN_OPTIONS=detect_leaks=0 "$LF" -runs=300 -seed=1 -max_len=512 "$W/lf-corpus" "$REPO/corpus/seeds" \
    >"$W/libfuzzer.log" 2>&1 || { tail -20 "$W/libfuzzer.log"; fail "libFuzzer failed"; }
$clean ATTNFUZZ_BACKENDS=mutant:causal_top_left ATTNFUZZ_CRASHES="$W/replay" ATTNFUZZ_QUIET=1 \
    "$RP" "$REPO/corpus/seeds" >/dev/null 2>&1
$clean ATTNFUZZ_BACKENDS=mutant:causal_top_left ATTNFUZZ_CRASHES="$W/raw" ATTNFUZZ_QUIET=1 ATTNFUZZ_MINIMIZE=0 \
    "$RP" "$REPO/corpus/seeds" >/dev/null 2>&1

for e in campaign libfuzzer replay raw; do echo "$e: $(ls "$W/$e" 2>/dev/null | tr '\n' ' ')"; done
c=$(ls "$W/campaign" | grep '^diverge-')
[ "$(echo "$c" | wc -w)" -ge 1 ] || fail "the campaign found no diverge"
for e in libfuzzer replay; do
    d=$(ls "$W/$e" | grep '^diverge-')
    [ -n "$d" ] || fail "$e found no diverge"
    for x in $d; do echo "$c" | grep -qx "$x" || fail "$e signed the diverge as $x, the campaign as $c"; done
done
other=0
for x in $(ls "$W/raw" | grep '^diverge-'); do echo "$c" | grep -qx "$x" || other=1; done
[ $other -eq 1 ] || fail "unminimized, the harness signs like the campaign too: the check above proves nothing"
for b in "$W"/libfuzzer/*; do
    "$AF" replay "$b" >/dev/null 2>&1
    [ $? -eq 1 ] || fail "$b does not replay with exit 1"
done
echo "same signatures: $c"
