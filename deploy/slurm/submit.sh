#!/usr/bin/env bash
# submit.sh - a sharded attnfuzz campaign on Slurm in one line: a job array of N shards
# (attnfuzz.sbatch) and a job that merges them and writes the report once every shard
# ended (merge.sbatch, --dependency=afterany:ARRAY).
#
#   deploy/slurm/submit.sh --root /shared/camp --shards 8 --time 3600 [--gpu] [options] -- FUZZ_OPTIONS...
#
#   --root DIR         output root on a file system every node shares (required)
#   --shards N         array tasks, one shard each (required)
#   --time SECONDS     each shard's campaign (attnfuzz fuzz --time; required)
#   --margin SECONDS   added to --time for the Slurm time limit (default 600 + 5% of
#                      --time: start-up, a target's compile, the final minimization)
#   --gpu              one GPU per shard (--gres=gpu:1)
#   --partition P      the partition of the shards (default: the cluster's default)
#   --cpus C           CPUs per shard (--cpus-per-task; the shard runs fuzz --jobs C)
#   --attnfuzz PATH    the executable the nodes run (default: build/attnfuzz of this
#                      checkout, else attnfuzz on PATH; it must be visible on the nodes)
#   --sbatch ARG       one more sbatch argument for both jobs (repeatable: --account,
#                      --qos, --constraint, ...)
#   -n, --dry-run      print the two sbatch commands instead of running them
#
# Prints the array's job id and the merge job's. Logs: ROOT/logs/shard-I.out, merge.out.
# Example: a weekend on 16 GPUs, the merged report in /shared/rc1/report/index.html:
#   deploy/slurm/submit.sh --root /shared/rc1 --shards 16 --time 172800 --gpu -- \
#       --backend target:torch/sdpa_cuda --batch 16
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root="" shards="" seconds="" margin="" gpu=0 partition="" cpus=1 bin="" dry=0
extra=()
usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --root) root=${2:?}; shift 2 ;;
    --shards) shards=${2:?}; shift 2 ;;
    --time) seconds=${2:?}; shift 2 ;;
    --margin) margin=${2:?}; shift 2 ;;
    --gpu) gpu=1; shift ;;
    --partition) partition=${2:?}; shift 2 ;;
    --cpus) cpus=${2:?}; shift 2 ;;
    --attnfuzz) bin=${2:?}; shift 2 ;;
    --sbatch) extra+=("${2:?}"); shift 2 ;;
    -n | --dry-run) dry=1; shift ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "submit.sh: unknown option $1 (attnfuzz fuzz options go after --)" >&2; usage ;;
  esac
done
[ -n "$root" ] && [ -n "$shards" ] && [ -n "$seconds" ] || { echo "submit.sh: --root, --shards and --time are required" >&2; usage; }
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --shards $shards: not a positive number" >&2; exit 2; }
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --time $seconds: whole seconds, above 0" >&2; exit 2; }
[[ $cpus =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --cpus $cpus: not a positive number" >&2; exit 2; }
[ -n "$margin" ] || margin=$((600 + seconds / 20))
[[ $margin =~ ^[0-9]+$ ]] || { echo "submit.sh: --margin $margin: whole seconds" >&2; exit 2; }
if [ -z "$bin" ]; then
  if [ -x "$here/../../build/attnfuzz" ]; then bin=$here/../../build/attnfuzz; else bin=$(command -v attnfuzz || true); fi
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "submit.sh: no attnfuzz executable (build it, or give --attnfuzz PATH)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
if [ $dry = 0 ]; then
  mkdir -p "$root/logs" # Slurm does not create the directory of --output
  root=$(cd "$root" && pwd)
fi

# Slurm's --time in minutes, rounded up
minutes=$(((seconds + margin + 59) / 60))
common=(--parsable --export="ALL,ATTNFUZZ=$bin" "${extra[@]}")
[ -n "$partition" ] && common+=(--partition="$partition")
array=(sbatch "${common[@]}" --job-name=attnfuzz --array="0-$((shards - 1))" --time="$minutes"
       --cpus-per-task="$cpus" --output="$root/logs/shard-%a.out")
[ $gpu = 1 ] && array+=(--gres=gpu:1)
array+=("$here/attnfuzz.sbatch" "$root" "$seconds" -- "$@")
merge=(sbatch "${common[@]}" --job-name=attnfuzz-merge --time=60 --output="$root/logs/merge.out")
if [ $dry = 1 ]; then
  printf '%q ' "${array[@]}"; echo
  printf '%q ' "${merge[@]}" "--dependency=afterany:ARRAY" "$here/merge.sbatch" "$root"; echo
  exit 0
fi
id=$("${array[@]}")
id=${id%%;*} # "ID;CLUSTER" on a federation
mid=$("${merge[@]}" --dependency="afterany:$id" "$here/merge.sbatch" "$root")
mid=${mid%%;*}
echo "submit.sh: shards: array job $id ($shards tasks, $minutes min each); merge and report: job $mid"
echo "submit.sh: follow with squeue -j $id,$mid; results in $root/merged and $root/report/index.html"
echo "array=$id merge=$mid"
