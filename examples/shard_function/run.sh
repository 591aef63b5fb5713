#!/usr/bin/env bash
# Seed 004 under cleave-run: a scheduler and WORKER_NUM (default 8) workers on this host. The
# processes run in the execution folder $EXEC_PATH (default: out/shard_function at the repository
# root, ignored by git): logs in LOG_DIR (default log_output/ in the execution folder)/worker_<R>.log,
# graphs (--save-graphs) in saved_graph/rank_<R>/. Arguments go to the program (--help lists them).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/shard_function" ] || [ ! -x "$bin/cleave-run" ]; then
  "$root/scripts/build.sh" Release
fi
for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/shard_function" --help ;; esac
done

example=shard_function
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

cd "$execute_path"
exec "$bin/cleave-run" --worker_num "${WORKER_NUM:-8}" --master_port "${MASTER_PORT:-8139}" \
  --log_dir "$log_dir" -- "$bin/shard_function" "$@"
