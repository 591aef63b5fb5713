#!/usr/bin/env bash
# Runs examples/shard_function (seed 004) alone, under cleave-run with 8 workers (Net1 and Net2),
# under mpirun with 8 ranks and with the seed's run_shard_function_example.sh on 8 ranks, and
# checks: every rank prints the single process's 20 losses and parameter fingerprint (sum and sum
# of squares) and dense_relu's result sum (relative 1e-5), and `result.shape: (32, 10)`; with
# --save-graphs, each rank's step_parallel_end dump of block1 shows its in_strategy.
# Usage: shard_function_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1 CLEAVE_COMM_TIMEOUT_MS=60000

# shellcheck source=../common/test_lib.sh
source "$here/../common/test_lib.sh"

for net in net1 net2; do
  args=(--net "$net" --steps 20)
  (cd "$work" && timeout 120 "$bin/shard_function" "${args[@]}") > "$work/single_$net.out"
  [ "$(grep -c 'loss is' "$work/single_$net.out")" -eq 20 ] || fail "$net: single run: expected 20 loss lines"

  # One rank's output against the reference: the same steps, losses, fingerprint and result.
  compare() {  # name file
    grep -q '^result.shape: (32, 10)$' "$2" || fail "$1: no 'result.shape: (32, 10)' line in $2"
    awk -v name="$1" '
      function rel(a, b) { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); return m > 0 ? d / m : d }
      NR == FNR { if ($0 ~ /loss is/) { ref_step[++nr] = $4; ref_loss[nr] = $NF }
                  if ($0 ~ /parameters sum/) { ref_sum = $6; ref_sq = $NF }
                  if ($0 ~ /result sum/) { ref_result = $NF }; next }
      /loss is/ { ++n; if ($4 != ref_step[n]) { print name ": step " $4 " where the reference has " ref_step[n]; bad = 1 }
                  if (rel(ref_loss[n], $NF) > 1e-5) { print name ": " $0 " differs from the reference loss " ref_loss[n]; bad = 1 } }
      /parameters sum/ { seen = 1
                  if (rel(ref_sum, $6) > 1e-5 || rel(ref_sq, $NF) > 1e-5) { print name ": " $0 " differs from the reference sum " ref_sum " sum of squares " ref_sq; bad = 1 } }
      /result sum/ { seen_result = 1
                  if (rel(ref_result, $NF) > 1e-5) { print name ": " $0 " differs from the reference " ref_result; bad = 1 } }
      END { if (n != nr) { print name ": " n " loss lines, the reference has " nr; bad = 1 }
            if (!seen || !seen_result) { print name ": no parameters or result line"; bad = 1 }
            exit bad }' "$work/single_$net.out" "$2" || fail "$1 does not match the single process"
  }
  check_ranks() {  # name files...
    local name=$1 f
    shift
    [ $# -eq 8 ] || fail "$name: $# rank outputs, expected 8"
    for f in "$@"; do compare "$name ($f)" "$f"; done
    echo "ok: $name: 8 ranks print the single process's losses, parameters and result"
  }

  (cd "$work" && WORKER_NUM=8 MASTER_PORT=$(free_port) EXEC_PATH=$work/run_$net \
    timeout 240 "$here/run.sh" "${args[@]}" --save-graphs) > "$work/run_$net.out" 2>&1 || {
    cat "$work/run_$net.out"
    fail "$net: run.sh with 8 workers failed"
  }
  check_ranks "$net, cleave-run 8 workers" "$work"/run_$net/log_output/worker_*.log
  dump=$(find "$work/run_$net/saved_graph/rank_3" -path '*forward*' -name '*step_parallel_end*.ir' | head -1)
  [ -n "$dump" ] || fail "$net: no step_parallel_end dump of a block's forward for rank 3"
  strategy=$([ "$net" = net1 ] && echo "((1, 8))" || echo "((8, 1))")
  grep -q "in_strategy: $strategy" "$dump" || fail "$net: $dump does not show in_strategy $strategy"
  echo "ok: $net: rank 3's step_parallel_end dump shows in_strategy $strategy"
done

net=net1
args=(--net net1 --steps 20)
if command -v mpirun > /dev/null; then
  (cd "$work" && NP=8 EXEC_PATH=$work/mpi timeout 240 "$here/run_mpirun.sh" "${args[@]}") \
    > "$work/mpi.out" 2>&1 || {
    cat "$work/mpi.out"
    fail "run_mpirun.sh failed"
  }
  check_ranks "net1, mpirun 8 ranks" "$work"/mpi/log_output/1/rank.*/stdout
else
  echo "SKIPPED: mpirun not found: the mpirun run"
fi

(cd "$work" && EXEC_PATH=$work/table CLEAVE_RANK_TABLE_PORT=$(free_port) \
  timeout 240 "$here/run_shard_function_example.sh" 8 - "${args[@]}") > "$work/table.out" 2>&1 || {
  cat "$work/table.out"
  fail "run_shard_function_example.sh 8 failed"
}
check_ranks "net1, run_shard_function_example.sh 8" "$work"/table/device*/train.log*
