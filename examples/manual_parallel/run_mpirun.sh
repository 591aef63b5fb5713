#!/usr/bin/env bash
# Seed 002's manual data parallelism (examples/manual_parallel/main.cc) on 8 processes started by
# mpirun, as the seed's run.sh does: `mpirun -n 8 --output-filename log_output`.
#
# Everything the run writes goes under the execution folder $EXEC_PATH (default:
# out/manual_parallel at the repository root, ignored by git), which mpirun runs in. Each rank's
# output lands in log_output/1/rank.<N>/stdout (and stderr) there with OpenMPI 4.1, the seed's
# layout (the "1" is the job number OpenMPI gives the launched application). Builds, data
# (DATA_PATH) and arguments as in run.sh; NP (default 8) processes, LOG_DIR (default
# log_output/ in the execution folder). Adds --oversubscribe (more ranks than cores) and
# --allow-run-as-root when root.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/manual_parallel" ] || [ ! -x "$bin/cleave-datagen" ]; then
  "$root/scripts/build.sh" Release
fi

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/manual_parallel" --help ;; esac
done

source "$root/examples/common/data.sh"
example=manual_parallel
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

mpi_args=(-n "${NP:-8}" --oversubscribe --bind-to none --output-filename "$log_dir"
  -x DATA_PATH)
if [ "$(id -u)" = 0 ]; then mpi_args+=(--allow-run-as-root); fi
cd "$execute_path"
exec mpirun "${mpi_args[@]}" "$bin/manual_parallel" "$@"
