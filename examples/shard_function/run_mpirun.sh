#!/usr/bin/env bash
# Seed 004 under mpirun (`mpirun -n 8`) with NP (default 8) ranks. Everything the run writes goes
# under the execution folder $EXEC_PATH (default: out/shard_function at the repository root,
# ignored by git), which mpirun runs in; OpenMPI's --output-filename writes each rank's output to
# $LOG_DIR/1/rank.<N>/stdout (default LOG_DIR: log_output/ in the execution folder). Adds
# --oversubscribe (more ranks than cores) and --allow-run-as-root when root. Arguments go to the
# program (--help).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/shard_function" ]; then
  "$root/scripts/build.sh" Release
fi
for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/shard_function" --help ;; esac
done
command -v mpirun > /dev/null || { echo "run_mpirun.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }

example=shard_function
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

mpi_args=(-n "${NP:-8}" --oversubscribe --bind-to none --output-filename "$log_dir")
if [ "$(id -u)" = 0 ]; then mpi_args+=(--allow-run-as-root); fi
cd "$execute_path"
exec mpirun "${mpi_args[@]}" "$bin/shard_function" "$@"
