#!/usr/bin/env bash
# Seed 003 under cleave-run: a scheduler and WORKER_NUM (default 8) workers on this host. The
# processes run in the execution folder $EXEC_PATH (default: out/sharding_propagation at the
# repository root, ignored by git), so everything they write is there: logs in LOG_DIR (default
# log_output/ in the execution folder)/worker_<R>.log, graphs in saved_graph/rank_<R>/,
# checkpoints in <R>/, and a relative --strategy-save or --strategy-load file. Arguments go to
# the program (--help lists them). The MS_* variables of a hand-started job work too: see
# README.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

if [ ! -x "$bin/sharding_propagation" ] || [ ! -x "$bin/cleave-run" ]; then
  "$root/scripts/build.sh" Release
fi
for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/sharding_propagation" --help ;; esac
done

example=sharding_propagation
source "$root/examples/common/exec_path.sh"
log_dir=$(absolute_path "${LOG_DIR:-$execute_path/log_output}")

cd "$execute_path"
exec "$bin/cleave-run" --worker_num "${WORKER_NUM:-8}" --master_port "${MASTER_PORT:-8119}" \
  --log_dir "$log_dir" -- "$bin/sharding_propagation" "$@"
