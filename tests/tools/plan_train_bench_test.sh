#!/usr/bin/env bash
# bench/plan_train_bench under cleave-run on 2 workers (the program of `bench/run.sh search`):
# its ROW line, exactly --steps steps with --seconds 0, at least --seconds of steps otherwise in a
# count both ranks agree on (NOTE [Steady steps]: a disagreement would leave one rank waiting in
# a collective until the timeout), and a bad --seconds in words.
# Usage: plan_train_bench_test.sh BIN_DIR BENCH_DIR
set -uo pipefail
bin=$(cd "$1" && pwd)
bench=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID
# shellcheck source=../../examples/common/test_lib.sh
source "$root/examples/common/test_lib.sh"

# row ARGS...: runs the MLP on 2 workers with ARGS and prints rank 0's ROW line.
row() {
  rm -rf "$work/log"
  OMP_NUM_THREADS=1 timeout 120 "$bin/cleave-run" --worker_num 2 --master_port "$(free_port)" \
    --log_dir "$work/log" -- "$bench/plan_train_bench" --net mlp --plan megatron "$@" \
    >"$work/out" 2>&1 || fail "plan_train_bench $*: status $?: $(cat "$work/out")"
  grep -h '^ROW' "$work/log/worker_0.log" || fail "plan_train_bench $*: no ROW line: $(cat "$work/log/worker_0.log")"
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

line=$(row --steps 3 --warmup 2 --seconds 0)
[ "$(field steps "$line")" = 3 ] || fail "--seconds 0 --steps 3 measured $(field steps "$line") steps: $line"
awk -v p="$(field predicted_ms "$line")" -v m="$(field step_ms "$line")" 'BEGIN { exit !(p > 0 && m > 0) }' ||
  fail "no step time or prediction: $line"
# At least 0.2 s of steps: this MLP's step takes 1-2 ms here, so many more than --steps (no
# bound on the count itself: the test must not depend on the machine's speed).
line=$(row --steps 3 --warmup 3 --seconds 0.2)
steps=$(field steps "$line")
if ! [[ $steps =~ ^[0-9]+$ ]] || [ "$steps" -le 3 ]; then
  fail "--seconds 0.2 --steps 3 measured $steps steps: $line"
fi

out=$(timeout 60 "$bench/plan_train_bench" --seconds -1 2>&1)
rc=$?
if [ "$rc" -ne 2 ] || ! grep -qF -- "--seconds -1 is invalid; expected a number >= 0" <<<"$out"; then
  fail "--seconds -1: status $rc, output: $out"
fi
echo "plan_train_bench_test: passed"
