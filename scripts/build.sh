#!/usr/bin/env bash
# Usage: scripts/build.sh [Release|Debug|RelWithDebInfo] [extra cmake arguments...]
#
# Configures build/<type> with Ninja (only when it is not configured yet, or when extra cmake
# arguments are given) and builds it. Incremental: a second run with nothing changed does no
# work. CLEAVE_WITH_CUDA keeps its default (ON when nvcc is found); pass -DCLEAVE_WITH_CUDA=OFF to
# change it. Cache values stick to build/<type> across runs, as usual with CMake.
#
# Environment: CLEAVE_JOBS  parallel compile jobs (default: the number of CPUs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_type=${1:-Release}
[ $# -gt 0 ] && shift
case "$build_type" in
  Release | Debug | RelWithDebInfo | MinSizeRel) ;;
  *)
    echo "build.sh: unknown build type '$build_type'; expected Release, Debug or RelWithDebInfo" >&2
    exit 2
    ;;
esac
build_dir=build/$build_type
jobs=${CLEAVE_JOBS:-$(nproc)}

# nvcc is often installed outside PATH; let CMake find it there.
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
# Paths relative to the checkout, so that ccache hits across checkouts and build folders.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}

if [ ! -f "$build_dir/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" "$@"
fi
cmake --build "$build_dir" -j "$jobs"
