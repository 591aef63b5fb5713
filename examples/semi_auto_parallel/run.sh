#!/usr/bin/env bash
# Runs examples/semi_auto_parallel under cleave-run: a scheduler and WORKER_NUM (default 8)
# workers on this host, SEMI_AUTO_PARALLEL with a strategy on every operator. Everything the run
# writes goes under the execution folder $EXEC_PATH (default: out/semi_auto_parallel at the
# repository root, ignored by git), which the processes run in. Logs: $LOG_DIR (default:
# log_output/ in the execution folder) holds scheduler.log and worker_<rank>.log. Arguments go to
# the program (--net mlp|lenet, --strategy model|data, --steps, --batch, --per-print-times;
# --help). Builds build/Release first when the programs are missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/semi_auto_parallel" ] || [ ! -x "$bin/cleave-run" ]; then
  "$root/scripts/build.sh" Release
fi
for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/semi_auto_parallel" --help ;; esac
done

example=semi_auto_parallel
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

cd "$execute_path"
exec "$bin/cleave-run" --worker_num "${WORKER_NUM:-8}" --master_port "${MASTER_PORT:-8119}" \
  --log_dir "$log_dir" -- "$bin/semi_auto_parallel" "$@"
