#!/usr/bin/env bash
# CTest (consumer_package, consumer_pkgconfig): installs a build of cleave into a temporary prefix
# with `cmake --install`, builds this folder's program against that prefix alone, runs it, and
# checks that its loss falls (and that the installed Python package imports and trains); then builds cuda_tensor.cc the same way and checks that a CUDA build
# of cleave installs its CUDA allocator in it.
#
# Usage: package_test.sh BUILD_DIR cmake|pkg-config
#   cmake       configures and builds examples/consumer/CMakeLists.txt (find_package(cleave))
#   pkg-config  compiles main.cc with one g++ command line and `pkg-config --cflags --libs cleave`
set -euo pipefail

build_dir=${1:?usage: package_test.sh BUILD_DIR cmake|pkg-config}
how=${2:?usage: package_test.sh BUILD_DIR cmake|pkg-config}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build_dir" --prefix "$tmp/prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; echo "package_test: cmake --install $build_dir failed" >&2; exit 1; }
pc=$(find "$tmp/prefix" -name cleave.pc -print -quit)
[ -n "$pc" ] || { echo "package_test: cmake --install wrote no cleave.pc under $tmp/prefix" >&2; exit 1; }

# The Python package, when this build has it: importable from the prefix alone (its
# lib/python3.X/{dist,site}-packages), and it trains.
package=$(find "$tmp/prefix" -path "*-packages/cleave/__init__.py" -print -quit)
if [ -n "$package" ] && [ -x /usr/bin/python3 ]; then
  PYTHONPATH=$(dirname "$(dirname "$package")") /usr/bin/python3 -c '
import numpy as np, cleave as ms
from cleave import nn
assert ms.__file__.startswith("'"$tmp/prefix"'"), ms.__file__
net = nn.Dense(3, 2)
step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
x, y = ms.Tensor(np.ones((4, 3), np.float32)), ms.Tensor(np.zeros((4, 2), np.float32))
losses = [float(step(x, y)) for _ in range(3)]
assert losses[-1] < losses[0], losses
print("package_test: the installed Python package imports and trains:", ms.__file__)' ||
    { echo "package_test: the installed Python package does not work" >&2; exit 1; }
fi

# The compiler the package was built with: its OpenMP runtime and sanitizer runtime are the ones
# a program linking the static libraries needs (a clang build's objects call libomp's __kmpc_*,
# which g++'s -fopenmp does not provide).
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
cxx=${cxx:-g++}

case "$how" in
  cmake)
    cmake -S "$src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" ||
      { cat "$tmp/configure.log"; echo "package_test: configuring $src failed" >&2; exit 1; }
    cmake --build "$tmp/build" >"$tmp/build.log" ||
      { cat "$tmp/build.log"; echo "package_test: building $src failed" >&2; exit 1; }
    program=$tmp/build/consumer
    cuda_program=$tmp/build/cuda_tensor
    ;;
  pkg-config)
    export PKG_CONFIG_PATH=$(dirname "$pc")
    program=$tmp/consumer
    cuda_program=$tmp/cuda_tensor
    pkg-config --exists --print-errors cleave
    "$cxx" -std=c++20 -O2 "$src/main.cc" -o "$program" $(pkg-config --cflags --libs cleave)
    "$cxx" -std=c++20 -O2 "$src/cuda_tensor.cc" -o "$cuda_program" $(pkg-config --cflags --libs cleave)
    ;;
  *)
    echo "package_test: unknown way to build '$how'; expected cmake or pkg-config" >&2
    exit 2
    ;;
esac

"$program" | tee "$tmp/run.log"
# "step N: loss X", one line per step: the last loss must be below the first.
awk '/^step [0-9]+: loss / { loss = $4 + 0; if (first == "") first = loss; steps++ }
     END {
       if (steps < 2) { print "package_test: expected a loss per step, got " steps " lines"; exit 1 }
       if (!(loss < first)) { print "package_test: the loss did not fall: " first " -> " loss; exit 1 }
       print "package_test: the loss fell over " steps " steps: " first " -> " loss
     }' "$tmp/run.log"

# The collective's kernel is attached by the runtime's registrations, which a static link must not
# drop (NOTE [Registrations survive static linking] in src/parallel/rules/registrations.cc).
grep -q "^all_reduce of the last loss over this one process: " "$tmp/run.log" ||
  { echo "package_test: the program did not run its AllReduce" >&2; exit 1; }

"$cuda_program" | tee "$tmp/cuda.log"
if grep -q "CLEAVE_HAVE_CUDA" "$pc" && grep -q "has no CUDA support" "$tmp/cuda.log"; then
  echo "package_test: cleave was built with CUDA, but the CUDA allocator is missing from a program" \
    "that uses only Tensor (NOTE [The CUDA allocator in every program])" >&2
  exit 1
fi
