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
#
# The build folder is build/asan (address, with or without undefined), build/tsan (thread) or
# build/ubsan (undefined alone): Debug with -O1, CUDA off (the sanitizers do not see inside GPU
# kernels, and the GPU tests skip without it). The suppressions in scripts/sanitizers/ cover
# third-party code only, each with its reason. Under TSan OMP_NUM_THREADS=1: libgomp is not
# instrumented, so its barriers would look like races in cleave's parallel loops.
#
# Environment:
#   CLEAVE_JOBS                 compile jobs (default: the number of CPUs)
#   CLEAVE_TEST_JOBS            tests run in parallel (default 2)
#   CLEAVE_SANITIZE_BUILD_ONLY  1: configure and build, run nothing
# Extra ctest arguments (-L, -LE, -R, ...) pass through.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -lt 1 ]; then
  sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
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

if [ ! -f "$build_dir/build.ninja" ] ||
   ! grep -qx "CLEAVE_SANITIZE:STRING=$sanitizers" "$build_dir/CMakeCache.txt"; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
    -DCLEAVE_SANITIZE="$sanitizers" -DCLEAVE_WITH_CUDA=OFF -DCLEAVE_BUILD_BENCH=OFF
fi
cmake --build "$build_dir" -j "$jobs"
[ "${CLEAVE_SANITIZE_BUILD_ONLY:-0}" = 1 ] && exit 0

# Any report fails its test: the sanitizers stop the process with a non-zero status at their
# first report (UBSan's checks are built with -fno-sanitize-recover as well).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
case ",$sanitizers," in *,thread,*) export OMP_NUM_THREADS=1 ;; esac

exec ctest --test-dir "$build_dir" --output-on-failure -j "${CLEAVE_TEST_JOBS:-2}" "$@"
