#!/usr/bin/env bash
# Usage: scripts/sanitize.sh SANITIZERS [ctest arguments...]
#
# Builds cleave with sanitizers and runs its tests under them, so that any sanitizer report fails
# the test that caused it. SANITIZERS is a comma list as CLEAVE_SANITIZE takes it:
#
#   scripts/sanitize.sh address,undefined            # build/asan, the whole suite
#   scripts/sanitize.sh address,undefined -LE slow   # the quick suite
#   scripts/sanitize.sh thread -L 'comm|cluster|runtime|data'   # build/tsan
#   scripts/sanitize.sh undefined                    # build/ubsan
#   CLEAVE_JOBS=1 CLEAVE_TEST_JOBS=1 scripts/sanitize.sh thread -L comm -R Shm   # some tests
#
# The build folder is build/asan (address, with or without undefined), build/tsan (thread) or
# build/ubsan (undefined alone): Debug with -O1 and line tables, CUDA off (the sanitizers do not
# see inside GPU kernels, and the GPU tests skip without it). Every run first builds the whole
# folder (all of cleave, its tests and tools: about 320 files the first time, then only what
# changed), since a test binary not built is a test CTest does not know of. They are built with
# clang 14 when it is installed (it compiles cleave about 1.7 times faster than g++ with
# sanitizers), otherwise with g++. With clang, build/asan also holds the fuzz targets
# (CLEAVE_FUZZ=ON: scripts/fuzz.sh runs them): one full build serves both, and the fuzz_* tests
# replay the fuzzers' corpora and regressions. The suppressions in scripts/sanitizers/ cover
# third-party code only, each with its reason.
#
# Reports: each sanitizer writes its report to a file of <build folder>/sanitizer-reports/
# (emptied at the start of every run), not to the test's output, because a test that captures
# its stderr, or a child process whose log the test removes, would hide it: such a test fails
# with exit status 66 (TSan) or 1 and no report in its output. After CTest the script prints
# every report of the run and exits 1 when there is one, even if every test passed (a child
# process expected to fail may have failed on a report).
#
# ThreadSanitizer: OMP_NUM_THREADS=1, because the OpenMP runtime (libgomp with g++, LLVM's libomp
# with clang) is not instrumented, so its barriers would look like races in cleave's parallel
# loops; OMP_TOOL=disabled, so that libomp does not load its TSan tool (libarcher) and print
# advice meant for multi-threaded regions. TSan slows the tests down several times: on a small
# machine run them one at a time (CLEAVE_TEST_JOBS=1), since the tests of lost ranks and
# heartbeats have time bounds.
#
# Environment:
#   CLEAVE_JOBS                 compile jobs (default: the number of CPUs)
#   CLEAVE_TEST_JOBS            tests run in parallel (default 2)
#   CLEAVE_SANITIZE_BUILD_ONLY  1: configure and build, run nothing
#   CLEAVE_SANITIZE_CXX         the compiler (default: clang++-14 when found, else g++)
#   CLEAVE_SANITIZE_OPT         the optimisation flag (default -O1) when the folder is configured
#   ASAN_OPTIONS, LSAN_OPTIONS, UBSAN_OPTIONS, TSAN_OPTIONS   appended to the script's own
# Extra ctest arguments (-L, -LE, -R, ...) pass through.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -lt 1 ]; then
  sed -n '2,/^# Extra ctest/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
sanitizers=$1
shift
case ",$sanitizers," in
  *,thread,*)
    if [[ ",$sanitizers," == *,address,* ]]; then
      echo "sanitize.sh: '$sanitizers': thread cannot be combined with address (TSan and ASan" \
           "cannot run in one process); run scripts/sanitize.sh address,undefined and" \
           "scripts/sanitize.sh thread separately" >&2
      exit 2
    fi
    build_dir=build/tsan
    ;;
  *,address,*) build_dir=build/asan ;;
  ,undefined,) build_dir=build/ubsan ;;
  *)
    echo "sanitize.sh: expected address,undefined, address, undefined or thread; got '$sanitizers'" >&2
    exit 2
    ;;
esac
jobs=${CLEAVE_JOBS:-$(nproc)}
supp=$PWD/scripts/sanitizers
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}

cxx=${CLEAVE_SANITIZE_CXX:-}
if [ -z "$cxx" ]; then
  cxx=g++
  command -v clang++-14 >/dev/null 2>&1 && cxx=clang++-14
fi
# Line tables are all the reports need; -O1 keeps the tests fast (CLEAVE_SANITIZE_OPT=-O0 builds
# in about half the time, and runs slower).
debug_flags="${CLEAVE_SANITIZE_OPT:--O1} -g1"
[[ $cxx == clang* ]] && debug_flags="${CLEAVE_SANITIZE_OPT:--O1} -gline-tables-only"
args=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="$debug_flags" -DCMAKE_CXX_COMPILER="$cxx"
      -DCLEAVE_SANITIZE="$sanitizers" -DCLEAVE_WITH_CUDA=OFF -DCLEAVE_BUILD_BENCH=OFF)
if [ "$build_dir" = build/asan ] && [[ $cxx == clang* ]] && [ "$sanitizers" = address,undefined ]; then
  args+=(-DCLEAVE_FUZZ=ON)
fi
if [ ! -f "$build_dir/build.ninja" ] ||
   ! grep -qx "CLEAVE_SANITIZE:STRING=$sanitizers" "$build_dir/CMakeCache.txt"; then
  cmake -S . -B "$build_dir" -G Ninja "${args[@]}"
fi
cmake --build "$build_dir" -j "$jobs"
[ "${CLEAVE_SANITIZE_BUILD_ONLY:-0}" = 1 ] && exit 0

# Any report fails its test: the sanitizers stop the process with a non-zero status at their
# first report (UBSan's checks are built with -fno-sanitize-recover as well). Each report goes to
# $reports/report.<program>.<pid>.
reports=$PWD/$build_dir/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
log="log_path=$reports/report:log_exe_name=1"
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1:$log${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp:$log${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:$log${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
case ",$sanitizers," in *,thread,*) export OMP_NUM_THREADS=1 OMP_TOOL=disabled ;; esac

status=0
ctest --test-dir "$build_dir" --output-on-failure -j "${CLEAVE_TEST_JOBS:-2}" "$@" || status=$?
shopt -s nullglob
found=("$reports"/report.*)
for report in "${found[@]}"; do
  echo "==== $report"
  cat "$report"
done
if [ ${#found[@]} -gt 0 ]; then
  echo "sanitize.sh: ${#found[@]} sanitizer report(s), printed above and kept in $reports" >&2
  [ "$status" = 0 ] && status=1
fi
exit "$status"
