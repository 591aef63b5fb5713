#!/usr/bin/env bash
# Seed 003 in Python (train.py) on NP (default 8) processes started by mpirun, as the seed's
# run_with_mpi.sh starts its script. Logs: $LOG_DIR (default: log_output/ in $EXEC_PATH, default
# out/python_sharding_propagation). Arguments go to train.py.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}
source "$root/examples/python/common/python.sh"

example=python_sharding_propagation
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

mpi_args=(-n "${NP:-8}" --oversubscribe --bind-to none --output-filename "$log_dir" -x PYTHONPATH)
if [ "$(id -u)" = 0 ]; then mpi_args+=(--allow-run-as-root); fi
cd "$execute_path"
exec mpirun "${mpi_args[@]}" "$python" "$here/train.py" "$@"
