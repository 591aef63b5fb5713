#!/usr/bin/env bash
# Runs examples/manual_parallel on a small generated MNIST (320 images: 10 steps of 32) alone,
# under cleave-run (run.sh) with 8 and 4 workers in GRAPH_MODE (the default) and with 8 workers
# in PYNATIVE_MODE, and under mpirun (run_mpirun.sh) with 8 ranks,
# and checks: every rank prints the same loss lines, equal (relative 1e-5) to the single process
# computing the loss of whole batches, and every rank ends with the single process's parameters
# (their sum and sum of squares, relative 1e-5). Also checks that --no-grad-mean (the seed's
# program literally, no gradient averaging) leaves the ranks' parameters different.
# Usage: manual_parallel_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1 CLEAVE_COMM_TIMEOUT_MS=60000
args=(--epochs 1 --per-print-times 2)

# shellcheck source=../common/test_lib.sh
source "$here/../common/test_lib.sh"

"$bin/cleave-datagen" mnist --out "$work/data" --train 320 --test 32 > /dev/null
export DATA_PATH=$work/data/MNIST_Data

# The reference: one process (world size 1, the slice is the whole batch).
(cd "$work" && timeout 60 "$bin/manual_parallel" "${args[@]}") > "$work/single.out"
grep -c "loss is" "$work/single.out" | grep -qx 5 || fail "single run: expected 5 loss lines"
grep "loss is" "$work/single.out" > "$work/single.loss"

# Every rank of a run: identical loss lines and parameter fingerprints, matching the reference.
check_ranks() {  # name n files...
  local name=$1 n=$2
  shift 2
  [ $# -eq "$n" ] || fail "$name: $# rank outputs, expected $n"
  local first=$1 f
  for f in "$@"; do
    cmp -s <(grep "loss is" "$first") <(grep "loss is" "$f") || fail "$name: $f has other loss lines than $first"
    [ "$(grep -o 'parameters sum.*' "$first")" = "$(grep -o 'parameters sum.*' "$f")" ] ||
      fail "$name: $f ends with other parameters than $first"
    compare_to_single "$work/single.out" "$name ($f)" "$f"
  done
  echo "ok: $name: $n ranks print the same loss lines, equal to the single process"
}

# run.sh and run_mpirun.sh write under EXEC_PATH, their logs in its log_output/.
for n in 8 4; do
  (cd "$work" && WORKER_NUM=$n MASTER_PORT=$(free_port) EXEC_PATH=$work/run$n \
    timeout 60 "$here/run.sh" "${args[@]}") > "$work/run$n.out" 2>&1 || {
    cat "$work/run$n.out"
    fail "run.sh with $n workers failed"
  }
  check_ranks "cleave-run $n workers" "$n" "$work"/run$n/log_output/worker_*.log
done

# PYNATIVE_MODE gives the same losses and parameters as the compiled steps.
(cd "$work" && WORKER_NUM=8 MASTER_PORT=$(free_port) EXEC_PATH=$work/pynative \
  timeout 60 "$here/run.sh" "${args[@]}" --mode pynative) > "$work/pynative.out" 2>&1 || {
  cat "$work/pynative.out"
  fail "run.sh --mode pynative failed"
}
check_ranks "cleave-run 8 workers, PYNATIVE_MODE" 8 "$work"/pynative/log_output/worker_*.log

if command -v mpirun > /dev/null; then
  (cd "$work" && NP=8 EXEC_PATH=$work/mpi timeout 60 "$here/run_mpirun.sh" "${args[@]}") \
    > "$work/mpi.out" 2>&1 || {
    cat "$work/mpi.out"
    fail "run_mpirun.sh failed"
  }
  # OpenMPI 4.1's --output-filename layout: log_output/1/rank.<N>/stdout.
  check_ranks "mpirun 8 ranks" 8 "$work"/mpi/log_output/1/rank.*/stdout
else
  echo "SKIPPED: mpirun not found: the mpirun run"
fi

# Without gradient averaging each rank follows its own rows' gradient: the printed (AllReduce'd)
# losses are still the same on every rank, the parameters are not. (LOG_DIR, relative: taken from
# the folder run.sh is started in, not from EXEC_PATH.)
(cd "$work" && WORKER_NUM=4 MASTER_PORT=$(free_port) EXEC_PATH=$work/nomean LOG_DIR=nomean_logs \
  timeout 60 "$here/run.sh" "${args[@]}" --no-grad-mean) > "$work/nomean.out" 2>&1 || {
  cat "$work/nomean.out"
  fail "run.sh --no-grad-mean failed"
}
[ "$(grep -h 'loss is' "$work"/nomean_logs/worker_*.log | sort -u | wc -l)" -eq 5 ] ||
  fail "--no-grad-mean: the ranks print different loss lines"
[ "$(grep -ho 'parameters sum.*' "$work"/nomean_logs/worker_*.log | sort -u | wc -l)" -eq 4 ] ||
  fail "--no-grad-mean: expected 4 different parameter fingerprints"
echo "ok: --no-grad-mean: same loss lines, the ranks' parameters differ"
