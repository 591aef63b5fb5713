#!/usr/bin/env bash
# Runs the Python seed-002 program (train.py) on a small generated MNIST (320 images: 10 steps of
# 32) alone, under cleave-run (run.sh) with 8 workers and under mpirun (run_mpirun.sh) with 8
# ranks, and the C++ program (examples/manual_parallel) alone and with 8 workers, and checks:
#  - alone, the Python program prints exactly the C++ program's loss lines and fingerprint;
#  - every rank of a run prints the same loss lines, equal (relative 1e-5) to the single process,
#    and ends with its parameters;
#  - under cleave-run, the Python ranks print exactly what the C++ ranks print.
# Usage: manual_parallel_test.sh BIN_DIR (PYTHON and CLEAVE_PYTHONPATH as run.sh reads them)
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

"$bin/cleave-datagen" mnist --out "$work/data" --train 320 --test 32 > /dev/null
export DATA_PATH=$work/data/MNIST_Data

lines() { grep -h "loss is\|parameters sum" "$@" | sed 's/^rank [0-9]* of [0-9]*: //'; }

(cd "$work" && timeout 60 "$python" "$here/train.py" "${args[@]}") > "$work/single.out"
(cd "$work" && timeout 60 "$bin/manual_parallel" "${args[@]}") > "$work/single_cc.out"
[ "$(grep -c 'loss is' "$work/single.out")" -eq 5 ] || fail "single run: expected 5 loss lines"
cmp -s <(lines "$work/single.out") <(lines "$work/single_cc.out") ||
  fail "alone, the Python program prints other lines than the C++ one:
$(diff <(lines "$work/single.out") <(lines "$work/single_cc.out"))"
echo "ok: alone, the Python program prints the C++ program's losses and parameters exactly"

# Every rank of a run: the same lines as the first rank, equal to the single process.
check_ranks() {  # name n files...
  local name=$1 n=$2
  shift 2
  [ $# -eq "$n" ] || fail "$name: $# rank outputs, expected $n"
  local f
  for f in "$@"; do
    cmp -s <(lines "$1") <(lines "$f") || fail "$name: $f prints other lines than $1"
    compare_to_single "$work/single.out" "$name ($f)" "$f"
  done
  echo "ok: $name: $n ranks print the same loss lines, equal to the single process"
}

for lang in python cc; do
  script=$here/run.sh
  [ $lang = cc ] && script=$root/examples/manual_parallel/run.sh
  (cd "$work" && WORKER_NUM=8 MASTER_PORT=$(free_port) EXEC_PATH=$work/run_$lang \
    timeout 90 "$script" "${args[@]}") > "$work/run_$lang.out" 2>&1 || {
    cat "$work/run_$lang.out"
    fail "$script with 8 workers failed"
  }
done
check_ranks "Python, cleave-run 8 workers" 8 "$work"/run_python/log_output/worker_*.log
cmp -s <(lines "$work"/run_python/log_output/worker_0.log) \
  <(lines "$work"/run_cc/log_output/worker_0.log) ||
  fail "under cleave-run, the Python ranks print other lines than the C++ ranks"
echo "ok: under cleave-run with 8 workers, the Python ranks print exactly the C++ ranks' lines"

if command -v mpirun > /dev/null; then
  (cd "$work" && NP=8 EXEC_PATH=$work/mpi timeout 90 "$here/run_mpirun.sh" "${args[@]}") \
    > "$work/mpi.out" 2>&1 || {
    cat "$work/mpi.out"
    fail "run_mpirun.sh failed"
  }
  check_ranks "Python, mpirun 8 ranks" 8 "$work"/mpi/log_output/1/rank.*/stdout
else
  echo "SKIPPED: mpirun not found: the mpirun run"
fi
