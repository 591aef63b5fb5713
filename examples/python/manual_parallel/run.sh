#!/usr/bin/env bash
# Seed 002's manual data parallelism in Python (train.py) on 8 workers started by cleave-run (a
# scheduler and 8 workers on this host), as examples/manual_parallel/run.sh runs the C++ program.
#
# Builds build/Release first when the package or the tools are missing. Without DATA_PATH,
# generates MNIST (cleave-datagen) into $CLEAVE_DATA_DIR (default: datasets/). The run happens in
# $EXEC_PATH (default: out/python_manual_parallel), logs in $LOG_DIR (default: log_output/ there).
# WORKER_NUM (default 8) must divide the batch of 32. Arguments go to train.py (--epochs,
# --num-samples, --per-print-times, --seed, --no-grad-mean; --help).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}
source "$root/examples/python/common/python.sh"

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$python" "$here/train.py" --help ;; esac
done

source "$root/examples/common/data.sh"
example=python_manual_parallel
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

cd "$execute_path"
exec "$bin/cleave-run" --worker_num "${WORKER_NUM:-8}" --master_port "${MASTER_PORT:-8118}" \
  --log_dir "$log_dir" -- "$python" "$here/train.py" "$@"
