#!/usr/bin/env bash
# Flag and variable errors in words (NOTE [Flag errors] in tools/flags/cleave/flags.h): range
# errors of cleave-run and the examples, an unknown flag named with the closest valid one, a bad
# MS_WORKER_NUM under the seed's run.sh, and a typo under run.sh: the terminal shows the first
# failing process's error line and its log. --help shows defaults and environment variables.
# Usage: flag_errors_test.sh BIN_DIR
set -uo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID
# shellcheck source=../../examples/common/test_lib.sh
source "$root/examples/common/test_lib.sh"

# expect STATUS FRAGMENT COMMAND...: the command exits with STATUS and its output holds FRAGMENT
# (and no CLI11 range text).
expect() {
  local want=$1 fragment=$2
  shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  [ "$rc" -eq "$want" ] || fail "$*: status $rc, expected $want; output: $out"
  grep -qF -- "$fragment" <<<"$out" || fail "$*: the output lacks '$fragment': $out"
  if grep -q "not in range" <<<"$out"; then fail "$*: CLI11's range text: $out"; fi
}

expect 2 "cleave-run: --worker_num 0 is invalid; expected a positive integer" \
  "$bin/cleave-run" --worker_num 0 -- true
expect 2 "cleave-run: --master_port 70000 is invalid; expected an integer from 1 to 65535" \
  "$bin/cleave-run" --worker_num 1 --master_port 70000 -- true
expect 2 "cleave-run: unknown flag --worker-num; did you mean --worker_num?" \
  "$bin/cleave-run" --worker-num 2 -- true
expect 2 "cleave-run: --worker_num is required but was not given" "$bin/cleave-run" -- true
expect 2 "lenet_place: --micro-batches 0 is invalid; expected a positive integer" \
  "$bin/lenet_place" --micro-batches 0
expect 2 "lenet_place: --epochs abc is invalid; expected a positive integer" \
  "$bin/lenet_place" --epochs abc
expect 2 "lenet_place: --seed x is invalid; expected a non-negative integer" \
  "$bin/lenet_place" --seed x
expect 2 "lenet_place: unknown flag --epoch; did you mean --epochs? (run 'lenet_place --help'" \
  "$bin/lenet_place" --epoch 1
expect 2 "lenet_place: --epochs needs a value" "$bin/lenet_place" --epochs
expect 2 "manual_parallel: --mode fast is invalid; expected one of graph, pynative" \
  "$bin/manual_parallel" --mode fast
expect 2 "semi_auto_parallel: --steps -1 is invalid; expected a positive integer" \
  "$bin/semi_auto_parallel" --steps -1
expect 2 "cleave-datagen: unknown flag --trian; did you mean --train?" \
  "$bin/cleave-datagen" mnist --out "$work/d" --trian 3
expect 2 "cleave-datagen: --train -3 is invalid; expected a non-negative integer" \
  "$bin/cleave-datagen" mnist --out "$work/d" --train -3
expect 2 "unknown flag --frobnicate (run" "$bin/lenet" --frobnicate
# --help: defaults and the environment.
expect 0 "--epochs INT:POSITIVE=10" "$bin/lenet_place" --help
expect 0 "MS_WORKER_NUM" "$bin/lenet_place" --help
expect 0 "CLEAVE_JOB_TOKEN" "$bin/cleave-run" --help
# No sentinel shown as a default.
if "$bin/cleave-datagen" mnist --help | grep -q -- "-9223372036854775808"; then
  fail "cleave-datagen --help shows a sentinel default"
fi
if "$bin/cleave-run" --help | grep -q -- "=-1"; then fail "cleave-run --help shows -1"; fi

# The seed's run.sh: a bad MS_WORKER_NUM is refused before anything starts.
export CLEAVE_BIN_DIR=$bin DATA_PATH=$work/no_data EXEC_PATH=$work/exec
MS_WORKER_NUM=abc expect 2 "run.sh: MS_WORKER_NUM='abc' is invalid; expected a positive integer" \
  "$root/examples/lenet_place/run.sh"
MS_SCHED_PORT=99999 expect 2 "run.sh: MS_SCHED_PORT='99999' is invalid" \
  "$root/examples/lenet_place/run.sh"
# A typo under run.sh: the first failing process's error line and its log, not only statuses.
port=$(free_port)
out=$(MS_WORKER_NUM=2 MS_SCHED_PORT=$port timeout 60 "$root/examples/lenet_place/run.sh" --epoch 1 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "run.sh --epoch 1: status $rc, expected 2: $out"
grep -qE "run.sh: (scheduler|worker [01]) failed first: lenet_place: unknown flag --epoch; did you mean --epochs\?" <<<"$out" ||
  fail "run.sh --epoch 1: no first error line: $out"
grep -qE "run.sh: its log: $work/exec/(sched/sched|worker_[01]/worker_[01]).log" <<<"$out" ||
  fail "run.sh --epoch 1: no log path: $out"
echo "PASS"
