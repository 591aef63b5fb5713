#!/usr/bin/env bash
# Seed 003 end to end: trains examples/sharding_propagation alone, under cleave-run with 8 workers
# (saving the strategy file), again from the loaded strategy file, and under run_with_mpi.sh, and
# checks: every rank prints the 20 loss lines of the single process (relative 1e-5) and they fall;
# rank 0's step_parallel_begin dump has matmul's given strategy and relu's and matmul2's derived
# ones; both dumps equal the golden files in golden/ and cleave-ir draws them; every rank's
# checkpoint holds its slices of w and w2, equal to the single process's rows; the loaded strategy
# file gives the same losses; cleave-ckpt merge turns the 8 checkpoints into the single process's;
# a job of 8 ranks resumed from its own checkpoint set continues the single process's losses, and
# a one-process run refuses to save into the job's folder; a hand-started job (MS_ROLE, MS_WORKER_NUM, MS_SCHED_HOST,
# MS_SCHED_PORT) prints them too.
# Usage: sharding_propagation_test.sh BIN_DIR
# CLEAVE_UPDATE_GOLDEN=1 rewrites the golden files from this run instead of comparing.
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1 CLEAVE_COMM_TIMEOUT_MS=60000
unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID OMPI_COMM_WORLD_RANK \
  OMPI_COMM_WORLD_SIZE

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

# run.sh with 8 workers and EXEC_PATH $work/NAME (logs in NAME/log_output, graphs in
# NAME/saved_graph, checkpoints in NAME/<rank>), the program's arguments after it.
run_job() {  # name args... (WORKERS workers, 8 by default)
  local name=$1
  shift
  (cd "$work" && EXEC_PATH=$work/$name WORKER_NUM=${WORKERS:-8} MASTER_PORT=$(free_port) \
    timeout 120 "$here/run.sh" "$@") > "$work/$name.out" 2>&1 || {
    cat "$work/$name.out"
    fail "run.sh $* with ${WORKERS:-8} workers failed"
  }
}

run_job job --strategy-save "$work/strategy.json"
check_ranks "cleave-run 8 workers" "$work"/job/log_output/worker_*.log

begin=$work/job/saved_graph/rank_0/train_step_0/04_step_parallel_begin.ir
[ -f "$begin" ] || fail "no step_parallel_begin dump at $begin"
grep -q "MatMul(.*{instance name: _backbone.matmul} {in_strategy: ((2, 4), (4, 1))}$" "$begin" ||
  fail "step_parallel_begin: matmul does not have its given strategy ((2, 4), (4, 1))"
grep -q "ReLU(.*{instance name: _backbone.relu} {in_strategy: ((2, 4)), derived: true}$" "$begin" ||
  fail "step_parallel_begin: relu is not derived as ((2, 4))"
grep -q "MatMul(.*{instance name: _backbone.matmul2} {in_strategy: ((2, 4), (4, 1)), derived: true}$" "$begin" ||
  fail "step_parallel_begin: matmul2 is not derived as ((2, 4), (4, 1))"
echo "ok: step_parallel_begin shows matmul given, relu and matmul2 derived"

executed=$work/job/saved_graph/rank_0/train_step_0_rank0/06_step_parallel_end.ir
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

# The golden dumps: the whole of both files, so that any change to what propagation derives or
# the rewrite inserts shows up here as a diff.
golden() {  # dump golden-file
  if [ "${CLEAVE_UPDATE_GOLDEN:-0}" = 1 ]; then
    cp "$1" "$here/golden/$2"
    echo "updated: golden/$2"
  elif ! diff -u "$here/golden/$2" "$1"; then
    fail "$1 differs from golden/$2 (the diff above; CLEAVE_UPDATE_GOLDEN=1 rewrites it if the change is meant)"
  fi
}
golden "$begin" rank_0_step_parallel_begin.ir
golden "$executed" rank_0_step_parallel_end.ir
echo "ok: rank 0's step_parallel_begin and step_parallel_end dumps equal the golden files"

if command -v dot > /dev/null; then
  for d in "$begin" "$executed"; do
    "$bin/cleave-ir" "$d" --render svg --out "$work/drawn.svg" > /dev/null ||
      fail "cleave-ir cannot draw $d"
    grep -q "MatMul" "$work/drawn.svg" || fail "cleave-ir's drawing of $d has no MatMul"
  done
  grep -q "AllReduce" "$work/drawn.svg" || fail "cleave-ir's drawing of $executed has no AllReduce"
  echo "ok: cleave-ir draws both dumps"
else
  echo "SKIPPED: Graphviz's dot not found: drawing the dumps"
fi
"$bin/cleave-ir" "$executed" --render none > "$work/summary.txt" || fail "cleave-ir cannot read $executed"
grep -q "AllReduce over ranks (0, 1, 2, 3)" "$work/summary.txt" &&
  grep -q "w2 <Tensor\[Float32\], (4, 16)>" "$work/summary.txt" ||
  fail "cleave-ir's summary lacks the AllReduce over (0, 1, 2, 3) or w2 as (4, 16): $(cat "$work/summary.txt")"

# Each rank's last checkpoint holds its slices: w (32, 16) and w2 (16, 16) are split 4 ways by
# rows (strategy (4, 1) on the device matrix [2, 4, 1]), so rank r holds row block r % 4 of each,
# and those rows equal the single process's (1e-5 relative, 1e-7 absolute).
single_ckpt=$work/single/0/CKP-5_4.ckpt
[ -f "$single_ckpt" ] || fail "the single run saved no checkpoint $single_ckpt"
for r in 0 1 2 3 4 5 6 7; do
  ckpt=$work/job/$r/CKP-5_4.ckpt
  [ -f "$ckpt" ] || fail "rank $r saved no checkpoint CKP-5_4.ckpt in $work/job/$r"
  "$bin/cleave-ckpt" "$ckpt" > "$work/list" || fail "cleave-ckpt cannot read $ckpt"
  grep -qx "w Float32 (8, 16)" "$work/list" && grep -qx "w2 Float32 (4, 16)" "$work/list" ||
    fail "rank $r's checkpoint does not hold the slices w (8, 16) and w2 (4, 16): $(cat "$work/list")"
  for p in w:128 w2:64; do
    name=${p%:*} per_rank=${p#*:}
    "$bin/cleave-ckpt" "$ckpt" --values "$name" |
      awk -v first=$(((r % 4) * per_rank)) -v what="rank $r's $name" '
        NR == FNR { ref[FNR - 1] = $1; next }
        { ++n; want = ref[first + n - 1]; d = want - $1; if (d < 0) d = -d; a = want < 0 ? -want : want
          if (d > 1e-5 * a + 1e-7) { print what " value " n ": " $1 " where one device has " want; bad = 1 } }
        END { exit bad || n == 0 }' <("$bin/cleave-ckpt" "$single_ckpt" --values "$name") - ||
      fail "rank $r's checkpoint: $name is not its slice of the single process's $name"
  done
done
grep -q '"parallel_strategy_item"' "$work/strategy.json" || fail "no strategy file written"
echo "ok: every rank's checkpoint holds its slices of w and w2, equal to one device's; the strategy file was written"

# cleave-ckpt merge: the 8 ranks' checkpoints and the strategy file give the single process's
# checkpoint: the same tensors (parameters, Momentum's state, counters), the same values (1e-5
# relative, 1e-7 absolute).
"$bin/cleave-ckpt" merge "$work/job" --strategy "$work/strategy.json" -o "$work/merged.ckpt" \
  > "$work/merge.out" || { cat "$work/merge.out"; fail "cleave-ckpt merge failed"; }
grep -q "merged 8 ranks into .*, [0-9]* of them from slices" "$work/merge.out" ||
  fail "cleave-ckpt merge said: $(cat "$work/merge.out")"
"$bin/cleave-ckpt" "$work/merged.ckpt" > "$work/merged.list"
"$bin/cleave-ckpt" "$single_ckpt" > "$work/single.list"
diff -u "$work/single.list" "$work/merged.list" ||
  fail "the merged checkpoint does not hold the single process's tensors (diff above)"
while read -r name _; do
  "$bin/cleave-ckpt" "$work/merged.ckpt" --values "$name" |
    awk -v what="merged $name" '
      NR == FNR { ref[FNR] = $1; next }
      { ++n; d = ref[n] - $1; if (d < 0) d = -d; a = ref[n] < 0 ? -ref[n] : ref[n]
        if (d > 1e-5 * a + 1e-7) { print what " value " n ": " $1 " where one device has " ref[n]; bad = 1 } }
      END { exit bad || n == 0 }' <("$bin/cleave-ckpt" "$single_ckpt" --values "$name") - ||
    fail "the merged $name differs from the single process's"
done < "$work/single.list"
# A set that does not fit its strategy is refused: one rank's folder missing.
mv "$work/job/7" "$work/job7"
if "$bin/cleave-ckpt" merge "$work/job" --strategy "$work/strategy.json" -o "$work/bad.ckpt" \
  2> "$work/merge.err"; then
  fail "cleave-ckpt merge succeeded without rank 7's checkpoint"
fi
grep -q "no folder '7' or 'rank_7' for rank 7 of 8" "$work/merge.err" ||
  fail "cleave-ckpt merge without rank 7 said: $(cat "$work/merge.err")"
[ ! -e "$work/bad.ckpt" ] || fail "a refused merge wrote $work/bad.ckpt"
mv "$work/job7" "$work/job/7"
echo "ok: cleave-ckpt merge gives the single process's checkpoint ($(wc -l < "$work/single.list") tensors) and refuses a set without rank 7"

# cleave-ckpt transform: the 8 ranks' checkpoints into those of a 2-rank job that splits w's rows
# 2 ways and holds w2 whole (a strategy file written by hand): rank 1 holds rows 16..31 of the
# single process's w, and w2 whole.
cat > "$work/two.json" <<'JSON'
{"format": "cleave-strategy", "version": 1, "device_num": 2, "current_stage": 0,
 "parallel_strategy_item": {},
 "parallel_layout_item": {"_backbone.w": {"dev_matrix": [2], "tensor_map": [[0], []],
                                          "tensor_shape": [32, 16]}}}
JSON
# --plan: each destination rank needs four source slices of w, each held by two ranks; rank 1
# reads its own file for the slice it holds and replica 1 of each other slice (NOTE [Reading only
# what a rank needs]), so the two ranks share one file instead of reading the same four.
"$bin/cleave-ckpt" transform "$work/job" --src-strategy "$work/strategy.json" \
  --dst-strategy "$work/two.json" --plan > "$work/plan.out" || fail "cleave-ckpt transform --plan failed"
grep -qx "destination rank 0 reads source ranks 0, 1, 2, 3" "$work/plan.out" &&
grep -qx "destination rank 1 reads source ranks 1, 4, 6, 7" "$work/plan.out" ||
  fail "transform --plan said: $(cat "$work/plan.out")"
"$bin/cleave-ckpt" transform "$work/job" --src-strategy "$work/strategy.json" \
  --dst-strategy "$work/two.json" -o "$work/two" > "$work/transform.out" ||
  { cat "$work/transform.out"; fail "cleave-ckpt transform failed"; }
"$bin/cleave-ckpt" "$work/two/1/CKP-5_4.ckpt" > "$work/two.list"
grep -qx "w Float32 (16, 16)" "$work/two.list" && grep -qx "w2 Float32 (16, 16)" "$work/two.list" ||
  fail "the transformed rank 1 does not hold w (16, 16) and w2 (16, 16): $(cat "$work/two.list")"
"$bin/cleave-ckpt" "$work/two/1/CKP-5_4.ckpt" --values w |
  awk 'NR == FNR { ref[FNR - 1] = $1; next }
    { ++n; want = ref[256 + n - 1]; d = want - $1; if (d < 0) d = -d; a = want < 0 ? -want : want
      if (d > 1e-5 * a + 1e-7) { print "transformed w value " n ": " $1 " where one device has " want; bad = 1 } }
    END { exit bad || n != 256 }' <("$bin/cleave-ckpt" "$single_ckpt" --values w) - ||
  fail "the transformed rank 1's w is not rows 16..31 of the single process's"
if "$bin/cleave-ckpt" transform "$work/job" --src-strategy "$work/strategy.json" \
  --dst-strategy "$work/two.json" -o "$work/two" 2> "$work/again.err"; then
  fail "a second transform into the same folder overwrote it"
fi
grep -q "exists already" "$work/again.err" || fail "a second transform said: $(cat "$work/again.err")"
echo "ok: cleave-ckpt transform gives a 2-rank job's slices, plans what each rank reads, overwrites nothing"

next5_losses() {  # name log... : the logs' loss lines against the single process's 6 to 10
  local name=$1
  shift
  for f in "$@"; do
    grep "loss is" "$f" | awk -v name="$name: $f" '
      NR == FNR { if (FNR > 5 && FNR <= 10) ref[FNR - 5] = $NF; next }
      { ++m; d = ref[m] - $NF; if (d < 0) d = -d
        if ($2 != "2" || d > 1e-5 * ref[m]) { print name ": " $0 " where one device has " ref[m]; bad = 1 } }
      END { if (m != 5) { print name ": " m " loss lines, expected 5"; bad = 1 }; exit bad }' \
      "$work/single.loss" - || fail "$name does not continue the single process's losses"
  done
}

# Resumed: 8 ranks train 5 steps and save; a new 8-rank job loads that set (the strategy file it
# saved) and trains steps 6 to 10, whose losses are the single process's (1e-5 relative).
run_job first5 --epochs 1 --steps-per-epoch 5 --strategy-save "$work/first5.json"
for r in 0 1 2 3 4 5 6 7; do
  [ -f "$work/first5/$r/CKP-1_5.ckpt.commit" ] || fail "rank $r did not commit CKP-1_5.ckpt"
done
run_job next5 --epochs 2 --steps-per-epoch 5 --resume "$work/first5" \
  --resume-strategy "$work/first5.json"
next5_losses "the resumed 8-rank job" "$work"/next5/log_output/worker_*.log
for r in 0 1 2 3 4 5 6 7; do  # built before loading, under the saving job's strategy
  grep -q "rank $r read 1 checkpoint file(s)" "$work/next5/log_output/worker_$r.log" ||
    fail "rank $r of the resumed job did not read only its own file: $(grep 'checkpoint file' "$work/next5/log_output/worker_$r.log")"
done
echo "ok: a job of 8 ranks resumed from its 5-step checkpoint set prints the single process's losses 6 to 10, each rank reading only its own file"

# Round trips: the 5-step set resumed under other strategies and device counts, then the same
# from a job that ran with the parallel optimizer (w and w2 and their momentum split over their
# replicas: the strategy file holds their layouts). Every rank reads the same rows (the seed's
# dataset), so every device count trains on the same samples; each resumed run's losses 6 to 10
# are the single process's (1e-5 relative).
po=(--enable-parallel-optimizer --parallel-optimizer-threshold 0)
run_job first5_po --epochs 1 --steps-per-epoch 5 --strategy-save "$work/first5_po.json" "${po[@]}"
grep -q '"layout(dev=\[2, 4, 1\], map=((1, 0), -1))"' "$work/first5_po.json" ||
  fail "with the parallel optimizer w's layout is not split 8 ways by rows: $(cat "$work/first5_po.json")"
for source in first5 first5_po; do
  # ranks|the first MatMul's strategy|po (the resumed job runs with the parallel optimizer)
  for target in "8|((4, 2), (2, 1))|" "8|((4, 2), (2, 1))|po" "4|((2, 2), (2, 1))|" \
                "2|((2, 1), (1, 1))|" "6|((2, 1), (1, 1))|po" "1||"; do
    IFS='|' read -r n strategy extra <<< "$target"
    name=${source}_to_$n${extra:+_po}
    args=(--epochs 2 --steps-per-epoch 5 --resume "$work/$source" --resume-strategy "$work/$source.json")
    [ -n "$extra" ] && args+=("${po[@]}")
    if [ "$n" = 1 ]; then
      mkdir "$work/$name"
      (cd "$work/$name" && timeout 60 "$bin/sharding_propagation" "${args[@]}") > "$work/$name.out" 2>&1 ||
        { cat "$work/$name.out"; fail "$name failed"; }
      next5_losses "$name" "$work/$name.out"
    else
      WORKERS=$n run_job "$name" "${args[@]}" --matmul-strategy "$strategy"
      next5_losses "$name" "$work/$name"/log_output/worker_*.log
    fi
  done
  echo "ok: $source's set resumed on 8 ranks under ((4, 2), (2, 1)) (with and without the parallel optimizer), on 4, 2, 6 and 1: the single process's losses 6 to 10"
done
# A one-process run into the job's folder would mix its files with the job's: refused.
if (cd "$work" && timeout 60 "$bin/sharding_propagation" --epochs 1 --ckpt-dir "$work/first5") \
  > "$work/mixed.out" 2>&1; then
  fail "a one-process run saved into the 8-rank job's checkpoint folder"
fi
grep -q "saved by rank 0 of a job of 8 ranks" "$work/mixed.out" ||
  fail "a one-process run into the job's folder said: $(cat "$work/mixed.out")"
echo "ok: a one-process run refuses to write into the 8-rank job's checkpoint folder"

run_job replay --strategy-load "$work/strategy.json"
check_ranks "cleave-run 8 workers from the strategy file" "$work"/replay/log_output/worker_*.log
cmp -s <(grep -h "loss is" "$work/job/log_output/worker_0.log") <(grep -h "loss is" "$work/replay/log_output/worker_0.log") ||
  fail "the run from the strategy file prints other losses"

# Hand-started, as the seed's users start a job without a launcher: one scheduler and 8 workers,
# the same program, told their role by MS_ROLE.
mkdir "$work/ms"
port=$(free_port)
pids=()
(cd "$work/ms" && MS_ROLE=MS_SCHED MS_WORKER_NUM=8 MS_SCHED_HOST=127.0.0.1 MS_SCHED_PORT=$port \
  exec timeout 120 "$bin/sharding_propagation" > sched.log 2>&1) &
pids+=($!)
for r in 0 1 2 3 4 5 6 7; do
  (cd "$work/ms" && MS_ROLE=MS_WORKER MS_WORKER_NUM=8 MS_SCHED_HOST=127.0.0.1 MS_SCHED_PORT=$port \
    exec timeout 120 "$bin/sharding_propagation" > "worker_$r.log" 2>&1) &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || { tail -n 5 "$work"/ms/*.log; fail "the hand-started MS_* job failed"; }
done
check_ranks "hand-started MS_* job, 8 workers" "$work"/ms/worker_*.log
[ -f "$work/ms/saved_graph/rank_7/train_step_0_rank7/06_step_parallel_end.ir" ] ||
  fail "the hand-started job wrote no rank 7 dumps under $work/ms/saved_graph/rank_7"

if command -v mpirun > /dev/null; then
  (cd "$work" && EXEC_PATH=$work NP=8 timeout 120 "$here/run_with_mpi.sh") > "$work/mpi.out" 2>&1 || {
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
