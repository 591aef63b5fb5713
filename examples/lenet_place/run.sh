#!/usr/bin/env bash
# Seed 000's distributed graph partition (examples/lenet_place/main.cc) in the seed's run.sh
# pattern: one scheduler and MS_WORKER_NUM workers, all the same program, started in the
# background from the folders sched/ and worker_<N>/ of the execution folder with their output in
# sched/sched.log and worker_<N>/worker_<N>.log; then waits for every process and shows
# `grep -rn "Accuracy" */*.log` (worker 0's "Accuracy is: {'Accuracy': ...}").
#
# Environment (defaults): MS_WORKER_NUM (8), MS_SCHED_HOST (127.0.0.1), MS_SCHED_PORT (8118),
# EXEC_PATH, the execution folder (out/lenet_place at the repository root; its sched/ and
# worker_*/ folders are replaced on every run), DATA_PATH (without it, MNIST is generated once
# with cleave-datagen into $CLEAVE_DATA_DIR, default datasets/), OMP_NUM_THREADS (unset: each
# worker takes its share of this host's cores, cores / workers, and worker 0 says what it chose). Worker N is started with MS_NODE_ID=N, so that
# worker_N.log is rank N's output (the seed lets the scheduler assign ranks).
# Builds build/Release first when the programs are missing. Arguments go to every process
# (--epochs, --per-print-times, --seed, --micro-batches, --max-steps, --stats; --help).
# MS_WORKER_NUM and MS_SCHED_PORT are checked before anything starts. When a process fails, the
# terminal shows the cause: the scheduler's verdict ("the job failed: rank 6 ... failed: <its
# error>") or else the first process to fail, that process's last line and its log's path, then
# one line naming every process that exited with a non-zero status.
# LENET_PLACE_PROGRAM, when set, is the program every process runs instead (words split on
# spaces; examples/python/lenet_place/run.sh runs the Python train.py this way).
# Exit status: 0 when every process succeeded, otherwise the status of the first to fail (2 for
# a bad variable).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

read -r -a program <<< "${LENET_PLACE_PROGRAM:-$bin/lenet_place}"
if [ ! -x "${program[0]}" ] || [ ! -x "$bin/cleave-datagen" ]; then
  "$root/scripts/build.sh" Release || exit 1
fi

for arg in "$@"; do
  case "$arg" in -h | --help) exec "${program[@]}" --help ;; esac
done

set -e
source "$root/examples/common/data.sh"
set +e
execute_path=${EXEC_PATH:-$root/out/lenet_place}
mkdir -p "$execute_path" || exit 1
execute_path=$(cd "$execute_path" && pwd)

# Set public environment, checked first.
export MS_WORKER_NUM=${MS_WORKER_NUM:-8}
export MS_SCHED_HOST=${MS_SCHED_HOST:-127.0.0.1}
export MS_SCHED_PORT=${MS_SCHED_PORT:-8118}
case "$MS_WORKER_NUM" in
  '' | *[!0-9]* | 0*)
    echo "run.sh: MS_WORKER_NUM='$MS_WORKER_NUM' is invalid; expected a positive integer (the number of workers; default 8)" >&2
    exit 2
    ;;
esac
case "$MS_SCHED_PORT" in
  '' | *[!0-9]* | 0*) port_ok=0 ;;
  *) [ "${#MS_SCHED_PORT}" -le 5 ] && [ "$MS_SCHED_PORT" -le 65535 ] && port_ok=1 || port_ok=0 ;;
esac
if [ "$port_ok" -ne 1 ]; then
  echo "run.sh: MS_SCHED_PORT='$MS_SCHED_PORT' is invalid; expected an integer from 1 to 65535 (default 8118)" >&2
  exit 2
fi
export DATA_PATH

pids=()
names=()
logs=()
# Ctrl-C or a kill of this script stops the whole job.
trap 'kill "${pids[@]}" 2> /dev/null; exit 130' INT TERM

# Launch scheduler.
export MS_ROLE=MS_SCHED
rm -rf "${execute_path:?}/sched/"
mkdir "$execute_path/sched/"
(cd "$execute_path/sched/" && exec "${program[@]}" "$@" > sched.log 2>&1) &
pids+=($!)
names+=(scheduler)
logs+=("$execute_path/sched/sched.log")

# Launch workers.
export MS_ROLE=MS_WORKER
for ((i = 0; i < MS_WORKER_NUM; i++)); do
  rm -rf "${execute_path:?}/worker_$i/"
  mkdir "$execute_path/worker_$i/"
  (cd "$execute_path/worker_$i/" && MS_NODE_ID=$i exec "${program[@]}" "$@" > "worker_$i.log" 2>&1) &
  pids+=($!)
  names+=("worker $i")
  logs+=("$execute_path/worker_$i/worker_$i.log")
done
echo "Start training. The output is saved in sched and worker_* folder of $execute_path."

# Wait for every process in the order they end. The cause of a failure: the scheduler's verdict
# ("job failed: rank R ... failed: <error>") when it has one, else the first process to fail;
# then that process's last line (its error) and its log.
declare -A index_of
for k in "${!pids[@]}"; do index_of[${pids[$k]}]=$k; done
status=0
first=
failed=()
pending=("${pids[@]}")
while [ "${#pending[@]}" -gt 0 ]; do
  ended=
  wait -n -p ended "${pending[@]}"
  rc=$?
  [ -n "$ended" ] || break
  k=${index_of[$ended]}
  still=()
  for pid in "${pending[@]}"; do [ "$pid" = "$ended" ] || still+=("$pid"); done
  pending=("${still[@]}")
  [ "$rc" -eq 0 ] && continue
  [ -n "$first" ] || first=$k
  [ "$status" -eq 0 ] && status=$rc
  failed+=("${names[$k]} ($rc)")
done
last_line() { grep -v '^[[:space:]]*$' "$1" 2> /dev/null | tail -n 1; }
if [ -n "$first" ]; then
  verdict=$(grep -h "^cleave scheduler: job failed: " "${logs[0]}" 2> /dev/null | tail -n 1)
  verdict=${verdict#cleave scheduler: job failed: }
  culprit=$first
  if [ -n "$verdict" ]; then
    echo "run.sh: the job failed: $verdict" >&2
    if [[ "$verdict" =~ ^rank\ ([0-9]+)\  ]] && [ "${BASH_REMATCH[1]}" -lt "$MS_WORKER_NUM" ]; then
      culprit=$((BASH_REMATCH[1] + 1)) # worker N (MS_NODE_ID=N, so rank N) comes after the scheduler
    fi
    echo "run.sh: ${names[$culprit]}'s last line: $(last_line "${logs[$culprit]}")" >&2
  else
    echo "run.sh: ${names[$first]} failed first: $(last_line "${logs[$first]}")" >&2
  fi
  echo "run.sh: its log: ${logs[$culprit]}" >&2
  list=$(printf '%s, ' "${failed[@]}")
  echo "run.sh: exited with a non-zero status: ${list%, } (logs in $execute_path)" >&2
fi

cd "$execute_path" && grep -rn "Accuracy" */*.log
exit "$status"
