#!/usr/bin/env bash
# Runs the Python seed-003 program (train.py, 1 epoch of 4 steps) alone and under cleave-run with
# 8 workers, with the C++ program's rows (--cleave-data), and the C++ program
# (examples/sharding_propagation) the same two ways, and checks:
#  - alone and on 8 workers, the Python program prints exactly the C++ program's loss lines, and
#    every rank prints the single process's (relative 1e-5);
#  - on 8 workers, rank 0's step_parallel_begin dump (the traced graph and the strategies
#    propagation chose) is the C++ program's, and every rank's last checkpoint holds the C++ rank's tensors ("w", "w2",
#    their slices, the optimizer state) byte for byte;
#  - the seed's own data (NumPy) trains under mpirun -n 8 to the single process's losses.
# Usage: sharding_propagation_test.sh BIN_DIR (PYTHON and CLEAVE_PYTHONPATH as run.sh reads them)
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1 CLEAVE_COMM_TIMEOUT_MS=60000
args=(--epochs 1)
source "$root/examples/common/test_lib.sh"
source "$root/examples/python/common/python.sh"
lines() { grep -h "loss is" "$@"; }

mkdir -p "$work/single" "$work/single_cc" "$work/numpy"
(cd "$work/single" && timeout 60 "$python" "$here/train.py" "${args[@]}" --cleave-data) \
  > "$work/single.out"
(cd "$work/single_cc" && timeout 60 "$bin/sharding_propagation" "${args[@]}") > "$work/single_cc.out"
[ "$(grep -c 'loss is' "$work/single.out")" -eq 4 ] || fail "single run: expected 4 loss lines"
cmp -s <(lines "$work/single.out") <(lines "$work/single_cc.out") ||
  fail "alone, the Python program prints other losses than the C++ one:
$(diff <(lines "$work/single.out") <(lines "$work/single_cc.out"))"
echo "ok: alone, the Python program prints the C++ program's losses exactly"

# Every rank's losses against a single process's, relative 1e-5.
check_ranks() {  # name reference files...
  local name=$1 ref=$2 f
  shift 2
  [ $# -eq 8 ] || fail "$name: $# rank outputs, expected 8"
  for f in "$@"; do
    paste <(lines "$ref" | awk '{print $NF}') <(lines "$f" | awk '{print $NF}') | awk -v f="$f" '
      { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) { print f ": " $2 " where the single process has " $1; bad = 1 } }
      END { if (NR != 4) { print f ": " NR " loss lines, expected 4"; bad = 1 }; exit bad }' ||
      fail "$name: a rank's losses differ from the single process's"
  done
  echo "ok: $name: every rank prints the single process's losses"
}

for lang in python cc; do
  if [ $lang = python ]; then
    run=("$here/run.sh" "${args[@]}" --cleave-data)
  else
    run=("$root/examples/sharding_propagation/run.sh" "${args[@]}")
  fi
  (cd "$work" && WORKER_NUM=8 MASTER_PORT=$(free_port) EXEC_PATH=$work/run_$lang \
    timeout 120 "${run[@]}") > "$work/run_$lang.out" 2>&1 || {
    cat "$work/run_$lang.out"
    fail "${run[0]} with 8 workers failed"
  }
done
check_ranks "Python, cleave-run 8 workers" "$work/single.out" "$work"/run_python/log_output/worker_*.log
cmp -s <(lines "$work"/run_python/log_output/worker_*.log) \
  <(lines "$work"/run_cc/log_output/worker_*.log) ||
  fail "on 8 workers, the Python ranks print other losses than the C++ ranks"
dump() { find "$1" -name "*step_parallel_begin.ir" | sort | head -n 1; }
py_dump=$(dump "$work/run_python/saved_graph/rank_0")
cc_dump=$(dump "$work/run_cc/saved_graph/rank_0")
[ -n "$py_dump" ] && [ -n "$cc_dump" ] || fail "no step_parallel_begin dump from rank 0"
grep -q "in_strategy: ((2, 4)), derived: true" "$py_dump" ||
  fail "rank 0's dump $py_dump has no derived ReLU strategy"
cmp -s "$py_dump" "$cc_dump" ||
  fail "rank 0's step_parallel_begin dump differs from the C++ program's:
$(diff "$py_dump" "$cc_dump")"
for r in 0 1 2 3 4 5 6 7; do
  cmp -s "$work/run_python/$r/CKP-1_4.ckpt" "$work/run_cc/$r/CKP-1_4.ckpt" ||
    fail "rank $r's last checkpoint differs from the C++ rank's"
done
echo "ok: on 8 workers, the Python program prints the C++ program's losses, traces its graph, chooses its strategies and saves its checkpoints byte for byte"

(cd "$work/numpy" && timeout 60 "$python" "$here/train.py" "${args[@]}") > "$work/numpy.out"
if command -v mpirun > /dev/null; then
  (cd "$work" && NP=8 EXEC_PATH=$work/mpi timeout 120 "$here/run_with_mpi.sh" "${args[@]}") \
    > "$work/mpi.out" 2>&1 || {
    cat "$work/mpi.out"
    fail "run_with_mpi.sh failed"
  }
  check_ranks "Python with the seed's NumPy data, mpirun 8 ranks" "$work/numpy.out" \
    "$work"/mpi/log_output/1/rank.*/stdout
else
  echo "SKIPPED: mpirun not found: the mpirun run"
fi
