#!/bin/sh
# report_test.sh ATTNFUZZ REPO ARTEFACTS - `attnfuzz report` end to end, in a real browser.
#
# A crashes directory with findings of two mutants (a short campaign) and of a numpy worker
# that scales twice (tests/worker_wrong_numpy.py; its bundle written by
# tests/make_worker_bundle.py as another tool would), then the report:
#   - every bundle has exactly one section in index.html and one row in report.md;
#   - every picture is a PNG file that exists, and is referenced exactly once;
#   - headless Chromium loads the page: the page's own check marks
#     body data-images="ok N" once every img is complete with naturalWidth > 0, N = the
#     number of bundles; a screenshot goes to ARTEFACTS/report.png;
#   - the worker finding's repro.py (no attnfuzz import) runs with the project's Python
#     from another directory, prints the mismatch and exits 1;
#   - with no Python to run, the report still renders and says so.
# Python: $ATTNFUZZ_PYTHON, else REPO/.venv/bin/python, else python3 (needs numpy and
# zstandard; exit 77 = skipped when it lacks them or when chromium is missing).
set -u
AF=$1
REPO=$2
ART=$3
fail() { echo "FAIL: $*"; exit 1; }

PY=${ATTNFUZZ_PYTHON:-}
[ -n "$PY" ] || { [ -x "$REPO/.venv/bin/python" ] && PY=$REPO/.venv/bin/python; } || PY=python3
"$PY" -c 'import numpy, zstandard' 2>/dev/null || { echo "SKIP: $PY lacks numpy or zstandard"; exit 77; }
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROME" ] || { echo "SKIP: no chromium (apt-get install chromium)"; exit 77; }

rm -rf "$ART"
mkdir -p "$ART"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
CR=$W/crashes
mkdir -p "$CR"

"$AF" fuzz --backend mutant:causal_top_left --backend mutant:scale_sqrt_q_only --runs 600 --seed 3 \
    --crashes "$CR" --stats "$W/stats.json" --quiet >/dev/null 2>&1
[ $? -le 1 ] || fail "campaign failed"
n_mutant=$(ls "$CR" | wc -l)
for m in causal_top_left scale_sqrt_q_only; do
    grep -l "\"mutant:$m\"" "$CR"/*/case.json >/dev/null 2>&1 || fail "no finding of mutant:$m"
done
wb=$(cd "$REPO" && "$PY" tests/make_worker_bundle.py "$CR" "worker:python3 tests/worker_wrong_numpy.py" \
     tests/worker_wrong_numpy.py) || fail "worker bundle not written"
wname=$(basename "$wb")
n=$(ls "$CR" | wc -l)
[ "$n" -eq $((n_mutant + 1)) ] || fail "expected $((n_mutant + 1)) bundles, have $n"
echo "bundles: $n ($n_mutant of the two mutants, 1 of the worker)"

OUT=$W/report
(cd "$REPO" && ATTNFUZZ_PYTHON=$PY "$AF" report "$CR" -o "$OUT" --stats "$W/stats.json") || fail "report failed"
[ -s "$OUT/index.html" ] && [ -s "$OUT/report.md" ] || fail "index.html or report.md missing"

for d in "$CR"/*; do
    b=$(basename "$d")
    c=$(grep -c "<div class=\"finding\" id=\"$b\">" "$OUT/index.html")
    [ "$c" -eq 1 ] || fail "$b: $c sections in index.html"
    c=$(grep -c "^| \`[^|]*\` | [a-z_]* | $b |" "$OUT/report.md")
    [ "$c" -eq 1 ] || fail "$b: $c table rows in report.md"
    png=$OUT/img/$b.png
    [ -f "$png" ] || fail "$b: no picture"
    [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$png is not a PNG"
    c=$(grep -c "src=\"img/$b.png\"" "$OUT/index.html")
    [ "$c" -eq 1 ] || fail "img/$b.png referenced $c times"
done
[ "$(ls "$OUT/img" | wc -l)" -eq "$n" ] || fail "pictures other than the bundles' in img/"
sections=$(grep -c '<div class="finding"' "$OUT/index.html")
[ "$sections" -eq "$n" ] || fail "$sections sections for $n bundles"

# the browser: all pictures decoded, and a screenshot for a person
"$CHROME" --headless --no-sandbox --disable-gpu --virtual-time-budget=10000 --dump-dom "file://$OUT/index.html" \
    >"$W/dom.html" 2>"$W/chrome.err" || { cat "$W/chrome.err"; fail "chromium --dump-dom failed"; }
marker=$(grep -o 'data-images="[^"]*"' "$W/dom.html")
[ "$marker" = "data-images=\"ok $n\"" ] || fail "browser: $marker (want ok $n)"
"$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,2400 \
    --screenshot="$ART/report.png" "file://$OUT/index.html" >/dev/null 2>>"$W/chrome.err"
[ -s "$ART/report.png" ] || fail "no screenshot"
cp -r "$OUT" "$ART/report"

# the worker finding's standalone repro
rp=$OUT/repro/$wname.py
[ -f "$rp" ] || fail "no repro script for $wname"
grep -q "src=\"img/$wname.png\"" "$OUT/index.html" && grep -q "href=\"repro/$wname.py\"" "$OUT/index.html" ||
    fail "the worker finding does not link its repro"
grep -Eq '^\s*(import|from) attnfuzz' "$rp" && fail "repro.py imports attnfuzz"
(cd "$W" && "$PY" "$rp" >"$W/repro.out" 2>&1)
rc=$?
cat "$W/repro.out"
[ "$rc" -eq 1 ] || fail "repro.py exited $rc (want 1)"
grep -q "max abs error" "$W/repro.out" && grep -q "MISMATCH" "$W/repro.out" && grep -q "worst element" "$W/repro.out" ||
    fail "repro.py does not print the mismatch"
# mutants have no repro (attnfuzz replay reproduces them)
[ "$(ls "$OUT/repro" | grep -c '\.py$')" -eq 1 ] || fail "repro scripts for built-in backends"

# no Python: the report still renders and says so (only when no .venv takes precedence)
if [ ! -x "$REPO/.venv/bin/python" ]; then
    (cd "$W" && ATTNFUZZ_PYTHON=$W/no-such-python "$AF" report "$CR" -o "$W/nopy" >/dev/null 2>"$W/nopy.err") ||
        fail "report without Python failed"
    grep -q "Python is unavailable" "$W/nopy/index.html" || fail "the report does not say Python is missing"
    [ "$(grep -c '<div class="finding"' "$W/nopy/index.html")" -eq "$n" ] || fail "report without Python incomplete"
fi
echo "report ok: $n bundles, $n pictures loaded in chromium, repro exits 1"
