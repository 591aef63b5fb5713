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
# with cleave-datagen into $CLEAVE_DATA_DIR, default datasets/), OMP_NUM_THREADS (1 per process:
# 9 processes share this machine's cores). Worker N is started with MS_NODE_ID=N, so that
# worker_N.log is rank N's output (the seed lets the scheduler assign ranks).
# Builds build/Release first when the programs are missing. Arguments go to every process
# (--epochs, --per-print-times, --seed, --micro-batches, --max-steps, --stats; --help).
# Exit status: 0 when every process succeeded, otherwise the first failed worker's (or the
# scheduler's) status.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/lenet_place" ] || [ ! -x "$bin/cleave-datagen" ]; then
  "$root/scripts/build.sh" Release || exit 1
fi

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/lenet_place" --help ;; esac
done

set -e
source "$root/examples/common/data.sh"
set +e
execute_path=${EXEC_PATH:-$root/out/lenet_place}
mkdir -p "$execute_path" || exit 1
execute_path=$(cd "$execute_path" && pwd)

# Set public environment.
export MS_WORKER_NUM=${MS_WORKER_NUM:-8}
export MS_SCHED_HOST=${MS_SCHED_HOST:-127.0.0.1}
export MS_SCHED_PORT=${MS_SCHED_PORT:-8118}
export DATA_PATH
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

pids=()
names=()
# Ctrl-C or a kill of this script stops the whole job.
trap 'kill "${pids[@]}" 2> /dev/null; exit 130' INT TERM

# Launch scheduler.
export MS_ROLE=MS_SCHED
rm -rf "${execute_path:?}/sched/"
mkdir "$execute_path/sched/"
(cd "$execute_path/sched/" && exec "$bin/lenet_place" "$@" > sched.log 2>&1) &
pids+=($!)
names+=(scheduler)

# Launch workers.
export MS_ROLE=MS_WORKER
for ((i = 0; i < MS_WORKER_NUM; i++)); do
  rm -rf "${execute_path:?}/worker_$i/"
  mkdir "$execute_path/worker_$i/"
  (cd "$execute_path/worker_$i/" && MS_NODE_ID=$i exec "$bin/lenet_place" "$@" > "worker_$i.log" 2>&1) &
  pids+=($!)
  names+=("worker $i")
done
echo "Start training. The output is saved in sched and worker_* folder of $execute_path."

# Wait for every process; remember the first failure.
status=0
for k in "${!pids[@]}"; do
  wait "${pids[$k]}"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run.sh: ${names[$k]} exited with status $rc" >&2
    [ "$status" -eq 0 ] && status=$rc
  fi
done

cd "$execute_path" && grep -rn "Accuracy" */*.log
exit "$status"
