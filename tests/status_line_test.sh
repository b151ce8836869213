#!/bin/sh
# status_line_test.sh ATTNFUZZ WORK - the campaign's progress: on a terminal (script(1)
# gives it one) a single line rewritten in place with elapsed/total time, execs/s,
# findings by kind and the compile share, ended by a DONE line; into a file or pipe the
# libFuzzer-like log lines. Exit 77 (skipped) without script(1).
set -u
AF=$1; W=$2
fail() { echo "FAIL: $*"; exit 1; }
command -v script >/dev/null || { echo "SKIP: no script(1)"; exit 77; }
rm -rf "$W"; mkdir -p "$W"
script -qec "$AF fuzz --backend mutant:causal_top_left --time 3 --crashes $W/tty" /dev/null >"$W/tty.out" 2>&1
cr=$(printf '\r'); esc=$(printf '\033')
grep -q "${cr}${esc}\[K0:0[0-9]/0:03  [0-9]* execs/s  compile [0-9]*%  [0-9]* finding" "$W/tty.out" || fail "no updating line on a terminal"
grep -q "compile [0-9]*%" "$W/tty.out" || fail "no compile share"
grep -q "${cr}${esc}\[KDONE 0:0[0-9]/0:03" "$W/tty.out" || fail "no DONE line"
grep -q "finding[s]* ([a-z_]* [0-9]" "$W/tty.out" || fail "no findings by kind"
grep -q '^#[0-9]' "$W/tty.out" && fail "log lines on a terminal"
"$AF" fuzz --backend mutant:causal_top_left --time 2 --crashes "$W/log" >"$W/log.out" 2>&1
grep -q "^#[0-9]*	DONE execs/s: [0-9]*	unique: [0-9]* (.*)	elapsed: [0-9]*s" "$W/log.out" || fail "no log DONE line"
grep -q "$esc" "$W/log.out" && fail "terminal escapes in a log"
echo "status lines ok"
