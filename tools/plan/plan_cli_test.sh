#!/usr/bin/env bash
# cleave-plan as a user runs it: a plan for each model, an IR text, the strategy file it writes,
# and the mistakes a user makes (each a clear message and the usual exit status).
#   plan_cli_test.sh CLEAVE_PLAN SOURCE_DIR CLEAVE_CALIBRATE
set -u
plan=$1
src=$2
calibrate=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect STATUS PATTERN ARGS...: runs cleave-plan ARGS, requires the exit status and a line
# matching the extended regular expression PATTERN in its output.
expect() {
  local status=$1 pattern=$2
  shift 2
  "$plan" "$@" >"$tmp/out" 2>&1
  local got=$?
  if [[ $got != "$status" ]]; then
    fail "cleave-plan $* exited $got, expected $status"
    sed 's/^/  | /' "$tmp/out" | tail -20
    return
  fi
  if ! grep -Eq -- "$pattern" "$tmp/out"; then
    fail "cleave-plan $*: no line matches '$pattern'"
    sed 's/^/  | /' "$tmp/out" | tail -20
  fi
}

# The sections of a plan.
expect 0 '^  predicted step +[0-9.]+ ms = compute [0-9.]+ ms \+ exposed communication' mlp --device-num 4
for pattern in '^  memory per rank +[0-9.]+ MiB = parameters' '^  traffic per rank' \
  '^operators: all 11, in graph order' '_backbone\.fc1\.matmul +MatMul' \
  '^runner-ups:' '^  1\. search cost [0-9.]+ ms \(\+[0-9.]+%\): ' '^reference: every op that has no given strategy' \
  '^cleave-plan: done in'; do
  grep -Eq -- "$pattern" "$tmp/out" || fail "mlp plan: no line matches '$pattern'"
done
# The searched plan is never costlier than the default strategies (the search's optimum).
cost=$(sed -n 's/^  search cost *\([0-9.]*\) ms.*/\1/p' "$tmp/out" | head -1)
ref=$(sed -n 's/^reference: .*search cost \([0-9.]*\) ms.*/\1/p' "$tmp/out")
awk -v c="$cost" -v r="$ref" 'BEGIN { exit !(c > 0 && c <= r) }' ||
  fail "the chosen plan costs $cost ms, the default strategies $ref ms"

expect 0 'training step on 3 devices' lenet --device-num 3 --batch-per-device 2
expect 0 '^operators: all [0-9]+, in graph order' transformer --device-num 2 --layers 1 --hidden 32 \
  --heads 2 --seq 8 --batch-per-device 2 --ops 0
grep -Eq '_backbone\.block0\.q\.matmul +MatMul' "$tmp/out" || fail "transformer: no q projection listed"
expect 0 'evaluation step on 4 devices' mlp --device-num 4 --eval --runner-ups 0
grep -q '^runner-ups' "$tmp/out" && fail "--runner-ups 0 printed runner-ups"
expect 0 'optimizer state 0\.00 MiB' mlp --device-num 2 --optimizer sgd
# level 1 (memory): the plan holds no more bytes per rank than level 2's (speed).
mem1=$("$plan" mlp --device-num 8 --level 1 --runner-ups 0 | sed -n 's/^  memory per rank *\([0-9.]*\) MiB.*/\1/p' | head -1)
mem2=$("$plan" mlp --device-num 8 --level 2 --runner-ups 0 | sed -n 's/^  memory per rank *\([0-9.]*\) MiB.*/\1/p' | head -1)
awk -v a="$mem1" -v b="$mem2" 'BEGIN { exit !(a > 0 && a <= b) }' ||
  fail "level 1 plans $mem1 MiB per rank, level 2 $mem2 MiB"
expect 0 'level 0 \(computation over communication\)' mlp --device-num 4 --level 0 --runner-ups 0
expect 2 '--level 3 is invalid' mlp --device-num 4 --level 3
# A job whose ranks share one host: said, and costed as the job's own search costs it (more
# ranks than the profile's cores: a slower step than with cores of their own).
expect 0 '^  64 ranks on a host of [0-9]+ cores: computation costed [0-9.]+ times slower, collectives as ranks sharing cores' \
  lenet --device-num 64 --ranks-per-host 64 --runner-ups 0
shared=$(sed -n 's/^  predicted step *\([0-9.]*\) ms.*/\1/p' "$tmp/out" | head -1)
own=$("$plan" lenet --device-num 64 --runner-ups 0 | sed -n 's/^  predicted step *\([0-9.]*\) ms.*/\1/p' | head -1)
awk -v a="$shared" -v b="$own" 'BEGIN { exit !(a > b && b > 0) }' ||
  fail "64 ranks sharing a host predicted $shared ms, with cores of their own $own ms"
expect 2 '--ranks-per-host 8 is more than --device-num 4; expected at most the job' lenet \
  --device-num 4 --ranks-per-host 8
expect 2 '--ranks-per-host' lenet --device-num 4 --ranks-per-host -1
expect 1 'needs at least one operator with a strategy' mlp --device-num 4 \
  --search-mode sharding_propagation

# An IR text: seed 001's traced ResNet-50, read whole by every rank.
golden=$src/tests/runtime/golden/seeds/001_resnet50_data_parallel/train_step/01_trace.ir
expect 0 'inputs read whole by every rank' --graph "$golden" --device-num 2 --runner-ups 1

# The strategy file it writes is one a job can load.
expect 0 'wrote the strategies to' mlp --device-num 4 --save-strategy "$tmp/strategy.json"
grep -q '"fc1.matmul"\|fc1.matmul' "$tmp/strategy.json" 2>/dev/null ||
  fail "the strategy file names no fc1.matmul: $(head -c 300 "$tmp/strategy.json" 2>&1)"

# Given strategies: propagation spreads them; the search keeps them (marked * in the list).
expect 0 'propagated in' mlp --device-num 4 --search-mode sharding_propagation \
  --load-strategy "$tmp/strategy.json"
expect 0 '[0-9]+ strategies given by' mlp --device-num 4 --load-strategy "$tmp/strategy.json"
grep -Eq '\) \* +[0-9.]+ ms' "$tmp/out" || fail "given strategies are not marked with *"
expect 1 'strategy.*device' mlp --device-num 2 --load-strategy "$tmp/strategy.json"

# --time-ops: LeNet's product and convolution slices timed into a profile of this machine, which
# the plan then uses (c = t in the list) and a later plan reads back.
"$calibrate" --quick -o "$tmp/here.json" >/dev/null 2>&1 || fail "cleave-calibrate --quick failed"
expect 0 '^  timed [0-9]+ op slices with 1 thread in' lenet --device-num 2 --batch-per-device 4 \
  --profile "$tmp/here.json" --time-ops "$tmp/timed.json" --ops 0
grep -Eq '_backbone\.conv2\.conv2d +Conv2D +\(\(.*\)\) +[0-9.]+ ms +t ' "$tmp/out" ||
  fail "--time-ops: conv2 is not costed by its timing (c = t)"
grep -Eq '_backbone\.relu\.relu +ReLU +\(\(.*\)\) +[0-9.]+ ms +3 ' "$tmp/out" ||
  fail "--time-ops: a ReLU is no longer costed by the curve (c = 3)"
grep -q '"ops"' "$tmp/timed.json" || fail "--time-ops wrote no op slices to the profile"
expect 0 '_backbone\.fc1\.matmul +MatMul +\(\(.*\)\) +[0-9.]+ ms +t ' lenet --device-num 2 \
  --batch-per-device 4 --profile "$tmp/timed.json" --ops 0
expect 1 '--time-ops .*needs --profile FILE, a profile cleave-calibrate measured on this machine' \
  lenet --device-num 2 --time-ops "$tmp/never.json"
sed 's/"cpu_model": "[^"]*"/"cpu_model": "Another CPU"/' "$tmp/here.json" >"$tmp/other.json"
expect 1 'was measured on another machine \(CPU "Another CPU" in the profile' lenet --device-num 2 \
  --profile "$tmp/other.json" --time-ops "$tmp/never.json"
[[ -e "$tmp/never.json" ]] && fail "a refused --time-ops wrote its file"
expect 1 'cleave-plan: .*no/dir' lenet --device-num 2 --batch-per-device 4 \
  --profile "$tmp/here.json" --time-ops "$tmp/no/dir/t.json"

# Mistakes.
expect 2 'nothing to plan; expected a model' --device-num 4
expect 2 'both a model and --graph given' mlp --graph "$golden" --device-num 4
expect 2 'resnet5' resnet5 --device-num 4
expect 2 '--device-num' mlp
expect 2 '--device-num 0 is invalid' mlp --device-num 0
expect 2 'dynamic_programing' mlp --device-num 4 --search-mode dynamic_programing
expect 1 'no/such.ir' --graph "$tmp/no/such.ir" --device-num 4
printf 'not an IR text\n' >"$tmp/bad.ir"
expect 1 'bad.ir:1' --graph "$tmp/bad.ir" --device-num 4
expect 1 'cleave-plan: .*profile' mlp --device-num 4 --profile "$tmp/missing.json"
expect 1 'hidden 30 is not divisible by heads 4' transformer --device-num 2 --hidden 30 --heads 4

if ((fails > 0)); then
  echo "$fails check(s) failed"
  exit 1
fi
echo "cleave-plan: every check passed"
