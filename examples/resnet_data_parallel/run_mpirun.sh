#!/usr/bin/env bash
# Seed 001 under Open MPI: NP (default 2) ranks of resnet_data_parallel, run in the execution
# folder $EXEC_PATH (default: out/resnet_data_parallel at the repository root, ignored by git),
# each rank's output in LOG_DIR (default log_output/ in the execution folder)/1/rank.<R>/stdout.
# Arguments go to the program.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/resnet_data_parallel" --help ;; esac
done
if [ ! -x "$bin/resnet_data_parallel" ] || [ ! -x "$bin/cleave-datagen" ]; then
  "$root/scripts/build.sh" Release
fi
# shellcheck source=../common/data.sh
CLEAVE_DATASET=cifar10 source "$root/examples/common/data.sh"
example=resnet_data_parallel
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

mpi_args=(-n "${NP:-2}" --oversubscribe --bind-to none --output-filename "$log_dir"
  -x DATA_PATH)
if [ "$(id -u)" = 0 ]; then mpi_args+=(--allow-run-as-root); fi
cd "$execute_path"
exec mpirun "${mpi_args[@]}" "$bin/resnet_data_parallel" "$@"
