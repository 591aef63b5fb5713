#!/usr/bin/env bash
# Usage: scripts/fuzz.sh SECONDS [target...]
#
# Builds the libFuzzer targets of fuzz/ in build/asan (clang 14, ASan and UBSan, CLEAVE_FUZZ=ON:
# the build scripts/sanitize.sh address,undefined makes and tests; install clang with
# scripts/install_fuzz_deps.sh) and runs each named target (default: all of them), one after the
# other, for SECONDS each, in one process on one core. A target starts from its seed corpus
# (fuzz/corpus/<target>/) and its regressions (fuzz/regressions/<target>/); the inputs it finds
# go to build/asan/fuzz/corpus/<target>/, a crash to build/asan/fuzz/crashes/<target>/. Prints each
# target's executions; exits non-zero when a target crashed.
#
#   scripts/fuzz.sh 60                       # every target for a minute
#   scripts/fuzz.sh 600 checkpoint_ckpt planner
#   scripts/fuzz.sh 0                        # build only (ctest -L fuzz replays the corpora)
#
# Environment: CLEAVE_JOBS  compile jobs (default: the number of CPUs); CLEAVE_SANITIZE_OPT as for
# scripts/sanitize.sh; CLEAVE_FUZZ_RUNS  stop a target after this many executions when that
# comes before SECONDS (libFuzzer's -runs):
#   CLEAVE_FUZZ_RUNS=1000000 scripts/fuzz.sh 7200     # a million inputs each, at most 2 h each
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
seconds=$1
shift
runs=${CLEAVE_FUZZ_RUNS:--1}
if ! [[ $runs =~ ^-?[0-9]+$ ]]; then
  echo "fuzz.sh: CLEAVE_FUZZ_RUNS is '$runs'; expected a number of executions" >&2
  exit 2
fi
build_dir=build/asan
jobs=${CLEAVE_JOBS:-$(nproc)}
if ! command -v clang++-14 >/dev/null 2>&1; then
  echo "fuzz.sh: clang++-14 not found; run scripts/install_fuzz_deps.sh (as root)" >&2
  exit 2
fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
if [ ! -f "$build_dir/build.ninja" ] || ! grep -qx "CLEAVE_FUZZ:BOOL=ON" "$build_dir/CMakeCache.txt"; then
  # The configuration of scripts/sanitize.sh address,undefined with clang.
  debug_flags="${CLEAVE_SANITIZE_OPT:--O1} -gline-tables-only"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="$debug_flags" \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCLEAVE_SANITIZE=address,undefined -DCLEAVE_FUZZ=ON \
    -DCLEAVE_WITH_CUDA=OFF -DCLEAVE_BUILD_BENCH=OFF
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzzer.cc; do
    t=$(basename "$f" _fuzzer.cc)
    targets+=("$t")
  done
fi
for t in "${targets[@]}"; do
  if [ ! -f "fuzz/${t}_fuzzer.cc" ]; then
    echo "fuzz.sh: no target '$t' (fuzz/${t}_fuzzer.cc); the targets are:" \
         "$(cd fuzz && ls *_fuzzer.cc | sed 's/_fuzzer.cc//' | tr '\n' ' ')" >&2
    exit 2
  fi
done
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]/%/_fuzzer}"
[ "$seconds" = 0 ] && exit 0

# A sanitizer report or a crash stops the target; UBSan's checks are fatal (-fno-sanitize-recover).
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export OMP_NUM_THREADS=1
status=0
summary=()
for t in "${targets[@]}"; do
  corpus=$build_dir/fuzz/corpus/$t
  crashes=$build_dir/fuzz/crashes/$t
  mkdir -p "$corpus" "$crashes"
  seeds=()
  for d in fuzz/corpus/$t fuzz/regressions/$t; do [ -d "$d" ] && seeds+=("$d"); done
  log=$build_dir/fuzz/$t.log
  echo "== $t: $seconds s (log: $log)"
  rc=0
  start=$SECONDS
  # One process on one core: libFuzzer's default. (-jobs=1 would run the same in a child process
  # that logs to ./fuzz-0.log.)
  "$build_dir/fuzz/${t}_fuzzer" -max_total_time="$seconds" -runs="$runs" -print_final_stats=1 \
    -rss_limit_mb=4096 -timeout=10 -artifact_prefix="$crashes/" "$corpus" "${seeds[@]}" \
    >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  if [ $rc -ne 0 ]; then
    status=1
    summary+=("$t: CRASHED after ${execs:-?} executions (exit $rc): $(ls "$crashes" | head -3 | tr '\n' ' ')")
    tail -40 "$log"
  else
    summary+=("$t: ${execs:-?} executions in $((SECONDS - start)) s, no crash")
  fi
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
