#!/usr/bin/env bash
# Seed 002's manual data parallelism (examples/manual_parallel/main.cc) on 8 workers started by
# cleave-run (dynamic networking: a scheduler and 8 workers on this host).
#
# Builds build/Release first when the programs are missing. Without DATA_PATH, generates MNIST
# (cleave-datagen mnist) on the first run into $CLEAVE_DATA_DIR (default: datasets/ at the
# repository root). Everything the run writes goes under the execution folder $EXEC_PATH
# (default: out/manual_parallel at the repository root, ignored by git), which the processes run
# in. Logs: $LOG_DIR (default: log_output/ in the execution folder) holds scheduler.log and
# worker_<rank>.log. WORKER_NUM (default 8) must divide the batch of 32.
# Arguments go to the program (--epochs, --num-samples, --per-print-times, --seed,
# --no-grad-mean; --help), e.g. `run.sh --epochs 1 --num-samples 640` for 20 steps.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/manual_parallel" ] || [ ! -x "$bin/cleave-datagen" ] || [ ! -x "$bin/cleave-run" ]; then
  "$root/scripts/build.sh" Release
fi

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/manual_parallel" --help ;; esac
done

source "$root/examples/common/data.sh"
example=manual_parallel
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

cd "$execute_path"
exec "$bin/cleave-run" --worker_num "${WORKER_NUM:-8}" --master_port "${MASTER_PORT:-8118}" \
  --log_dir "$log_dir" -- "$bin/manual_parallel" "$@"
