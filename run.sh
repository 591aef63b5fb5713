#!/usr/bin/env bash
# Sets everything up and runs the main job: installs missing Debian packages
# (scripts/install_deps.sh), builds build/Release (scripts/build.sh), then runs seed 000's
# distributed graph partition (examples/lenet_place/run.sh): LeNet on MNIST with fc1, fc2, fc3,
# conv1 and conv2 placed on workers 0..4 of a job of one scheduler and 8 workers on this machine,
# 10 epochs, generating MNIST with cleave-datagen on the first run unless DATA_PATH is set. The
# processes' output goes to out/lenet_place/{sched,worker_N}/ (EXEC_PATH changes it); at the end
# the script prints worker 0's accuracy line. Arguments are passed to the program; see
# ./run.sh --help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

scripts/install_deps.sh
scripts/build.sh Release

exec examples/lenet_place/run.sh "$@"
