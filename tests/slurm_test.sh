#!/usr/bin/env bash
# slurm_test.sh BUILD_DIR - a sharded campaign on a real single-node Slurm cluster started
# here: munged, slurmctld and slurmd (Debian's packages: scripts/setup.sh installs them)
# with a slurm.conf generated in a temporary directory, on free ports, as root. Submits
# with deploy/slurm/submit.sh a 3-task array of `attnfuzz fuzz --backend
# mutant:causal_top_left --pair explicit,fused` and the dependent merge-and-report job,
# waits, and asserts:
#   - every task ran, each with its own shard (task I -> --shard I/3 -> ROOT/shard-I, stats
#     finished, the three stats streams distinct);
#   - the mutant's divergence is exactly one bundle in ROOT/merged, and it replays (exit 1);
#   - the merged stats are the sums of the shards' (execs, skipped, findings, minimize
#     executions, every member of the time split, each signature's count), with one
#     per-shard row each, and the report was written.
# Stops every daemon it started (by pid) and removes its files. Exit 77 (skipped) with a
# message only where the cluster cannot start: not root, a daemon missing or refusing.
set -uo pipefail
BUILD=$(cd "$1" && pwd)
AF=$BUILD/attnfuzz
SRC=$(cd "$(dirname "$0")/.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

for b in munged slurmctld slurmd; do
  command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || skip "$b is not installed (scripts/setup.sh installs munge, slurmctld, slurmd)"
done
for b in sbatch squeue scontrol sinfo; do
  command -v "$b" >/dev/null 2>&1 || skip "$b is not installed (slurm-client)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs; run this test as root"
sbin() { command -v "$1" 2>/dev/null || echo "/usr/sbin/$1"; }

T=$(mktemp -d /tmp/af_slurm_XXXXXX)
chmod 755 "$T"
pids=()
cleanup() {
  [ -n "${array:-}" ] && scancel --quiet "$array" "${merge:-$array}" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$T"
}
trap cleanup EXIT
logs() { for f in "$T"/log/*.log "$T"/munge/log; do [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done; }

# --- the cluster ----------------------------------------------------------------------
mkdir -p "$T/state" "$T/spool" "$T/log" "$T/munge" "$T/camp"
chmod 755 "$T/munge" # munged wants every directory on its socket path searchable by all
head -c 1024 /dev/urandom >"$T/munge/munge.key"
chmod 400 "$T/munge/munge.key"
"$(sbin munged)" -F --key-file="$T/munge/munge.key" --socket="$T/munge/sock" --pid-file="$T/munge/pid" \
  --log-file="$T/munge/log" --seed-file="$T/munge/seed" >"$T/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$T/munge/sock" ] && break; sleep 0.1; done
[ -S "$T/munge/sock" ] || { logs; skip "munged did not start"; }

read -r ctl_port d_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
H=$(hostname -s)
cat >"$T/slurm.conf" <<EOF
ClusterName=attnfuzztest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
AuthType=auth/munge
AuthInfo=socket=$T/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
MpiDefault=none
NodeName=$H NodeAddr=127.0.0.1 CPUs=3 RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$T/slurm.conf
"$(sbin slurmctld)" -D -c -f "$SLURM_CONF" >"$T/log/slurmctld.out" 2>&1 &
pids+=($!)
"$(sbin slurmd)" -D -f "$SLURM_CONF" -N "$H" >"$T/log/slurmd.out" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 60); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qx 'idle'; then up=1; break; fi
  sleep 0.5
done
[ $up = 1 ] || { sinfo 2>&1; logs; skip "slurmctld and slurmd did not come up (node not idle within 30 s)"; }
echo "ok   a single-node Slurm cluster: $(sinfo -h -o '%P %D %t %c CPUs')"

# --- the campaign: 3 shards, then merge and report ---------------------------------------
ROOT=$T/camp
cd "$T"
# --runs 600 as well as --time: each shard's campaign is then the same every time (the
# mutant's diverge, minimized, is one signature in 600 cases of each of these shards;
# longer campaigns may meet a second form of the bug)
out=$("$SRC/deploy/slurm/submit.sh" --root "$ROOT" --shards 3 --time 60 --attnfuzz "$AF" -- \
  --backend mutant:causal_top_left --pair explicit,fused --seed 1 --runs 600 --no-bind 2>&1) ||
  { echo "$out"; fail "submit.sh failed"; }
echo "$out" | sed 's/^/    /'
array=$(echo "$out" | sed -n 's/^array=\([0-9]*\) merge=\([0-9]*\)$/\1/p')
merge=$(echo "$out" | sed -n 's/^array=\([0-9]*\) merge=\([0-9]*\)$/\2/p')
[ -n "$array" ] && [ -n "$merge" ] || fail "submit.sh printed no job ids"
scontrol show job "$merge" | grep -q "Dependency=afterany:${array}" || fail "the merge job does not depend on the array (afterany)"
for _ in $(seq 240); do
  [ -z "$(squeue -h -j "$array,$merge" 2>/dev/null)" ] && break
  sleep 0.5
done
[ -z "$(squeue -h -j "$array,$merge" 2>/dev/null)" ] || { squeue; logs; fail "the jobs did not finish within 120 s"; }
state=$(scontrol show job "$merge" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
[ "$state" = COMPLETED ] || { cat "$ROOT/logs/merge.out"; fail "the merge job ended $state"; }
for i in 0 1 2; do
  s=$(scontrol show job "${array}_$i" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  [ "$s" = COMPLETED ] || { cat "$ROOT/logs/shard-$i.out"; fail "array task $i ended $s"; }
done
echo "ok   array job $array (3 tasks) and merge job $merge completed"

# every task ran its own shard
for i in 0 1 2; do
  grep -q "task $i of 3 " "$ROOT/logs/shard-$i.out" || { cat "$ROOT/logs/shard-$i.out"; fail "no log line of task $i"; }
done
python3 - "$ROOT" <<'EOF' || exit 1
import json, sys
root = sys.argv[1]
seen = set()
for i in range(3):
    s = json.load(open("%s/shard-%d/stats.json" % (root, i)))
    if s["shard"] != i or s["shards"] != 3 or not s["finished"] or s["execs"] <= 0:
        print("FAIL: shard-%d/stats.json says shard %s of %s, finished %s, %s execs" %
              (i, s["shard"], s["shards"], s["finished"], s["execs"]))
        sys.exit(1)
    seen.add(s["shard"])
if seen != {0, 1, 2}:
    print("FAIL: shards %s" % sorted(seen))
    sys.exit(1)
print("ok   tasks 0, 1, 2 ran shards 0/3, 1/3, 2/3, each finished")
EOF

# the mutant: one merged bundle, replaying
mutant=()
for b in "$ROOT"/merged/crashes/*/; do
  grep -q '"who":[[:space:]]*"mutant:causal_top_left"' "$b/case.json" && mutant+=("${b%/}")
done
[ ${#mutant[@]} -eq 1 ] || { ls -la "$ROOT"/merged/crashes "$ROOT"/shard-*/crashes; fail "${#mutant[@]} merged bundles of the mutant, want 1"; }
found=$(ls -d "$ROOT"/shard-*/crashes/"$(basename "${mutant[0]}")" 2>/dev/null | wc -l)
"$AF" replay "${mutant[0]}" >"$T/replay.out" 2>&1
rc=$?
[ $rc -eq 1 ] || { cat "$T/replay.out"; fail "replay of the merged bundle exited $rc, want 1"; }
echo "ok   the mutant's divergence is one merged bundle (found by $found shards), replay exits 1"

# merged stats = the sums of the shards'
python3 - "$ROOT" <<'EOF' || exit 1
import json, math, sys
root = sys.argv[1]
shards = [json.load(open("%s/shard-%d/stats.json" % (root, i))) for i in range(3)]
m = json.load(open("%s/merged/stats.json" % root))
def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
bad = []
for k in ("execs", "skipped", "findings_total", "minimize_execs", "write_errors", "worker_restarts"):
    if m[k] != sum(s[k] for s in shards):
        bad.append("%s %s != %s" % (k, m[k], sum(s[k] for s in shards)))
for k in shards[0]["seconds"]:
    if not close(m["seconds"][k], sum(s["seconds"][k] for s in shards)):
        bad.append("seconds.%s" % k)
if not close(m["shard_seconds"], sum(s["elapsed"] for s in shards)) or not close(m["elapsed"], max(s["elapsed"] for s in shards)):
    bad.append("elapsed")
counts = {}
for s in shards:
    for g in s["signatures"]:
        counts[g["signature"]] = counts.get(g["signature"], 0) + g["count"]
if {g["signature"]: g["count"] for g in m["signatures"]} != counts:
    bad.append("signature counts")
if [r["shard"] for r in m["per_shard"]] != [0, 1, 2] or [r["execs"] for r in m["per_shard"]] != [s["execs"] for s in shards]:
    bad.append("per_shard rows")
if m["shards"] != 3 or m["shards_finished"] != 3 or not m["finished"] or m["shards_missing"]:
    bad.append("shards %s finished %s" % (m["shards"], m["shards_finished"]))
if bad:
    print("FAIL: merged stats are not the shards' sums: " + "; ".join(bad))
    sys.exit(1)
print("ok   merged stats = sum of the shards': %d execs, %d findings, %d signatures" %
      (m["execs"], m["findings_total"], len(m["signatures"])))
EOF
[ -s "$ROOT/report/index.html" ] && grep -q "Campaign" "$ROOT/report/report.md" || { cat "$ROOT/logs/merge.out"; fail "no report"; }
echo "ok   the merge job wrote $ROOT/report/index.html"
