#!/usr/bin/env bash
# Seed 001 on 2 processes, as its script starts them (run.sh: device<i> folders, RANK_ID,
# DEVICE_ID, a rank table): a reduced ResNet (resnet_small, 32x32 images) trains with its loss
# falling and both ranks end with bit-identical parameters; ResNet-50 itself runs 2 steps with the
# same result; without parameter_broadcast, ranks started from different seeds end apart; the
# same program under cleave-run and mpirun; AUTO_PARALLEL searches its strategies (the dynamic
# programming, and the recursive programming) and both ranks print the same losses. "Falling":
# the mean loss of the last epoch is at most 85% of the first's.
# Usage: resnet_data_parallel_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID OMPI_COMM_WORLD_RANK \
  OMPI_COMM_WORLD_SIZE RANK_TABLE_FILE MINDSPORE_HCCL_CONFIG_PATH RANK_ID DEVICE_ID
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1 CLEAVE_COMM_TIMEOUT_MS=60000

# shellcheck source=../common/test_lib.sh
source "$here/../common/test_lib.sh"

"$bin/cleave-datagen" cifar10 --out "$work/data" --train 1024 --test 16 > /dev/null
export DATA_PATH=$work/data/cifar-10-batches-bin

# run.sh with EXEC_PATH $work/$1, RANK_SIZE=2 and the program arguments after it.
run_job() {  # folder args...
  local dir=$work/$1
  shift
  mkdir "$dir"
  (cd "$work" && EXEC_PATH=$dir RANK_SIZE=2 CLEAVE_RANK_TABLE_PORT=$(free_port) timeout 240 \
    "$here/run.sh" "$@") > "$dir/out" 2>&1 || { cat "$dir/out"; fail "run.sh $* failed"; }
  [ -f "$dir/device0/log0" ] && [ -f "$dir/device1/log1" ] && [ -f "$dir/device1/env1.log" ] ||
    fail "run.sh did not make device0/log0, device1/log1 and device1/env1.log in $dir"
  [ -f "$dir/rank_table.json" ] || fail "run.sh did not write rank_table.json in $dir"
  grep -q "^RANK_ID=1$" "$dir/device1/env1.log" && grep -q "^DEVICE_ID=1$" "$dir/device1/env1.log" ||
    fail "device1/env1.log lacks RANK_ID=1 and DEVICE_ID=1"
}
# The parameter fingerprint a rank's log ends with.
fingerprint() { grep -o "parameters fnv1a64 [0-9a-f]*" "$1" || fail "no parameter fingerprint in $1"; }
same_parameters() {  # name log0 log1
  [ "$(fingerprint "$2")" = "$(fingerprint "$3")" ] ||
    fail "$1: the ranks' parameters differ: $(fingerprint "$2") and $(fingerprint "$3")"
  echo "ok: $1: both ranks end with $(fingerprint "$2")"
}

# The reduced ResNet: 256 images per rank, 16 per step, 8 epochs.
run_job small --network resnet_small --image-size 32 --num-samples 256 --batch-size 16 --epoch-size 8
same_parameters "resnet_small, run.sh" "$work/small/device0/log0" "$work/small/device1/log1"
for r in 0 1; do
  log=$work/small/device$r/log$r
  [ "$(grep -c "loss is" "$log")" -eq 128 ] || fail "rank $r: expected 8 x 16 loss lines in $log"
  # The mean loss of the last epoch against the first's.
  awk -v r="$r" '/loss is/ { e = $2 + 0; s[e] += $NF; n[e]++ }
       END { first = s[1] / n[1]; last = s[8] / n[8]
             printf "rank %d: mean loss of epoch 1 %.3f, of epoch 8 %.3f\n", r, first, last
             exit !(last < 0.85 * first) }' "$log" || fail "rank $r: the loss does not fall in $log"
done
echo "ok: resnet_small: both ranks' losses fall"

run_job resnet50 --network resnet50 --image-size 32 --num-samples 8 --batch-size 4 --epoch-size 1
same_parameters "resnet50, 2 steps" "$work/resnet50/device0/log0" "$work/resnet50/device1/log1"

run_job apart --network resnet_small --image-size 32 --num-samples 32 --batch-size 16 --epoch-size 1 \
  --parameter-broadcast false
[ "$(fingerprint "$work/apart/device0/log0")" != "$(fingerprint "$work/apart/device1/log1")" ] ||
  fail "without parameter_broadcast, ranks started from different seeds should differ"
echo "ok: without parameter_broadcast the ranks differ"

args=(--network resnet_small --image-size 32 --num-samples 32 --batch-size 16 --epoch-size 1)
mkdir "$work/run"
(cd "$work/run" && timeout 120 "$bin/cleave-run" --worker_num 2 --master_port "$(free_port)" \
  --log_dir logs -- "$bin/resnet_data_parallel" "${args[@]}") > "$work/run/out" 2>&1 ||
  { cat "$work/run/out"; fail "cleave-run failed"; }
same_parameters "cleave-run" "$work/run/logs/worker_0.log" "$work/run/logs/worker_1.log"

if command -v mpirun > /dev/null; then
  (cd "$work" && NP=2 EXEC_PATH=$work/mpi timeout 120 "$here/run_mpirun.sh" "${args[@]}") \
    > "$work/mpi.out" 2>&1 || { cat "$work/mpi.out"; fail "run_mpirun.sh failed"; }
  same_parameters "mpirun" "$work/mpi/log_output/1/rank.0/stdout" "$work/mpi/log_output/1/rank.1/stdout"
else
  echo "SKIPPED: mpirun not found"
fi

# AUTO_PARALLEL (the seed's second variant): the dynamic-programming search plans every operator,
# rank 0 prints its summary, and both ranks print the same losses (the whole batch's).
run_job auto "${args[@]}" --parallel-mode auto
grep -q "dynamic programming: .* ops" "$work/auto/device0/log0" ||
  fail "--parallel-mode auto: rank 0 printed no search summary: $(cat "$work/auto/device0/log0")"
[ "$(grep -c "loss is" "$work/auto/device0/log0")" -eq 2 ] ||
  fail "--parallel-mode auto: expected 2 loss lines in device0/log0"
[ "$(grep "loss is" "$work/auto/device0/log0")" = "$(grep "loss is" "$work/auto/device1/log1")" ] ||
  fail "--parallel-mode auto: the ranks' losses differ"
echo "ok: AUTO_PARALLEL: $(grep -m1 -o "dynamic programming: [0-9]* ops" "$work/auto/device0/log0"), the same losses on both ranks"

# The same with the recursive programming (search_mode "recursive_programming", SAPP).
run_job auto_rec "${args[@]}" --parallel-mode auto --search-mode recursive_programming
grep -q "recursive programming: .* ops" "$work/auto_rec/device0/log0" ||
  fail "--search-mode recursive_programming: rank 0 printed no search summary: $(cat "$work/auto_rec/device0/log0")"
[ "$(grep "loss is" "$work/auto_rec/device0/log0")" = "$(grep "loss is" "$work/auto_rec/device1/log1")" ] ||
  fail "--search-mode recursive_programming: the ranks' losses differ"
echo "ok: AUTO_PARALLEL: $(grep -m1 -o "recursive programming: [0-9]* ops, [0-9]* levels*" "$work/auto_rec/device0/log0"), the same losses on both ranks"

# The parallel optimizer under cleave-run on 2 and 4 workers (every parameter split, threshold 0;
# 4 steps of 16 images per rank): each rank holds 1/N of every weight and of its momentum, and
# training gives the replicated run's losses and, gathered, its parameters bit for bit (the
# shared-memory collectives of one host sum in rank order, whether AllReduce or ReduceScatter).
po_args=(--network resnet_small --image-size 32 --num-samples 64 --batch-size 16 --epoch-size 1)
for n in 2 4; do
  for variant in replicated split; do
    extra=()
    [ "$variant" = split ] && extra=(--enable-parallel-optimizer true --parallel-optimizer-threshold 0)
    dir=$work/po_${n}_$variant
    mkdir "$dir"
    (cd "$dir" && timeout 180 "$bin/cleave-run" --worker_num "$n" --master_port "$(free_port)" \
      --log_dir logs -- "$bin/resnet_data_parallel" "${po_args[@]}" "${extra[@]}") \
      > "$dir/out" 2>&1 || { cat "$dir/out"; fail "cleave-run --worker_num $n ($variant) failed"; }
  done
  replicated=$work/po_${n}_replicated/logs/worker_0.log
  [ "$(grep -c "loss is" "$replicated")" -eq 4 ] || fail "expected 4 loss lines in $replicated"
  [ "$(grep "loss is" "$replicated")" = "$(grep "loss is" "$work/po_${n}_split/logs/worker_0.log")" ] ||
    fail "parallel optimizer on $n workers: the losses differ from the replicated run's"
  for r in $(seq 0 $((n - 1))); do
    [ "$(fingerprint "$work/po_${n}_split/logs/worker_$r.log")" = "$(fingerprint "$replicated")" ] ||
      fail "parallel optimizer on $n workers: rank $r's gathered parameters differ from the replicated run's"
  done
  echo "ok: the parallel optimizer under cleave-run on $n workers: the replicated run's losses and $(fingerprint "$replicated")"
done
