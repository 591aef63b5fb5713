#!/usr/bin/env bash
# Runs the Python seed-000 program (train.py) on a small generated MNIST (320 training images:
# 10 steps of 32) alone and with its run.sh (a scheduler and 8 workers, fc1..conv2 placed on
# workers 0..4), and the C++ program (examples/lenet_place) the same two ways, and checks that the
# Python program prints exactly the C++ program's loss and accuracy lines both times, and that
# the placed run prints the single process's.
# Usage: lenet_place_test.sh BIN_DIR (PYTHON and CLEAVE_PYTHONPATH as run.sh reads them)
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1 CLEAVE_COMM_TIMEOUT_MS=60000
args=(--epochs 1 --per-print-times 2)
source "$root/examples/common/test_lib.sh"
source "$root/examples/python/common/python.sh"

"$bin/cleave-datagen" mnist --out "$work/data" --train 320 --test 64 > /dev/null
export DATA_PATH=$work/data/MNIST_Data
lines() { grep -h "loss is\|Accuracy is" "$@"; }

(cd "$work" && timeout 60 "$python" "$here/train.py" "${args[@]}") > "$work/single.out"
(cd "$work" && timeout 60 "$bin/lenet_place" "${args[@]}") > "$work/single_cc.out"
[ "$(grep -c 'loss is' "$work/single.out")" -eq 5 ] || fail "single run: expected 5 loss lines"
cmp -s <(lines "$work/single.out") <(lines "$work/single_cc.out") ||
  fail "alone, the Python program prints other lines than the C++ one:
$(diff <(lines "$work/single.out") <(lines "$work/single_cc.out"))"
echo "ok: alone, the Python program prints the C++ program's losses and accuracy exactly"

for lang in python cc; do
  script=$here/run.sh
  [ $lang = cc ] && script=$root/examples/lenet_place/run.sh
  (cd "$work" && MS_SCHED_PORT=$(free_port) EXEC_PATH=$work/run_$lang \
    timeout 120 "$script" "${args[@]}") > "$work/run_$lang.out" 2>&1 || {
    cat "$work/run_$lang.out"
    fail "$script failed"
  }
done
cmp -s <(lines "$work"/run_python/worker_0/worker_0.log) <(lines "$work/single.out") ||
  fail "placed on 8 workers, the Python program prints other lines than alone:
$(diff <(lines "$work"/run_python/worker_0/worker_0.log) <(lines "$work/single.out"))"
cmp -s <(lines "$work"/run_python/worker_0/worker_0.log) <(lines "$work"/run_cc/worker_0/worker_0.log) ||
  fail "placed on 8 workers, the Python program prints other lines than the C++ one"
echo "ok: placed on 8 workers, the Python program prints the single process's and the C++ program's lines"
