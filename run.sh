#!/usr/bin/env bash
# Sets everything up and runs the main job: installs missing Debian packages
# (scripts/install_deps.sh), builds build/Release (scripts/build.sh), then runs seed 000's LeNet on
# MNIST on one process (examples/lenet/run.sh: generates MNIST with cleave-datagen on the first
# run unless DATA_PATH is set, trains 10 epochs, prints the test accuracy). Arguments are passed
# to the program; see ./run.sh --help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

scripts/install_deps.sh
scripts/build.sh Release

exec examples/lenet/run.sh "$@"
