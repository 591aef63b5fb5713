#!/usr/bin/env bash
# Sets everything up and runs the main job: installs missing Debian packages
# (scripts/install_deps.sh), builds build/Release (scripts/build.sh), then trains the seed's
# LeNet-5 on random data (examples/lenet_random). Arguments are passed to the program; see
# ./run.sh --help.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

scripts/install_deps.sh
scripts/build.sh Release

program=build/Release/bin/lenet_random
if [ ! -x "$program" ]; then
  echo "run.sh: $program was not built: the nn/optim layers it links against have no" \
    "implementation in this checkout yet (see the configure output of scripts/build.sh)" >&2
  exit 1
fi
exec "$program" "$@"
