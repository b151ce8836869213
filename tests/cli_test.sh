#!/usr/bin/env bash
# End-to-end tests of the attnfuzz command line: `backends` (the real targets listed by the
# project's Python, worker commands run without a shell), exit codes of fuzz and replay, bundles
# that replay and explain themselves, corrupt bundles named in errors, two processes
# sharing a crashes directory, and Ctrl-C mid-campaign.
#   tests/cli_test.sh BUILD_DIR
set -uo pipefail
AF="$1/attnfuzz"
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d /tmp/af_cli_XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
expect_rc() { # expected command...
  local want=$1; shift
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  if [ "$rc" -eq "$want" ]; then ok "rc $want: $*"; else bad "rc $rc (want $want): $*"; sed 's/^/    /' "$T/err" | tail -5; fi
}
complete_bundles() { # dir: every bundle has its files, no temporary leftovers
  local d=$1 n=0
  for b in "$d"/*/; do
    [ -d "$b" ] || continue
    n=$((n + 1))
    for f in case.json input.bin q.npy.zst k.npy.zst v.npy.zst ref.npy.zst; do
      [ -s "$b/$f" ] || { echo "    incomplete: $b lacks $f"; return 1; }
    done
    ls "$b"/out.*.npy.zst >/dev/null 2>&1 || { echo "    incomplete: $b has no output"; return 1; }
  done
  if ls -a "$d" | grep -q '^\.tmp'; then echo "    leftover temporary in $d"; return 1; fi
  echo "$n" >"$T/nbundles"
  return 0
}

expect_rc 0 "$AF" backends
grep -q "mutant:causal_top_left" "$T/out" && ok "backends lists the mutants" || bad "backends lists the mutants"
# the real targets, listed by the project's Python (found above the executable, run without
# a shell): with the project's .venv, the numpy reference is available
grep -q "^real targets (target:STACK/VARIANT, run by " "$T/out" && ok "backends lists real targets" ||
  { bad "backends lists real targets"; tail -3 "$T/out" | sed 's/^/    /'; }
if [ -x "$SRC/.venv/bin/python" ] && "$SRC/.venv/bin/python" -c 'import numpy' 2>/dev/null; then
  grep -Eq "^  target:numpy_ref/float64 +fwd\+bwd +numpy" "$T/out" && ok "backends lists target:numpy_ref/float64 as available" ||
    { bad "backends lists target:numpy_ref/float64 as available"; grep -A3 "^real targets" "$T/out" | sed 's/^/    /'; }
fi
grep -q "^worker:COMMAND " "$T/out" && grep -q "^target:STACK/VARIANT " "$T/out" && grep -q "^plugin:PATH.so" "$T/out" &&
  ok "backends lists the prefixed forms" || bad "backends lists the prefixed forms"
# a worker command is split into words, never given to a shell: unquoted, $(touch FILE) is
# the two words "$(touch" and "FILE)" (the worker, a shell of the test's own, prints its
# arguments to stderr and exits before any hello)
expect_rc 2 "$AF" backends "worker:/bin/sh -c 'echo \"[\$0][\$1][\$2]\" >&2' \$(touch $T/shell-ran) 'a  b'"
[ ! -e "$T/shell-ran" ] && grep -qF "[\$(touch][$T/shell-ran)][a  b]" "$T/err" && ok "a worker command runs without a shell" ||
  { bad "a worker command runs without a shell"; sed 's/^/    /' "$T/err"; }
expect_rc 2 "$AF" backends "worker:/bin/echo 'unclosed"
grep -q "unbalanced quotes" "$T/err" && ok "unbalanced quotes are named" || bad "unbalanced quotes are named"
expect_rc 2 "$AF" fuzz --backend no_such_backend --runs 1 --crashes "$T/x"
grep -q "unknown backend" "$T/err" && ok "unknown backend is named" || bad "unknown backend is named"
expect_rc 2 "$AF" nosuchcommand

# a clean campaign: nothing found, exit 0, stats written (forward-only: the case stream this
# check was written for; a default campaign of explicit,fused draws a third of its cases
# backward)
expect_rc 0 "$AF" fuzz --runs 300 --seed 3 --backward 0 --crashes "$T/clean" --stats "$T/clean.json" --quiet
grep -q '"execs":	300' "$T/clean.json" && ok "stats count 300 execs" || bad "stats count 300 execs"
grep -q '"backward_execs":	0' "$T/clean.json" && ok "--backward 0: no backward case" || bad "--backward 0: no backward case"
# backward cases only: the built-ins' gradients clean too
expect_rc 0 "$AF" fuzz --runs 300 --seed 3 --backward 1 --crashes "$T/cleanb" --stats "$T/cleanb.json" --quiet
n_bwd=$(sed -n 's/.*"backward_execs":[[:space:]]*\([0-9]*\).*/\1/p' "$T/cleanb.json")
[ "${n_bwd:-0}" -ge 290 ] && ok "--backward 1: $n_bwd of 300 cases backward, clean" || bad "--backward 1: $n_bwd of 300 cases backward"
expect_rc 2 "$AF" fuzz --runs 1 --backward 1.5 --crashes "$T/x"
# a seeded backward bug: found through its gradient; the bundle holds dO, the reference
# gradients and the backend's; replay, show (a heatmap per gradient) and regress see it
expect_rc 1 "$AF" fuzz --backend mutant:bwd_gqa_no_sum --max-findings 1 --runs 2000 --crashes "$T/cg" --quiet
complete_bundles "$T/cg" && ok "backward bundles are complete" || bad "backward bundles are complete"
bg=$(ls -d "$T"/cg/*/ | head -1)
{ [ -s "$bg/do.npy.zst" ] && ls "$bg"/ref_d*.npy.zst >/dev/null 2>&1 && ls "$bg"/d*.mutant_bwd_gqa_no_sum.npy.zst >/dev/null 2>&1; } &&
  ok "a backward bundle holds do, ref_<g> and <g>.<backend>" || { bad "a backward bundle holds do, ref_<g> and <g>.<backend>"; ls "$bg" | sed 's/^/    /'; }
expect_rc 1 "$AF" replay "$bg"
grep -Eq "mutant:bwd_gqa_no_sum: diverge in d[kv]" "$T/out" && ok "replay names the gradient" || { bad "replay names the gradient"; sed 's/^/    /' "$T/out"; }
expect_rc 0 "$AF" show "$bg" --heatmap "$T/hg.png"
grep -Eq "^finding  diverge in d[kv] by mutant:bwd_gqa_no_sum" "$T/out" && ls "$T"/hg-d[kv].png >/dev/null 2>&1 &&
  ok "show names the gradient and draws its heatmap" || { bad "show names the gradient and draws its heatmap"; sed 's/^/    /' "$T/out"; }
expect_rc 0 "$AF" regress "$T/cg"
grep -q "1 checks same" "$T/out" && ok "regress: the gradient's verdict recorded and replayed the same" || { bad "regress on a backward bundle"; sed 's/^/    /' "$T/out"; }
# attnfuzz known judges a gradient's finding by that gradient's record (the output passed):
# a symptom clause sees its kind, metrics and tensor
cat >"$T/kg.json" <<'JSON'
{"format": "attnfuzz-known", "version": 1, "entries": [
 {"id": "mutant-gqa-grad", "class": "real_bug", "title": "the seeded GQA gradient sum",
  "backends": ["mutant:bwd_gqa_no_sum"], "kinds": ["diverge"], "when": ["backward", "gqa"],
  "symptom": ["tensor in [dk, dv]", "max_abs > 0"]}]}
JSON
expect_rc 0 "$AF" known --known "$T/kg.json" "$bg"
grep -q "known bug mutant-gqa-grad" "$T/out" && ok "known: a gradient's finding matched by its own record" ||
  { bad "known: a gradient's finding matched by its own record"; sed 's/^/    /' "$T/out"; }
# ... and judges an output again under the conventions its backend declared: c_worker's
# declared NaN rows (4 queries, 2 keys, bottom-right causal: 2 fully masked rows) are no
# failing element, so its last-column bug fails in live rows only
CW="$1/tests/c_worker"
if [ -x "$CW" ]; then
  mkdir -p "$T/kseed"
  printf '\0\0\0\3\0\1\0\7\0\7\0\0\4\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1' >"$T/kseed/s.bin"
  expect_rc 1 "$AF" fuzz --backend "worker:$CW --masked-rows nan --bug last_column" --corpus "$T/kseed" --runs 1 \
    --no-minimize --crashes "$T/kc" --quiet
  cat >"$T/kc.json" <<'JSON'
{"format": "attnfuzz-known", "version": 1, "entries": [
 {"id": "worker-last-column-live", "class": "real_bug", "title": "the last column off, in live rows",
  "backends": ["worker:*"], "kinds": ["diverge"], "symptom": "n_fail_masked == 0"}]}
JSON
  expect_rc 0 "$AF" known --known "$T/kc.json" "$T"/kc/*/
  grep -q "known bug worker-last-column-live" "$T/out" && ok "known: an output judged again under its backend's conventions" ||
    { bad "known: an output judged again under its backend's conventions"; sed 's/^/    /' "$T/out"; }
fi

# a seeded bug: exit 1, complete bundles that replay (exit 1) and show
expect_rc 1 "$AF" fuzz --backend mutant:causal_top_left --runs 400 --crashes "$T/c1" --stats "$T/c1.json" --quiet
complete_bundles "$T/c1" && ok "bundles are complete ($(cat "$T/nbundles"))" || bad "bundles are complete"
b1=$(ls -d "$T"/c1/*/ | head -1)
expect_rc 1 "$AF" replay "$b1"
grep -q "mutant:causal_top_left: diverge" "$T/out" && ok "replay reports the divergence" || bad "replay reports the divergence"
expect_rc 0 "$AF" show "$b1" --heatmap "$T/h.png"
head -c 8 "$T/h.png" | od -An -tx1 | grep -q "89 50 4e 47" && ok "heatmap is a PNG" || bad "heatmap is a PNG"
grep -q "worst" "$T/out" && ok "show prints the worst element" || bad "show prints the worst element"
# the same bundle against a correct backend: clean
expect_rc 0 "$AF" replay --backend explicit "$b1"
# an expected output (here the bundle's own reference): each ~expected check is run and
# printed once, the reference agrees with it, the seeded bug does not
cp -r "$b1" "$T/exp1" && cp "$b1/ref.npy.zst" "$T/exp1/expected.npy.zst"
expect_rc 1 "$AF" replay "$T/exp1"
n_exp=$(grep -c "~expected:" "$T/out"); n_uniq=$(grep "~expected:" "$T/out" | sort -u | wc -l)
[ "$n_exp" -eq 2 ] && [ "$n_uniq" -eq 2 ] && grep -q "ref~expected: ok" "$T/out" && grep -q "mutant:causal_top_left~expected: diverge" "$T/out" \
  && ok "replay prints each ~expected line once" || { bad "replay prints each ~expected line once ($n_exp lines, $n_uniq distinct)"; sed 's/^/    /' "$T/out"; }
# a plugin names itself ("plugin:naive"), not by its path: named twice (as a backend and in
# a pair) it is still one backend, with one check against the expected output
PLUGIN="$1/tests/af_test_plugin.so"
if [ -f "$PLUGIN" ]; then
  expect_rc 1 "$AF" replay --backend "plugin:$PLUGIN" --pair "plugin:$PLUGIN,mutant:causal_top_left" "$T/exp1"
  n_exp=$(grep -c "~expected:" "$T/out"); n_uniq=$(grep "~expected:" "$T/out" | sort -u | wc -l)
  [ "$n_exp" -eq 3 ] && [ "$n_uniq" -eq 3 ] && grep -q "plugin:naive~expected: ok" "$T/out" \
    && ok "a backend named twice is run and printed once" || { bad "a backend named twice ($n_exp ~expected lines, $n_uniq distinct)"; sed 's/^/    /' "$T/out"; }
fi
# a raw input file (all zeros: the 1x1x1x1 case)
head -c 64 /dev/zero >"$T/zeros.bin"
expect_rc 0 "$AF" replay "$T/zeros.bin"
expect_rc 1 "$AF" replay --backend mutant:causal_top_left "$b1/input.bin"

# minimize: a raw finding shrinks to a smaller case that still fails
expect_rc 1 "$AF" fuzz --backend mutant:causal_top_left --runs 60 --no-minimize --crashes "$T/raw" --quiet
braw=$(ls -d "$T"/raw/*/ | head -1)
expect_rc 1 "$AF" minimize --crashes "$T/min" "$braw"
bmin=$(ls -d "$T"/min/*/ | head -1)
expect_rc 1 "$AF" replay "$bmin"
qmin=$(grep -o '"q_len":[^,]*' "$bmin/case.json" | head -1 | tr -dc 0-9); qraw=$(grep -o '"q_len":[^,]*' "$braw/case.json" | head -1 | tr -dc 0-9)
[ "$qmin" -le "$qraw" ] && ok "minimize: q_len $qraw -> $qmin" || bad "minimize: q_len $qraw -> $qmin"
expect_rc 0 "$AF" minimize --backend explicit --crashes "$T/min2" "$braw"

# corrupt bundles: exit 2 and the file is named
cp -r "$b1" "$T/corrupt1"; head -c 40 "$b1/case.json" >"$T/corrupt1/case.json"
expect_rc 2 "$AF" replay "$T/corrupt1"
grep -q "case.json" "$T/err" && ok "truncated case.json is named" || bad "truncated case.json is named"
cp -r "$b1" "$T/corrupt2"; head -c 20 "$b1/q.npy.zst" >"$T/corrupt2/q.npy.zst"
expect_rc 2 "$AF" replay "$T/corrupt2"
grep -q "q.npy.zst" "$T/err" && ok "truncated q.npy.zst is named" || bad "truncated q.npy.zst is named"
expect_rc 2 "$AF" replay "$T/no_such_bundle"
# one corrupt among clean and diverging: 2 wins
expect_rc 2 "$AF" replay "$b1" "$T/corrupt1"

# two processes, one crashes directory, the same seed: each signature stored once
"$AF" fuzz --backend mutant:bshd_as_bhsd --runs 300 --seed 5 --crashes "$T/shared" --stats "$T/p1.json" --quiet >/dev/null 2>&1 &
p1=$!
"$AF" fuzz --backend mutant:bshd_as_bhsd --runs 300 --seed 5 --crashes "$T/shared" --stats "$T/p2.json" --quiet >/dev/null 2>&1
wait $p1
n1=$(grep -c '"signature"' "$T/p1.json"); n2=$(grep -c '"signature"' "$T/p2.json")
complete_bundles "$T/shared" && nb=$(cat "$T/nbundles") || nb=-1
if [ "$n1" -eq "$n2" ] && [ "$nb" -eq "$n1" ] && [ "$n1" -gt 0 ]; then ok "two processes: $n1 signatures, $nb bundles"; else bad "two processes: $n1/$n2 signatures, $nb bundles"; fi
# --jobs 2: children share the directory; the merged stats account for every bundle
expect_rc 1 "$AF" fuzz --backend mutant:bshd_as_bhsd --jobs 2 --time 4 --crashes "$T/jobs" --stats "$T/jobs.json" --quiet
complete_bundles "$T/jobs" && nb=$(cat "$T/nbundles") || nb=-1
ns=$(grep -c '"signature"' "$T/jobs.json")
[ "$nb" -eq "$ns" ] && ok "--jobs 2: $ns signatures, $nb bundles" || bad "--jobs 2: $ns signatures, $nb bundles"

# --jobs 2, one child SIGKILLed (as the OOM killer does): the parent says so on its status
# line and in the stats, restarts it, and loses nothing (every bundle is in the stats)
new_child() { # parent pid, known children: prints a child not among them (waits up to 4 s)
  local i c
  for i in $(seq 1 80); do
    for c in $(pgrep -P "$1"); do case " $2 " in *" $c "*) ;; *) echo "$c"; return 0;; esac; done
    sleep 0.05
  done
  return 1
}
"$AF" fuzz --backend mutant:bshd_as_bhsd --jobs 2 --time 6 --crashes "$T/kill" --stats "$T/kill.json" >/dev/null 2>"$T/kill.err" &
pid=$!
sleep 2
kids=$(pgrep -P $pid | tr '\n' ' ')
victim=${kids%% *}
kill -KILL "$victim"
wait $pid; rc=$?
[ "$rc" -eq 1 ] && ok "--jobs 2, one child killed once: exit 1 (findings)" || bad "--jobs 2, one child killed once: exit $rc"
grep -q "pid $victim) was killed by signal 9 (SIGKILL).*restarted it" "$T/kill.err" && ok "the death and restart are reported" || bad "the death and restart are reported"
grep -q "jobs died: 1" "$T/kill.err" && ok "the status line counts the dead job" || bad "the status line counts the dead job"
grep -q '"jobs_died":	1,' "$T/kill.json" && grep -q '"jobs_restarted":	1,' "$T/kill.json" && grep -q "\"pid\":	$victim," "$T/kill.json" \
  && grep -q '"signal_name":	"KILL"' "$T/kill.json" && ok "the stats name the dead job" || bad "the stats name the dead job"
complete_bundles "$T/kill" && nb=$(cat "$T/nbundles") || nb=-1
ns=$(grep -c '"signature"' "$T/kill.json")
[ "$nb" -eq "$ns" ] && [ "$nb" -gt 0 ] && ok "a killed job loses nothing: $ns signatures, $nb bundles" || bad "killed job: $ns signatures, $nb bundles"
# a restarted child killed at once: the slot kept dying, is given up, and the exit is 2
"$AF" fuzz --jobs 2 --time 5 --crashes "$T/loop" --stats "$T/loop.json" --quiet >/dev/null 2>"$T/loop.err" &
pid=$!
sleep 1.5
kids=$(pgrep -P $pid | tr '\n' ' ')
kill -KILL "${kids%% *}"
again=$(new_child $pid "$kids") && kill -KILL "$again"
wait $pid; rc=$?
[ "$rc" -eq 2 ] && ok "a job that kept dying: exit 2" || bad "a job that kept dying: exit $rc (restarted child ${again:-not seen})"
grep -q "kept dying (within a second of its restart)" "$T/loop.err" && grep -q '"jobs_kept_dying":	true' "$T/loop.json" \
  && grep -q '"jobs_died":	2,' "$T/loop.json" && ok "kept dying is reported" || bad "kept dying is reported"
grep -q '"execs":	[1-9]' "$T/loop.json" && ok "the other job ran on" || bad "the other job ran on"

# inputs from outside are bounded: a FIFO and a 64 GiB sparse file are refused at once,
# naming the file; --corpus skips them with a warning and runs
mkfifo "$T/fifo.bin"
timeout 10 "$AF" replay "$T/fifo.bin" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "fifo.bin: not a regular file" "$T/err" && ok "replay refuses a FIFO" || bad "replay of a FIFO: exit $rc"
truncate -s 64G "$T/huge.bin"
timeout 10 "$AF" replay "$T/huge.bin" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "huge.bin: file is 68719476736 bytes" "$T/err" && ok "replay refuses a 64 GiB input" || bad "replay of a 64 GiB input: exit $rc"
mkdir -p "$T/corp" && mv "$T/fifo.bin" "$T/huge.bin" "$T/corp/" && cp "$T/zeros.bin" "$T/corp/"
timeout 30 "$AF" fuzz --runs 20 --corpus "$T/corp" --crashes "$T/corpc" --quiet >/dev/null 2>"$T/err"; rc=$?
[ "$rc" -eq 0 ] && grep -q "skipped .*fifo.bin" "$T/err" && grep -q "skipped .*huge.bin" "$T/err" && ok "--corpus skips what it cannot read" || bad "--corpus with a FIFO and a huge file: exit $rc"
# the seeds of --corpus run as they are first: one run with a bundle of a rare mutant's
# finding as the corpus finds it again; one run without does not
mkdir -p "$T/seed1" && cp -r "$SRC/corpus/regress/nan_mismatch-0edffbf9ae9e209c" "$T/seed1/"
"$AF" fuzz --backend mutant:packed_fp16_overflow --runs 1 --corpus "$T/seed1" --crashes "$T/seedc" --quiet --no-minimize >/dev/null 2>&1; rc=$?
[ "$rc" -eq 1 ] && [ -d "$T/seedc/nan_mismatch-0edffbf9ae9e209c" ] && ok "--corpus seeds run first" || bad "--corpus seed not run first: exit $rc, $(ls "$T/seedc" 2>/dev/null)"
"$AF" fuzz --backend mutant:packed_fp16_overflow --runs 1 --crashes "$T/seedn" --quiet --no-minimize >/dev/null 2>&1; rc=$?
[ "$rc" -eq 0 ] && ok "one generated run does not find it (the check above can fail)" || bad "one generated run found a finding: exit $rc"
mkdir -p "$T/bigcase"
echo '{"case": {"batch": 8, "q_heads": 16, "kv_heads": 16, "q_len": 65536, "kv_len": 65536, "head_dim": 256, "v_head_dim": 256}}' >"$T/bigcase/case.json"
timeout 10 "$AF" replay "$T/bigcase" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "bigcase/case.json: case: tensors need .* over the budget" "$T/err" && ok "replay refuses a case over the budget" || bad "replay of a case over the budget: exit $rc"
cp -r "$b1" "$T/bigjson"; truncate -s 64G "$T/bigjson/case.json"
timeout 10 "$AF" replay "$T/bigjson" >/dev/null 2>"$T/err"; rc=$?
[ "$rc" -eq 2 ] && grep -q "bigjson/case.json: file is 68719476736 bytes" "$T/err" && ok "replay refuses a 64 GiB case.json" || bad "replay of a 64 GiB case.json: exit $rc"

# Ctrl-C mid-campaign: stops, writes stats, leaves only complete bundles
"$AF" fuzz --backend mutant:mhav2_concat --backend mutant:silent_tf32 --time 60 --crashes "$T/int" --stats "$T/int.json" --quiet >/dev/null 2>&1 &
pid=$!
sleep 3
kill -INT $pid
wait $pid; rc=$?
{ [ "$rc" -eq 1 ] || [ "$rc" -eq 0 ]; } && ok "SIGINT: exit $rc" || bad "SIGINT: exit $rc"
[ -s "$T/int.json" ] && ok "SIGINT: stats written" || bad "SIGINT: stats written"
complete_bundles "$T/int" && ok "SIGINT: $(cat "$T/nbundles") complete bundles, no leftovers" || bad "SIGINT: complete bundles"

# a full disk (a 12 KiB tmpfs, where mounting is allowed): the error names the file, the
# finding is not lost (its input is printed and kept in the stats), the exit is 2
mkdir -p "$T/tiny"
if mount -t tmpfs -o size=12k tmpfs "$T/tiny" 2>/dev/null; then
  "$AF" fuzz --backend mutant:causal_top_left --runs 100 --crashes "$T/tiny/c" --stats "$T/full.json" --quiet >/dev/null 2>"$T/err"; rc=$?
  umount "$T/tiny"
  [ "$rc" -eq 2 ] && ok "full disk: exit 2" || bad "full disk: exit $rc"
  grep -q "No space left on device" "$T/err" && grep -q "tiny/c/" "$T/err" && ok "full disk: the file is named" || bad "full disk: the file is named"
  grep -q "its input (hex)" "$T/err" && grep -q '"input_hex"' "$T/full.json" && ok "full disk: inputs kept" || bad "full disk: inputs kept"
  hex=$(grep -o '"input_hex":[^"]*"[0-9a-f]*"' "$T/full.json" | head -1 | grep -o '[0-9a-f]*"$' | tr -d '"')
  echo "$hex" | xxd -r -p >"$T/lost.bin" 2>/dev/null && [ -s "$T/lost.bin" ] && \
    { "$AF" replay --backend mutant:causal_top_left "$T/lost.bin" >/dev/null 2>&1; [ $? -eq 1 ] && ok "full disk: the printed input replays the finding" || bad "full disk: printed input does not replay"; }
else
  echo "skip full disk (cannot mount a tmpfs here)"
fi

# known bugs (docs/known.md): a campaign whose bug is known counts it, keeps one exemplar,
# minimizes nothing and exits 0; --no-known shows it as a finding; replay says which known
# bug a failing check is; attnfuzz known matches the bundle; a bad known.json is named
cat >"$T/known.json" <<'JSON'
{"format": "attnfuzz-known", "version": 1, "entries": [
 {"id": "mutant-top-left", "class": "real_bug", "title": "the seeded top-left diagonal",
  "backends": ["mutant:causal_top_left"], "kinds": ["diverge", "nan_mismatch", "inf_mismatch", "masked_row_nan"],
  "when": ["causal || window", "diag != top_left"]}]}
JSON
expect_rc 0 "$AF" fuzz --backend mutant:causal_top_left --runs 400 --known "$T/known.json" --crashes "$T/kn" --stats "$T/kn.json" --quiet
[ -d "$T/kn/known-mutant-top-left" ] && [ "$(ls "$T/kn" | wc -l)" -eq 1 ] && ok "known: one exemplar, nothing else stored" ||
  { bad "known: one exemplar, nothing else stored"; ls "$T/kn" | sed 's/^/    /'; }
grep -q '"known_hits"' "$T/kn.json" && grep -Eq '"id":[[:space:]]*"mutant-top-left"' "$T/kn.json" &&
  grep -Eq '"minimize_execs":[[:space:]]*0,' "$T/kn.json" &&
  ok "known: hits in the stats, nothing minimized" || bad "known: hits in the stats, nothing minimized"
grep -q "known mutant-top-left" "$T/err" && ok "known: the summary names the entry" || bad "known: the summary names the entry"
expect_rc 1 "$AF" fuzz --backend mutant:causal_top_left --runs 400 --no-known --crashes "$T/kn0" --quiet
ls "$T/kn0" | grep -q "^diverge-" && ! ls "$T/kn0" | grep -q "^known-" && ok "--no-known: stored as a finding" ||
  bad "--no-known: stored as a finding"
expect_rc 1 "$AF" replay --known "$T/known.json" "$T/kn/known-mutant-top-left"
grep -q "\[known bug mutant-top-left (real_bug)" "$T/out" && ok "replay says which known bug" || bad "replay says which known bug"
expect_rc 0 "$AF" known --known "$T/known.json" "$T/kn/known-mutant-top-left"
grep -q "known bug mutant-top-left" "$T/out" && ok "attnfuzz known matches the exemplar" || bad "attnfuzz known matches the exemplar"
sed 's/"when"/"whne"/' "$T/known.json" >"$T/bad-known.json"
expect_rc 2 "$AF" fuzz --backend mutant:causal_top_left --runs 1 --known "$T/bad-known.json" --crashes "$T/kb" --quiet
grep -q "bad-known.json" "$T/err" && grep -q 'unknown field "whne"' "$T/err" && ok "a bad known.json is named with its problem" ||
  { bad "a bad known.json is named with its problem"; sed 's/^/    /' "$T/err"; }

# scope (docs/known.md "Scope"): a recorded failure that passes now, of a known bug that needs
# a CPU flag the host lacks (ATTNFUZZ_CPU_FLAGS pretends a host), is "skip (needs ...)", no
# failure under --strict, <skipped> in JUnit; with the flag its verdict is "fixed" as before.
# The bundle: a top-left mutant's finding recorded as fused's (fused, replayed, is right)
sb="$T/scope/diverge-5c0be5c0be5c0be5"
mkdir -p "$T/scope" && cp -r "$SRC/corpus/regress/diverge-5868ff954b2aa973" "$sb"
mv "$sb/out.mutant_causal_top_left.npy.zst" "$sb/out.fused.npy.zst"
sed -i 's/mutant:causal_top_left/fused/g; s/out\.mutant_causal_top_left\./out.fused./g' "$sb/case.json"
cat >"$T/scope.json" <<'JSON'
{"format": "attnfuzz-known", "version": 1, "entries": [
 {"id": "fused-on-avx512", "class": "real_bug", "title": "a bug of fused on AVX-512 only",
  "backends": ["fused"], "kinds": ["diverge"], "needs": {"cpu": ["avx512f"]}}]}
JSON
ATTNFUZZ_CPU_FLAGS="fpu avx2 fma" expect_rc 0 "$AF" regress --strict --junit "$T/scope.xml" --known "$T/scope.json" "$T/scope"
grep -q "^skip (needs avx512f) .*diverge-5c0be5c0be5c0be5: fused: recorded diverge, now ok .*\[known bug fused-on-avx512" "$T/out" &&
  grep -q "0 fixed, 0 regressed, 0 waived, 1 skipped" "$T/out" && grep -q "<skipped message=\"skip (needs avx512f)" "$T/scope.xml" &&
  ok "regress: a host without the flag skips (needs avx512f), --strict passes, JUnit <skipped>" ||
  { bad "regress: a host without the flag skips"; sed 's/^/    /' "$T/out" "$T/err"; }
ATTNFUZZ_CPU_FLAGS="fpu avx2 fma avx512f" expect_rc 1 "$AF" regress --strict --known "$T/scope.json" "$T/scope"
grep -q "^fixed .*diverge-5c0be5c0be5c0be5: fused: recorded diverge, now ok" "$T/out" && grep -q "1 fixed, 0 regressed, 0 waived, 0 skipped" "$T/out" &&
  ok "regress: a host with the flag calls it fixed, as before" || { bad "regress: a host with the flag calls it fixed"; sed 's/^/    /' "$T/out"; }
ATTNFUZZ_CPU_FLAGS="fpu avx2 fma" expect_rc 1 "$AF" regress --strict --no-known "$T/scope"
grep -q "^fixed " "$T/out" && ok "regress --no-known: no entry, no skip" || bad "regress --no-known: no entry, no skip"
ATTNFUZZ_CPU_FLAGS="fpu avx2 fma" expect_rc 0 "$AF" replay --known "$T/scope.json" "$sb"
grep -q "fused: skip (needs avx512f): its recorded diverge does not show on this host" "$T/out" &&
  ok "replay: says skip (needs avx512f)" || { bad "replay: says skip"; sed 's/^/    /' "$T/out"; }
ATTNFUZZ_CPU_FLAGS="avx512f" expect_rc 0 "$AF" replay --known "$T/scope.json" "$sb"
! grep -q "skip" "$T/out" && ok "replay: with the flag no skip" || bad "replay: with the flag no skip"
ATTNFUZZ_CPU_FLAGS="avx2" expect_rc 0 "$AF" known --known "$T/scope.json" "$sb"
grep -q "known bug fused-on-avx512 .*(out of scope here: needs avx512f)" "$T/out" &&
  ok "known: the bundle is its entry whatever the host, out of scope said" || { bad "known BUNDLE out of scope"; sed 's/^/    /' "$T/out"; }
ATTNFUZZ_CPU_FLAGS="avx2" expect_rc 0 "$AF" known --known "$T/scope.json"
grep -q "needs cpu avx512f (not here: needs avx512f)" "$T/out" && ok "known: lists an entry's needs" || { bad "known lists needs"; sed 's/^/    /' "$T/out"; }

# known bugs wherever the binary is: a copy of the executable outside the checkout, run from
# a directory outside it, finds the entries through the source root recorded at configure
# time, and regress and replay say so in their first line (stderr)
mkdir -p "$T/away" && cp "$AF" "$T/away/attnfuzz"
(cd "$T/away" && ./attnfuzz regress "$SRC/corpus/regress") >"$T/out" 2>"$T/err"
head -1 "$T/err" | grep -Eq "^attnfuzz regress: [1-9][0-9]* known bugs from [0-9]+ known.json files under /.*/corpus/findings" &&
  ok "a binary outside the tree loads the known bugs and says from where, first" ||
  { bad "a binary outside the tree loads the known bugs"; sed 's/^/    /' "$T/err" | head -3; }
(cd "$T/away" && ./attnfuzz replay "$SRC/corpus/regress/diverge-5868ff954b2aa973") >"$T/out" 2>"$T/err"
head -1 "$T/err" | grep -q "^attnfuzz replay: [1-9][0-9]* known bugs from" && ok "replay says how many known bugs, first" ||
  { bad "replay says how many known bugs"; sed 's/^/    /' "$T/err" | head -3; }
# ... and one that finds none says so in its first line, even quiet: here a binary laid out as
# the wheel installs it (<package>/bin/attnfuzz) in a package without corpus/findings
mkdir -p "$T/pkg/attnfuzz/bin" && : >"$T/pkg/attnfuzz/__init__.py" && cp "$AF" "$T/pkg/attnfuzz/bin/attnfuzz"
(cd "$T/away" && "$T/pkg/attnfuzz/bin/attnfuzz" fuzz --quiet --runs 5 --crashes "$T/pkg/c") >"$T/out" 2>"$T/err"
head -1 "$T/err" | grep -q "^attnfuzz fuzz: no known bugs loaded (no corpus/findings/\*/known.json in the package .*; --known FILE)$" &&
  ok "fuzz --quiet that finds no known bugs says so, first" || { bad "fuzz says no known bugs loaded"; sed 's/^/    /' "$T/err" | head -3; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
