#!/usr/bin/env bash
# kill -9 of a placed worker mid-training: starts seed 000's placed job with run.sh (the seed's
# pattern: no supervisor stops the others), waits until worker 0 has printed a few losses, kills
# worker 1 with SIGKILL, and checks that every other process (scheduler and workers) exits with a
# non-zero status by itself within 30 s, and that worker 0's output names the lost rank 1. Then
# the same under cleave-run: it must end within 30 s with a non-zero status, naming rank 1.
# Usage: lenet_place_kill_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
job=
cleanup() {
  if [ -n "$job" ]; then
    for pid in $(pgrep -P "$job" || true); do kill -KILL "$pid" 2> /dev/null || true; done
    kill -KILL "$job" 2> /dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1

fail_hook() { if [ -d "$work/exec" ]; then tail -n 5 "$work"/exec/*/*.log >&2; fi; }
# shellcheck source=../common/test_lib.sh
source "$here/../common/test_lib.sh"

"$bin/cleave-datagen" mnist --out "$work/data" --train 3200 --test 320 > /dev/null
export DATA_PATH=$work/data/MNIST_Data

# Waits until worker 0 has printed 3 losses, then kills rank 1 (the child of process $job whose
# environment holds MS_NODE_ID=1) with SIGKILL and waits up to 30 s for $job to end.
kill_rank_1() {  # worker-0-log
  local w0=$1 victim='' pid
  for _ in $(seq 1 600); do
    if [ -z "$victim" ]; then
      for pid in $(pgrep -P "$job" || true); do
        if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "MS_NODE_ID=1"; then
          victim=$pid
        fi
      done
    fi
    if [ -n "$victim" ] && [ -f "$w0" ] && [ "$(grep -c "loss is" "$w0")" -ge 3 ]; then break; fi
    kill -0 "$job" 2> /dev/null || fail "the job ended before the kill"
    sleep 0.1
  done
  [ -n "$victim" ] || fail "worker 1's process not found"
  [ "$(grep -c "loss is" "$w0")" -ge 3 ] || fail "worker 0 printed fewer than 3 losses in 60 s"
  kill -KILL "$victim"
  killed_at=$(date +%s)
  echo "killed worker 1 (pid $victim) after $(grep -c "loss is" "$w0") steps"
  while kill -0 "$job" 2> /dev/null; do
    if [ $(($(date +%s) - killed_at)) -gt 30 ]; then
      echo "still running 30 s after the kill:" >&2
      ps -o pid,stat,etime,args --ppid "$job" >&2 || true
      fail "the job did not end within 30 s of the kill of worker 1"
    fi
    sleep 0.2
  done
}

# 1. The seed's run.sh: every process must notice the loss by itself.
EXEC_PATH=$work/exec MS_SCHED_PORT=$(free_port) "$here/run.sh" --epochs 50 --per-print-times 1 \
  > "$work/run.out" 2>&1 &
job=$!
w0=$work/exec/worker_0/worker_0.log
kill_rank_1 "$w0"
job_status=0
wait "$job" || job_status=$?
job=
[ "$job_status" -ne 0 ] || fail "run.sh exited 0 after a worker was killed"
# run.sh reports every process that exited non-zero: the scheduler and all 8 workers, the killed
# worker 1 first with its log.
grep -q "run.sh: the job failed: rank 1 (host .*) was lost" "$work/run.out" || {
  cat "$work/run.out"
  fail "run.sh does not show the scheduler's verdict naming rank 1"
}
grep -q "run.sh: its log: $work/exec/worker_1/worker_1.log" "$work/run.out" ||
  fail "run.sh does not show worker 1's log"
for name in scheduler "worker 0" "worker 1" "worker 2" "worker 3" "worker 4" "worker 5" \
  "worker 6" "worker 7"; do
  grep -Eq "run.sh: exited with a non-zero status: .*$name \([1-9]" "$work/run.out" || {
    cat "$work/run.out"
    fail "$name did not exit with a non-zero status"
  }
done
grep -Eq "rank 1([^0-9]|$)" "$w0" || fail "worker 0's output does not name the lost rank 1"
echo "ok: every process exited non-zero within $(($(date +%s) - killed_at)) s; worker 0 names rank 1:"
grep -E "rank 1([^0-9]|$)" "$w0" | tail -n 2

# 2. Under cleave-run, which stops the other processes when one fails and names it.
"$bin/cleave-run" --worker_num 8 --master_port "$(free_port)" --log_dir "$work/cr" -- \
  "$bin/lenet_place" --epochs 50 --per-print-times 1 > "$work/cr.out" 2>&1 &
job=$!
kill_rank_1 "$work/cr/worker_0.log"
job_status=0
wait "$job" || job_status=$?
job=
[ "$job_status" -ne 0 ] || fail "cleave-run exited 0 after a worker was killed"
grep -q "cleave-run: rank 1 (pid [0-9]*) failed with status 137" "$work/cr.out" || {
  cat "$work/cr.out"
  fail "cleave-run's output does not name the lost rank 1"
}
echo "ok: cleave-run ended within $(($(date +%s) - killed_at)) s with status $job_status, naming rank 1"
