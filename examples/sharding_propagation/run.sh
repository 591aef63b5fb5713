#!/usr/bin/env bash
# Seed 003 under cleave-run: a scheduler and WORKER_NUM (default 8) workers on this host, logs in
# LOG_DIR (default log_output)/worker_<R>.log, graphs in saved_graph/rank_<R>/, checkpoints in
# <R>/. Arguments go to the program (--help lists them). The MS_* variables of a hand-started job
# work too: see README.md.
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
exec "$bin/cleave-run" --worker_num "${WORKER_NUM:-8}" --master_port "${MASTER_PORT:-8119}" \
  --log_dir "${LOG_DIR:-log_output}" -- "$bin/sharding_propagation" "$@"
