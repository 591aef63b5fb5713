#!/usr/bin/env bash
# Seed 003 end to end: trains examples/sharding_propagation alone, under cleave-run with 8 workers
# (saving the strategy file), again from the loaded strategy file, and under run_with_mpi.sh, and
# checks: every rank prints the 20 loss lines of the single process (relative 1e-5) and they fall;
# rank 0's step_parallel_begin dump has matmul's given strategy and relu's and matmul2's derived
# ones; its executed graph has the seed's figures; every rank saved its checkpoint slices; the
# loaded strategy file gives the same losses.
# Usage: sharding_propagation_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1 CLEAVE_COMM_TIMEOUT_MS=60000

# shellcheck source=../common/test_lib.sh
source "$here/../common/test_lib.sh"

mkdir "$work/single"
(cd "$work/single" && timeout 60 "$bin/sharding_propagation") > "$work/single.out"
grep "loss is" "$work/single.out" > "$work/single.loss"
[ "$(wc -l < "$work/single.loss")" -eq 20 ] || fail "single run: expected 20 loss lines"
awk 'NR == 1 { first = $NF } END { if (!($NF < first)) exit 1 }' "$work/single.loss" ||
  fail "single run: the loss does not fall"

# Each rank's loss lines against the single process's.
check_ranks() {  # name files...
  local name=$1 f
  shift
  [ $# -eq 8 ] || fail "$name: $# rank outputs, expected 8"
  for f in "$@"; do
    grep "loss is" "$f" | awk -v name="$name ($f)" '
      NR == FNR { ref[FNR] = $NF; step[FNR] = $2 " " $4; n = FNR; next }
      { ++m; d = ref[m] - $NF; if (d < 0) d = -d
        if ($2 " " $4 != step[m] || d > 1e-5 * ref[m]) { print name ": " $0 " where one device has " ref[m]; bad = 1 } }
      END { if (m != n) { print name ": " m " loss lines, one device has " n; bad = 1 }; exit bad }' \
      "$work/single.loss" - || fail "$name does not match the single process"
  done
  echo "ok: $name: 8 ranks print the single process's 20 losses"
}

mkdir "$work/job"
(cd "$work/job" && WORKER_NUM=8 MASTER_PORT=$(free_port) LOG_DIR=$work/job/logs \
  timeout 120 "$here/run.sh" --strategy-save "$work/strategy.json") > "$work/job.out" 2>&1 || {
  cat "$work/job.out"
  fail "run.sh with 8 workers failed"
}
check_ranks "cleave-run 8 workers" "$work"/job/logs/worker_*.log

begin=$work/job/saved_graph/rank_0/train_step_0/02_step_parallel_begin.ir
[ -f "$begin" ] || fail "no step_parallel_begin dump at $begin"
grep -q "MatMul(.*{instance name: _backbone.matmul} {in_strategy: ((2, 4), (4, 1))}$" "$begin" ||
  fail "step_parallel_begin: matmul does not have its given strategy ((2, 4), (4, 1))"
grep -q "ReLU(.*{instance name: _backbone.relu} {in_strategy: ((2, 4)), derived: true}$" "$begin" ||
  fail "step_parallel_begin: relu is not derived as ((2, 4))"
grep -q "MatMul(.*{instance name: _backbone.matmul2} {in_strategy: ((2, 4), (4, 1)), derived: true}$" "$begin" ||
  fail "step_parallel_begin: matmul2 is not derived as ((2, 4), (4, 1))"
echo "ok: step_parallel_begin shows matmul given, relu and matmul2 derived"

executed=$work/job/saved_graph/rank_0/train_step_0_rank0/03_step_parallel_end.ir
[ -f "$executed" ] || fail "no executed-graph dump at $executed"
# The seed's figures: each op line followed by its shapes line.
figures=$(awk '/= [A-Za-z]+\(/ { op = $3; sub(/\(.*/, "", op); getline; print op " " $0 }' "$executed")
expect() {  # op shapes-fragment
  grep -qF "$1 " <<< "$figures" && grep -F "$1 " <<< "$figures" | grep -qF -- "$2" ||
    fail "executed graph: no $1 with $2"
}
expect MatMul ": (<Tensor[Float32], (8, 8)>, <Tensor[Float32], (8, 16)>) -> (<Tensor[Float32], (8, 16)>)"
expect Slice ": (<Tensor[Float32], (8, 16)>) -> (<Tensor[Float32], (8, 4)>)"
expect ReLU ": (<Tensor[Float32], (8, 4)>) -> (<Tensor[Float32], (8, 4)>)"
expect MatMul ": (<Tensor[Float32], (8, 4)>, <Tensor[Float32], (4, 16)>) -> (<Tensor[Float32], (8, 16)>)"
grep -q "AllReduce(.*rank_list: (0, 1, 2, 3)" "$executed" || fail "executed graph: no AllReduce over ranks (0, 1, 2, 3)"
echo "ok: rank 0's executed graph has the seed's figures"
"$bin/cleave-ir" "$executed" --render none > "$work/summary.txt" || fail "cleave-ir cannot read $executed"
grep -q "AllReduce over ranks (0, 1, 2, 3)" "$work/summary.txt" &&
  grep -q "w2 <Tensor\[Float32\], (4, 16)>" "$work/summary.txt" ||
  fail "cleave-ir's summary lacks the AllReduce over (0, 1, 2, 3) or w2 as (4, 16): $(cat "$work/summary.txt")"

for r in 0 1 2 3 4 5 6 7; do
  ls "$work/job/$r"/CKP-5_4.ckpt > /dev/null 2>&1 || fail "rank $r saved no checkpoint CKP-5_4.ckpt in $work/job/$r"
done
grep -q '"parallel_strategy_item"' "$work/strategy.json" || fail "no strategy file written"
echo "ok: every rank saved its checkpoint; the strategy file was written"

mkdir "$work/replay"
(cd "$work/replay" && WORKER_NUM=8 MASTER_PORT=$(free_port) LOG_DIR=$work/replay/logs \
  timeout 120 "$here/run.sh" --strategy-load "$work/strategy.json") > "$work/replay.out" 2>&1 || {
  cat "$work/replay.out"
  fail "run.sh from the loaded strategy file failed"
}
check_ranks "cleave-run 8 workers from the strategy file" "$work"/replay/logs/worker_*.log
cmp -s <(grep -h "loss is" "$work/job/logs/worker_0.log") <(grep -h "loss is" "$work/replay/logs/worker_0.log") ||
  fail "the run from the strategy file prints other losses"

if command -v mpirun > /dev/null; then
  (cd "$work" && NP=8 timeout 120 "$here/run_with_mpi.sh") > "$work/mpi.out" 2>&1 || {
    cat "$work/mpi.out" "$work/device/train.log"
    fail "run_with_mpi.sh failed"
  }
  [ "$(grep -c "loss is" "$work/device/train.log")" -eq 160 ] || fail "run_with_mpi.sh: expected 8 x 20 loss lines in device/train.log"
  # The ranks' lines interleave in one file: 20 distinct lines, each printed by all 8 ranks.
  grep "loss is" "$work/device/train.log" | sort -V | uniq -c | awk '$1 != 8 { exit 1 }' ||
    fail "run_with_mpi.sh: the ranks print different losses"
  grep "loss is" "$work/device/train.log" | sort -V -u > "$work/mpi.loss"
  check_ranks "mpirun 8 ranks" $(for r in 0 1 2 3 4 5 6 7; do echo "$work/mpi.loss"; done)
  [ -d "$work/device/0" ] && [ -d "$work/device/saved_graph/rank_7" ] || fail "run_with_mpi.sh: no device/0 or device/saved_graph/rank_7"
else
  echo "SKIPPED: mpirun not found: run_with_mpi.sh"
fi
