#!/usr/bin/env bash
# Seed 000's LeNet on MNIST on one process (examples/lenet/main.cc): 10 epochs with LossMonitor and
# TimeMonitor, then "Accuracy is: {'Accuracy': ...}".
#
# Builds build/Release first when the programs are missing. Without DATA_PATH, generates MNIST
# (cleave-datagen mnist: 60000 train and 10000 test images in the real IDX format) on the first
# run into $CLEAVE_DATA_DIR (default: datasets/ at the repository root) and uses it from then on.
# Arguments go to the program (--epochs, --per-print-times, --seed, --checkpoint-dir; --help).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$root/build/Release/bin

if [ ! -x "$bin/lenet" ] || [ ! -x "$bin/cleave-datagen" ]; then
  "$root/scripts/build.sh" Release
fi

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/lenet" --help ;; esac
done

if [ -z "${DATA_PATH:-}" ]; then
  data_root=${CLEAVE_DATA_DIR:-$root/datasets}
  if [ ! -d "$data_root/MNIST_Data" ]; then
    # Written to a temporary folder and moved into place, so an interrupted run leaves no half
    # data set behind.
    mkdir -p "$data_root"
    tmp=$(mktemp -d "$data_root/.mnist.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    "$bin/cleave-datagen" mnist --out "$tmp"
    mv "$tmp/MNIST_Data" "$data_root/MNIST_Data"
  fi
  export DATA_PATH=$data_root/MNIST_Data
fi

"$bin/lenet" "$@"
