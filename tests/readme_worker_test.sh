#!/bin/sh
# readme_worker_test.sh ATTNFUZZ PYTHON WORK - the README's twenty-line worker, taken from
# README.md as printed there, fuzzed through the worker protocol: it declares NaN for fully
# masked rows and IEEE arithmetic through masked keys (conventions masked_rows "nan",
# masked_values "ieee"), so a campaign is clean;
# the same worker declaring "exclude" is caught as masked_value_leak (the declaration, not
# the oracle, is what waives it). Exit 77 (skipped) without numpy in PYTHON.
set -u
AF=$1; PY=$2; W=$3
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c "import numpy, ml_dtypes" 2>/dev/null || { echo "SKIP: $PY has no numpy"; exit 77; }
rm -rf "$W"; mkdir -p "$W"
README=$(dirname "$0")/../README.md
sed -n '/^# my_worker.py/,/^```$/p' "$README" | sed '$d' >"$W/my_worker.py"
grep -q '^serve(run' "$W/my_worker.py" || fail "README has no worker example"
[ "$(wc -l <"$W/my_worker.py")" -le 30 ] || fail "the README worker is not about twenty lines"
sed 's/"masked_values": "ieee"/"masked_values": "exclude"/' "$W/my_worker.py" >"$W/undeclared.py"
cmp -s "$W/my_worker.py" "$W/undeclared.py" && fail "the README worker declares no masked_values"

"$AF" fuzz --backend "worker:$PY $W/my_worker.py" --runs 1500 --seed 3 --crashes "$W/declared" --quiet \
  >"$W/declared.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$W/declared.log"; fail "the README worker is not clean (exit $rc)"; }
"$AF" fuzz --backend "worker:$PY $W/undeclared.py" --runs 1500 --seed 3 --crashes "$W/undeclared" --quiet \
  >"$W/undeclared.log" 2>&1
rc=$?
[ $rc -eq 1 ] || { cat "$W/undeclared.log"; fail "undeclared IEEE leaks not found (exit $rc)"; }
ls "$W/undeclared" | grep -q '^masked_value_leak-' || fail "no masked_value_leak bundle"
ls "$W/undeclared" | grep -qv '^masked_value_leak-' && { ls "$W/undeclared"; fail "other findings than masked_value_leak"; }
echo "README worker: clean as declared, masked_value_leak when undeclared"
