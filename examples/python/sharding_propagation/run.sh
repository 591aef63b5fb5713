#!/usr/bin/env bash
# Seed 003 in Python (train.py) on WORKER_NUM (default 8) workers started by cleave-run, as
# examples/sharding_propagation/run.sh runs the C++ program. The run happens in $EXEC_PATH
# (default: out/python_sharding_propagation): checkpoints in <rank>/, graphs in saved_graph/,
# logs in $LOG_DIR (default: log_output/ there). Arguments go to train.py (--epochs,
# --steps-per-epoch, --batch, --graphs, --ckpt-dir, --cleave-data; --help).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}
source "$root/examples/python/common/python.sh"

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$python" "$here/train.py" --help ;; esac
done

example=python_sharding_propagation
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

cd "$execute_path"
exec "$bin/cleave-run" --worker_num "${WORKER_NUM:-8}" --master_port "${MASTER_PORT:-8119}" \
  --log_dir "$log_dir" -- "$python" "$here/train.py" "$@"
