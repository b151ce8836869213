#!/bin/sh
# report_tracker_test.sh ATTNFUZZ REPO - `attnfuzz report` for a bug tracker: each known real
# bug once, its public issues as links, its repro copied, each real target's finding's
# upstream page (attnfuzz triage --out); no page for a known precision limit.
#
# The bundles: a torch CPU flash bundle of a real bug whose entry cites "pytorch PR #105202",
# tinygrad's two bundles of one real bug ("tinygrad#862"), the torch bundle of a precision
# entry, and a numpy worker's finding no entry matches (tests/make_worker_bundle.py). The
# expected links are written out here by hand from GitHub's URL scheme.
# Python: $ATTNFUZZ_PYTHON, else REPO/.venv/bin/python, else python3 (exit 77 = skipped
# without numpy and zstandard).
set -u
AF=$1
REPO=$2
fail() { echo "FAIL: $*"; exit 1; }

PY=${ATTNFUZZ_PYTHON:-}
[ -n "$PY" ] || { [ -x "$REPO/.venv/bin/python" ] && PY=$REPO/.venv/bin/python; } || PY=python3
"$PY" -c 'import numpy, zstandard' 2>/dev/null || { echo "SKIP: $PY lacks numpy or zstandard"; exit 77; }

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
CR=$W/crashes
mkdir -p "$CR"
REAL=nan_mismatch-8df582dda7fa649d      # torch-sdpa-flash-cpu-causal-negative-scale (real bug)
PREC=inf_mismatch-8246f316f4475547      # torch-sdpa-flash-cpu-backward-f16-dv-accumulation (precision)
cp -r "$REPO/corpus/findings/torch/bundles/$REAL" "$REPO/corpus/findings/torch/bundles/$PREC" "$CR/"
# the bundles of the entry tinygrad-softmax-single-key-nonfinite, as its known.json names them
TGB=$("$PY" -c 'import json, sys
for e in json.load(open(sys.argv[1]))["entries"]:
    if e["id"] == "tinygrad-softmax-single-key-nonfinite":
        print("\n".join(e["bundle"]))' "$REPO/corpus/findings/tinygrad/known.json") || fail "tinygrad's known.json unreadable"
for b in $TGB; do cp -r "$REPO/$b" "$CR/" || fail "no bundle $b"; done
TG=$(printf '%s\n' $TGB | wc -l)
[ "$TG" -ge 2 ] || fail "expected tinygrad's bundles of one entry, have $TG"
wb=$(cd "$REPO" && "$PY" tests/make_worker_bundle.py "$CR" "worker:python3 tests/worker_wrong_numpy.py" \
     tests/worker_wrong_numpy.py) || fail "worker bundle not written"
NEW=$(basename "$wb")

OUT=$W/report
(cd "$REPO" && ATTNFUZZ_PYTHON=$PY "$AF" report "$CR" -o "$OUT" >"$W/out" 2>"$W/err") || { cat "$W/err"; fail "report failed"; }
MD=$OUT/report.md
HTML=$OUT/index.html
# the tracker section: one row per known real bug, one per new finding, none for the precision entry
sect=$(sed -n '/^### For the tracker/,/^| target |/p' "$MD")
[ -n "$sect" ] || fail "report.md has no tracker section"
c=$(printf '%s\n' "$sect" | grep -c '^| \*\*torch-sdpa-flash-cpu-causal-negative-scale\*\*')
[ "$c" -eq 1 ] || fail "torch real bug: $c tracker rows (want 1)"
c=$(printf '%s\n' "$sect" | grep -c '^| \*\*tinygrad-softmax-single-key-nonfinite\*\*')
[ "$c" -eq 1 ] || fail "tinygrad real bug of $TG findings: $c tracker rows (want 1)"
printf '%s\n' "$sect" | grep -q 'torch-sdpa-flash-cpu-backward-f16-dv-accumulation' && fail "a precision entry in the tracker section"
printf '%s\n' "$sect" | grep -q '\[pytorch PR #105202\](https://github.com/pytorch/pytorch/pull/105202)' ||
    fail "pytorch PR #105202 is not linked to its pull request"
printf '%s\n' "$sect" | grep -q '\[tinygrad#862\](https://github.com/tinygrad/tinygrad/issues/862)' ||
    fail "tinygrad#862 is not linked to its issue"
grep -q 'href="https://github.com/pytorch/pytorch/pull/105202">pytorch PR #105202</a>' "$HTML" ||
    fail "index.html does not link pytorch PR #105202"
# every tinygrad finding is listed in its entry's row, with its page
row=$(printf '%s\n' "$sect" | grep '^| \*\*tinygrad-softmax-single-key-nonfinite\*\*')
for d in $TGB; do
    b=$(basename "$d")
    printf '%s\n' "$row" | grep -q "$b (\[page\](upstream/$b.md))" || fail "$b not in its entry's row with its page"
done
# the known repros, copied byte for byte (the precision entry's too: it is linked from its finding)
cmp -s "$OUT/known/sdpa_cpu_flash_causal_negative_scale.py" "$REPO/corpus/findings/torch/sdpa_cpu_flash_causal_negative_scale.py" ||
    fail "the real bug's repro was not copied"
cmp -s "$OUT/known/softmax_single_key_nonfinite.py" "$REPO/corpus/findings/tinygrad/softmax_single_key_nonfinite.py" ||
    fail "tinygrad's repro was not copied"
[ -f "$OUT/known/sdpa_cpu_flash_backward_f16_dv_accumulation.py" ] || fail "the precision entry's repro was not copied"
grep -q 'href="known/sdpa_cpu_flash_causal_negative_scale.py"' "$HTML" || fail "index.html does not link the copied repro"
# upstream pages: the real bugs' and the new finding's, not the precision limit's
for b in "$REAL" "$NEW"; do
    p=$OUT/upstream/$b.md
    [ -s "$p" ] || fail "no upstream page for $b"
    grep -q '^## Repro' "$p" && grep -q '^## Environment' "$p" || fail "$b's page lacks its sections"
    grep -q "href=\"upstream/$b.md\"" "$HTML" || fail "index.html does not link $b's page"
done
grep -q 'torch-sdpa-flash-cpu-causal-negative-scale' "$OUT/upstream/$REAL.md" || fail "the page does not name its entry"
[ -e "$OUT/upstream/$PREC.md" ] && fail "an upstream page for a known precision limit"
printf '%s\n' "$sect" | grep -q "^| new: \`worker:.*\[draft page\](upstream/$NEW.md)" || fail "the new finding has no draft page row"
[ -e "$OUT/upstream/triage.err" ] && { cat "$OUT/upstream/triage.err"; fail "triage failed"; }

# --no-pages: the links stay, no page is written
(cd "$REPO" && ATTNFUZZ_PYTHON=$PY "$AF" report "$CR" -o "$W/np" --no-pages >/dev/null 2>&1) || fail "--no-pages failed"
[ -d "$W/np/upstream" ] && fail "--no-pages wrote pages"
grep -q '(https://github.com/pytorch/pytorch/pull/105202)' "$W/np/report.md" || fail "--no-pages lost the issue links"
echo "report tracker ok: 2 known real bugs, 1 new finding, their pages; none for the precision limit"
