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

# Debian's Python imports the package from this build: a cleave.pth file in its site folder
# (/usr/local/lib/python3.X/dist-packages) names build/Release/python, so that after ./test.sh or
# ./run.sh `python3 -c "import cleave"` works (as `pip install -e` would). Only for the Release
# build, only where that folder is writable (root), and not with CLEAVE_NO_PTH=1; a package
# installed by `cmake --install` comes first where it is on the path.
if [ "$build_type" = Release ] && [ -z "${CLEAVE_NO_PTH:-}" ] && [ -x /usr/bin/python3 ] &&
  compgen -G "$build_dir/python/cleave/_cleave*.so" > /dev/null; then
  site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])' 2> /dev/null || true)
  package=$(cd "$build_dir/python" && pwd)
  if [ -n "$site" ] && { [ -w "$site" ] || { [ ! -e "$site" ] && mkdir -p "$site" 2> /dev/null; }; }; then
    if [ "$(cat "$site/cleave.pth" 2> /dev/null)" != "$package" ]; then
      echo "$package" > "$site/cleave.pth"
      echo "build.sh: /usr/bin/python3 imports cleave from $package ($site/cleave.pth)"
    fi
  fi
fi
