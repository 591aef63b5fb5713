#!/usr/bin/env bash
# Two builds of cleave side by side: the cleave rows of bench/run.sh core, dp and shard, each run
# ROUNDS times (default 5) alternating the builds row by row, and the median of each.
#
# Usage: bench/compare_builds.sh BASE_BUILD HEAD_BUILD [ROUNDS] [SECONDS_PER_ROW]
#   BASE_BUILD, HEAD_BUILD: build folders (build/Release of two checkouts), each with bench/ and
#   bin/ built (scripts/build.sh Release). E.g. for the commit before a refactor:
#     git worktree add ../base <commit> && (cd ../base && scripts/build.sh Release)
#     bench/compare_builds.sh ../base/build/Release build/Release
# Prints one line per row:
#   COMPARE <row> base=<median> head=<median> change=<head/base - 1, in %> unit=<unit>
# (samples/s: higher is better; _ms rows: lower is better) and the machine it ran on. Set
# SHARD_STEPS (default 300) for the MLP training rows, COMPARE_ROWS (a space-separated list of the
# rows below) to run some rows only. Nothing else should run meanwhile.
set -euo pipefail
base=$(cd "${1:?usage: compare_builds.sh BASE_BUILD HEAD_BUILD [ROUNDS] [SECONDS_PER_ROW]}" && pwd)
head=$(cd "${2:?usage: compare_builds.sh BASE_BUILD HEAD_BUILD [ROUNDS] [SECONDS_PER_ROW]}" && pwd)
rounds=${3:-5}
seconds=${4:-2}
steps=${SHARD_STEPS:-300}
for b in "$base" "$head"; do
  for f in bench/core_bench bench/dp_bench bench/shard_bench bin/cleave-run bin/semi_auto_parallel; do
    [ -x "$b/$f" ] || { echo "compare_builds: $b/$f is missing; build it (scripts/build.sh Release)" >&2; exit 2; }
  done
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }

# One measurement of `row` with build `b`, printed as a number.
measure() {  # build row
  local b=$1 row=$2
  case "$row" in
    core_*)
      local r=${row#core_}
      OMP_NUM_THREADS=${r##*_t} "$b/bench/core_bench" "$r" "$seconds" | awk '{print $2}'
      ;;
    dp_*_np1)
      local m=${row#dp_}
      m=${m%_np1}
      OMP_NUM_THREADS=1 "$b/bench/dp_bench" "$m" 32 "$seconds" | field samples_per_s
      ;;
    dp_*_np2)
      local m=${row#dp_}
      m=${m%_np2}
      rm -rf "$work/dp"
      OMP_NUM_THREADS=1 "$b/bin/cleave-run" --worker_num 2 --log_dir "$work/dp" -- \
        "$b/bench/dp_bench" "$m" 32 "$seconds" >/dev/null
      grep -h "^dp_" "$work/dp/worker_0.log" | field samples_per_s
      ;;
    shard_plan_*)
      local plan=${row#shard_plan_}
      # shellcheck disable=SC2086
      "$b/bench/shard_bench" ${plan//_/ } | field total_ms
      ;;
    shard_propagate_*)
      "$b/bench/shard_bench" propagate 8 "${row#shard_propagate_}" | field propagate_ms
      ;;
    mlp_np2_*)
      rm -rf "$work/mlp"
      OMP_NUM_THREADS=1 "$b/bin/cleave-run" --worker_num 2 --log_dir "$work/mlp" -- \
        "$b/bin/semi_auto_parallel" --strategy "${row#mlp_np2_}" --steps "$steps" \
        --per-print-times 0 >/dev/null
      grep -h "rank 0 of .*samples/s" "$work/mlp/worker_0.log" | awk '{print $5}'
      ;;
  esac
}

rows=${COMPARE_ROWS:-"core_lenet5_train_b32_t1 core_lenet5_train_b32_t2 core_lenet5_eval_b256_t2
core_mlp_train_b32_t1 core_mlp_train_b256_t1 core_twomatmul_train_b16_t1
dp_lenet_np1 dp_lenet_np2 dp_resnet_small_np1 dp_resnet_small_np2 dp_resnet50_np1 dp_resnet50_np2
shard_plan_mlp_8 shard_plan_generated_8 shard_plan_generated_1024 shard_propagate_1000
shard_propagate_10000 mlp_np2_model mlp_np2_data"}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
  "$(grep -q -m1 -w avx512f /proc/cpuinfo && echo avx512f || { grep -q -m1 -w avx2 /proc/cpuinfo && echo avx2; }); base=$base head=$head rounds=$rounds"
for row in $rows; do
  : >"$work/base" && : >"$work/head"
  for ((k = 0; k < rounds; ++k)); do
    measure "$base" "$row" >>"$work/base"
    measure "$head" "$row" >>"$work/head"
  done
  unit=samples/s
  case "$row" in shard_plan_* | shard_propagate_*) unit=ms ;; esac
  median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  awk -v r="$row" -v b="$(median "$work/base")" -v h="$(median "$work/head")" -v u="$unit" \
    'BEGIN { printf "COMPARE %s base=%s head=%s change=%+.1f%% unit=%s\n", r, b, h, (h / b - 1) * 100, u }'
done
