#!/usr/bin/env bash
# Seed 003's run_with_mpi.sh: `mpirun -n 8` in the folder device/ (made afresh) of the execution
# folder $EXEC_PATH (default: out/sharding_propagation at the repository root, ignored by git):
# the ranks' output in device/train.log, checkpoints in device/<rank id>/, graphs in
# device/saved_graph/rank_<R>/. Arguments go to the program.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/sharding_propagation" ]; then
  "$root/scripts/build.sh" Release
fi
command -v mpirun > /dev/null || { echo "run_with_mpi.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
example=sharding_propagation
source "$root/examples/common/exec_path.sh"
rm -rf "${execute_path:?}/device"
mkdir "$execute_path/device"
cd "$execute_path/device"
mpi_args=(-n "${NP:-8}" --oversubscribe --bind-to none)
if [ "$(id -u)" = 0 ]; then mpi_args+=(--allow-run-as-root); fi
echo "run_with_mpi.sh: training in $(pwd); output in $(pwd)/train.log"
mpirun "${mpi_args[@]}" "$bin/sharding_propagation" "$@" > train.log 2>&1
