#!/usr/bin/env bash
# Seed 000 when the user gets it wrong (issue 16), through the seed's run.sh and hand-started
# processes:
#   * DATA_PATH wrong, and a truncated IDX file: every process ends within seconds (not a
#     heartbeat timeout), and the terminal shows the job's verdict with the reader's message,
#     the failing worker's last line and its log;
#   * two jobs on one MS_SCHED_PORT (--epochs 2 and --epochs 3) with their workers started
#     interleaved: the second job's workers are refused at once, naming both commands, and the
#     first job trains to the end.
# Usage: lenet_place_mistakes_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID CLEAVE_JOB_TOKEN
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1
# shellcheck source=../common/test_lib.sh
source "$here/../common/test_lib.sh"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

"$bin/cleave-datagen" mnist --out "$work/data" --train 320 --test 64 > /dev/null

# run_bad NAME DATA_PATH EXPECTED: run.sh with 5 workers must fail within 20 s (a heartbeat
# timeout alone would take 10 s more), naming the reader's message.
run_bad() {
  local name=$1 data=$2 expected=$3 start rc=0 took
  start=$(now)
  MS_WORKER_NUM=5 MS_SCHED_PORT=$(free_port) EXEC_PATH=$work/$name DATA_PATH=$data \
    timeout 60 "$here/run.sh" --epochs 1 > "$work/$name.out" 2>&1 || rc=$?
  took=$(elapsed "$start")
  [ "$rc" -eq 1 ] || fail "$name: run.sh exited $rc, expected 1: $(cat "$work/$name.out")"
  awk -v t="$took" 'BEGIN { exit !(t < 20) }' || fail "$name: the job took $took s"
  grep -Eq "^run.sh: the job failed: rank [0-4] \(host .*\) failed: .*$expected" "$work/$name.out" ||
    fail "$name: no verdict with '$expected': $(cat "$work/$name.out")"
  grep -Eq "^run.sh: worker [0-4]'s last line: lenet_place \(rank [0-4]\): .*$expected" \
    "$work/$name.out" || fail "$name: no worker's last line: $(cat "$work/$name.out")"
  grep -Eq "^run.sh: its log: $work/$name/worker_[0-4]/worker_[0-4].log" "$work/$name.out" ||
    fail "$name: no log path: $(cat "$work/$name.out")"
  if grep -q "no heartbeat" "$work/$name"/*/*.log; then fail "$name: a heartbeat timeout was blamed"; fi
  echo "ok: $name: the whole job (its 6 processes' start included) ended in $took s:"
  grep "^run.sh: the job failed" "$work/$name.out"
}

run_bad bad_data_path "$work/no_such_folder" "MnistDataset: folder '$work/no_such_folder/train' does not exist"
cp -r "$work/data" "$work/cut"
images=$work/cut/MNIST_Data/train/train-images-idx3-ubyte
head -c 1000 "$images" > "$work/part" && mv "$work/part" "$images"
run_bad truncated_idx "$work/cut/MNIST_Data" "is truncated or corrupt: 1000 bytes"

# Two jobs on one port, workers interleaved, no CLEAVE_JOB_TOKEN (as by hand).
export DATA_PATH=$work/data/MNIST_Data MS_SCHED_HOST=127.0.0.1 MS_SCHED_PORT=$(free_port)
export MS_WORKER_NUM=5
mkdir -p "$work/two"
MS_ROLE=MS_SCHED "$bin/lenet_place" --epochs 2 --max-steps 3 > "$work/two/sched_a.log" 2>&1 &
pids+=($!)
sched_a=$!
for _ in $(seq 1 100); do
  grep -q "serving a job" "$work/two/sched_a.log" && break
  sleep 0.1
done
MS_ROLE=MS_SCHED "$bin/lenet_place" --epochs 3 --max-steps 3 > "$work/two/sched_b.log" 2>&1 &
pids+=($!)
sched_b=$!
start=$(now)
a=()
b=()
for i in 0 1 2 3 4; do
  MS_ROLE=MS_WORKER "$bin/lenet_place" --epochs 2 --max-steps 3 > "$work/two/a$i.log" 2>&1 &
  pids+=($!)
  a+=($!)
  MS_ROLE=MS_WORKER "$bin/lenet_place" --epochs 3 --max-steps 3 > "$work/two/b$i.log" 2>&1 &
  pids+=($!)
  b+=($!)
done
for i in 0 1 2 3 4; do
  rc=0
  wait "${b[$i]}" || rc=$?
  [ "$rc" -ne 0 ] || fail "job B's worker $i was admitted: $(cat "$work/two/b$i.log")"
  grep -q "refused this worker: it belongs to another job: it runs \`.*lenet_place --epochs 3 --max-steps 3\` but this job's scheduler runs \`.*lenet_place --epochs 2 --max-steps 3\`" \
    "$work/two/b$i.log" || fail "job B's worker $i: no refusal naming both commands: $(cat "$work/two/b$i.log")"
done
took=$(elapsed "$start")
awk -v t="$took" 'BEGIN { exit !(t < 10) }' || fail "job B's workers were refused only after $took s"
echo "ok: job B's 5 workers were refused within $took s of their start"
rc=0
wait "$sched_b" || rc=$?
[ "$rc" -eq 1 ] || fail "job B's scheduler exited $rc: $(cat "$work/two/sched_b.log")"
for i in 0 1 2 3 4; do
  rc=0
  wait "${a[$i]}" || rc=$?
  [ "$rc" -eq 0 ] || fail "job A's worker $i exited $rc: $(tail -n 5 "$work/two/a$i.log")"
done
wait "$sched_a" || fail "job A's scheduler failed: $(tail -n 5 "$work/two/sched_a.log")"
grep -q "Accuracy is:" "$work"/two/a*.log || fail "job A printed no accuracy"
echo "ok: job A trained to the end"
echo PASS
