#!/usr/bin/env bash
# --resume DIR of the seed-000 examples: a run of 1 epoch saved with --checkpoint-dir and resumed
# to 2 epochs prints the same epoch-2 losses as a run of 2 epochs without a stop, on one process
# (lenet) and as the placed job of the seed's run.sh (lenet_place, 5 workers, every worker
# resuming from the file its rank saved). A folder without checkpoints is a clear error.
# Usage: lenet_resume_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID CLEAVE_JOB_TOKEN
export CLEAVE_BIN_DIR=$bin OMP_NUM_THREADS=1
# shellcheck source=../common/test_lib.sh
source "$here/../common/test_lib.sh"

"$bin/cleave-datagen" mnist --out "$work/data" --train 320 --test 64 > /dev/null
export DATA_PATH=$work/data/MNIST_Data
epoch2() { grep "^epoch: 2 step: .*loss is" "$1"; }

# One process.
"$bin/lenet" --epochs 2 > "$work/full.out" 2>&1 || fail "lenet --epochs 2: $(tail -n 3 "$work/full.out")"
"$bin/lenet" --epochs 1 --checkpoint-dir "$work/ck" > "$work/first.out" 2>&1 || fail "lenet --epochs 1"
"$bin/lenet" --epochs 2 --resume "$work/ck" > "$work/resumed.out" 2>&1 ||
  fail "lenet --resume: $(tail -n 3 "$work/resumed.out")"
grep -q "resuming from $work/ck/lenet-1_10.ckpt (epoch 1, step 10)" "$work/resumed.out" ||
  fail "lenet --resume: no resume line: $(head -n 3 "$work/resumed.out")"
[ "$(epoch2 "$work/resumed.out" | wc -l)" -eq 10 ] || fail "lenet --resume: not 10 steps of epoch 2"
diff <(epoch2 "$work/full.out") <(epoch2 "$work/resumed.out") || fail "lenet --resume: other losses"
if grep -q "^epoch: 1 " "$work/resumed.out"; then fail "lenet --resume trained epoch 1 again"; fi
echo "ok: lenet --resume continues the same losses"

rc=0
"$bin/lenet" --epochs 2 --resume "$work/empty" > "$work/empty.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "lenet --resume of a missing folder exited $rc"
grep -q "latest_checkpoint: '$work/empty' is not a folder" "$work/empty.out" ||
  fail "lenet --resume of a missing folder: $(cat "$work/empty.out")"

# The placed job of the seed's run.sh: worker 0 prints the losses.
"$bin/lenet_place" --epochs 2 > "$work/place_full.out" 2>&1 || fail "lenet_place --epochs 2"
MS_WORKER_NUM=5 MS_SCHED_PORT=$(free_port) EXEC_PATH=$work/e1 \
  "$here/../lenet_place/run.sh" --epochs 1 --checkpoint-dir "$work/pck" > "$work/e1.out" 2>&1 ||
  fail "run.sh --epochs 1: $(cat "$work/e1.out")"
MS_WORKER_NUM=5 MS_SCHED_PORT=$(free_port) EXEC_PATH=$work/e2 \
  "$here/../lenet_place/run.sh" --epochs 2 --resume "$work/pck" > "$work/e2.out" 2>&1 ||
  fail "run.sh --resume: $(cat "$work/e2.out")"
w0=$work/e2/worker_0/worker_0.log
grep -q "resuming from $work/pck/rank_0/lenet-1_10.safetensors (epoch 1, step 10)" "$w0" ||
  fail "run.sh --resume: worker 0 did not resume: $(head -n 3 "$w0")"
[ "$(epoch2 "$w0" | wc -l)" -eq 10 ] || fail "run.sh --resume: not 10 steps of epoch 2"
awk 'NR == FNR { ref[FNR] = $NF; next }
     { d = $NF - ref[FNR]; if (d < 0) d = -d; m = ref[FNR] < 0 ? -ref[FNR] : ref[FNR]
       if (d > 1e-5 * m) { print "step " FNR ": " $NF " vs " ref[FNR]; bad = 1 } }
     END { exit bad }' <(epoch2 "$work/place_full.out") <(epoch2 "$w0") ||
  fail "run.sh --resume: worker 0's epoch-2 losses differ from one process's"
echo "ok: the placed job resumed from every rank's checkpoint with the same losses"
echo PASS
