#!/usr/bin/env bash
# Seed 000's LeNet on MNIST on one process (examples/lenet/main.cc): 10 epochs with LossMonitor and
# TimeMonitor, then "Accuracy is: {'Accuracy': ...}".
#
# Builds build/Release first when the programs are missing. Without DATA_PATH, generates MNIST
# (cleave-datagen mnist: 60000 train and 10000 test images in the real IDX format) on the first
# run into $CLEAVE_DATA_DIR (default: datasets/ at the repository root) and uses it from then on.
# Arguments go to the program (--epochs, --per-print-times, --seed, --checkpoint-dir, --resume;
# --help). The program prints to the terminal and runs in the execution folder $EXEC_PATH
# (default: out/lenet at the repository root, ignored by git), so a relative --checkpoint-dir or
# --resume folder is there: `run.sh --checkpoint-dir ckpt` saves to out/lenet/ckpt/.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/lenet" ] || [ ! -x "$bin/cleave-datagen" ]; then
  "$root/scripts/build.sh" Release
fi

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/lenet" --help ;; esac
done

source "$root/examples/common/data.sh"
example=lenet
source "$root/examples/common/exec_path.sh"

cd "$execute_path"
exec "$bin/lenet" "$@"
