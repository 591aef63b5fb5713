#!/usr/bin/env bash
# Trains examples/semi_auto_parallel (a strategy on every operator) alone, under cleave-run with
# 8 workers and under mpirun with 8 ranks, for the MLP and for LeNet, and checks: every rank
# prints the same 20 loss lines, equal (relative 1e-5) to the single process, and every rank's
# gathered parameters have the single process's fingerprint (sum and sum of squares, relative
# 1e-5).
# Usage: semi_auto_parallel_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1 CLEAVE_COMM_TIMEOUT_MS=60000

# shellcheck source=../common/test_lib.sh
source "$here/../common/test_lib.sh"

for net in mlp lenet; do
  args=(--net "$net" --steps 20)
  (cd "$work" && timeout 120 "$bin/semi_auto_parallel" "${args[@]}") > "$work/single_$net.out"
  [ "$(grep -c 'loss is' "$work/single_$net.out")" -eq 20 ] || fail "$net: single run: expected 20 loss lines"

  # One rank's output against the reference: the same steps, losses and fingerprint.
  compare() {  # name file
    awk -v name="$1" '
      function rel(a, b) { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); return m > 0 ? d / m : d }
      NR == FNR { if ($0 ~ /loss is/) { ref_step[++nr] = $4; ref_loss[nr] = $NF }
                  if ($0 ~ /parameters sum/) { ref_sum = $6; ref_sq = $NF }; next }
      /loss is/ { ++n; if ($4 != ref_step[n]) { print name ": step " $4 " where the reference has " ref_step[n]; bad = 1 }
                  if (rel(ref_loss[n], $NF) > 1e-5) { print name ": " $0 " differs from the reference loss " ref_loss[n]; bad = 1 } }
      /parameters sum/ { seen = 1
                  if (rel(ref_sum, $6) > 1e-5 || rel(ref_sq, $NF) > 1e-5) { print name ": " $0 " differs from the reference sum " ref_sum " sum of squares " ref_sq; bad = 1 } }
      END { if (n != nr) { print name ": " n " loss lines, the reference has " nr; bad = 1 }
            if (!seen) { print name ": no parameters line"; bad = 1 }
            exit bad }' "$work/single_$net.out" "$2" || fail "$1 does not match the single process"
  }
  check_ranks() {  # name files...
    local name=$1 f
    shift
    [ $# -eq 8 ] || fail "$name: $# rank outputs, expected 8"
    for f in "$@"; do
      cmp -s <(grep "loss is" "$1") <(grep "loss is" "$f") || fail "$name: $f has other loss lines than $1"
      compare "$name ($f)" "$f"
    done
    echo "ok: $name: 8 ranks print the same loss lines and parameters, equal to one process"
  }

  # run.sh and run_mpirun.sh write under EXEC_PATH, their logs in its log_output/.
  (cd "$work" && WORKER_NUM=8 MASTER_PORT=$(free_port) EXEC_PATH=$work/run_$net \
    timeout 240 "$here/run.sh" "${args[@]}") > "$work/run_$net.out" 2>&1 || {
    cat "$work/run_$net.out"
    fail "$net: run.sh with 8 workers failed"
  }
  check_ranks "$net, cleave-run 8 workers" "$work"/run_$net/log_output/worker_*.log

  if command -v mpirun > /dev/null; then
    (cd "$work" && NP=8 EXEC_PATH=$work/mpi_$net timeout 240 "$here/run_mpirun.sh" "${args[@]}") \
      > "$work/mpi_$net.out" 2>&1 || {
      cat "$work/mpi_$net.out"
      fail "$net: run_mpirun.sh failed"
    }
    check_ranks "$net, mpirun 8 ranks" "$work"/mpi_$net/log_output/1/rank.*/stdout
  else
    echo "SKIPPED: mpirun not found: the mpirun runs"
  fi
done
