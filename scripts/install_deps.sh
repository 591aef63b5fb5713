#!/usr/bin/env bash
# Installs the Debian 12 packages cleave builds and tests with (DESIGN.md, "Dependencies").
#
# Idempotent and offline-safe: every package is first checked with dpkg-query; when all are
# installed the script touches no network and returns at once. Otherwise, as root, it runs
# apt-get update and installs only the missing ones; as another user it prints the command to
# run and exits 1. The CUDA toolkit is not a Debian package here: the build uses it when nvcc is
# found (see README.md) and builds without it otherwise.
set -euo pipefail

packages=(
  # build; pkg-config also builds examples/consumer the way a user's own program may
  cmake ninja-build g++ ccache pkg-config
  # kernels, logging, flags, config files. Debian's oneDNN is built with its OpenCL GPU runtime:
  # its CMake package calls find_package(OpenCL), whose headers and libOpenCL.so link come from
  # ocl-icd-opencl-dev, which libdnnl-dev only recommends (and --no-install-recommends skips).
  libdnnl-dev ocl-icd-opencl-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # communication and the control plane
  libgloo-dev libopenmpi-dev openmpi-bin libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
  protobuf-compiler
  # graph dumps; PyTorch as the parity and speed peer. Debian's torch calls the system BLAS,
  # which without OpenBLAS is the slow reference BLAS (MLP training measured 10x slower): the
  # peer gets OpenBLAS so that bench/run.sh compares against a fairly configured PyTorch.
  graphviz python3-torch python3-numpy libopenblas0-openmp
  # the Python package (python/): pybind11 and the headers of Debian's Python 3
  pybind11-dev python3-dev
)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install_deps: dpkg-query not found: this is not a Debian system, so nothing is installed." >&2
  echo "install_deps: cleave needs the equivalents of these Debian 12 packages: ${packages[*]}" >&2
  exit 0
fi

# One dpkg-query for all packages; unknown packages print nothing and are missing.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null |
  awk '$2 == "installed" { print $1 }' || true)
missing=()
for p in "${packages[@]}"; do
  grep -qxF "$p" <<<"$installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install_deps: missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: not running as root; install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
echo "install_deps: installed ${missing[*]}"
