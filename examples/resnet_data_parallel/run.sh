#!/usr/bin/env bash
# Seed 001's launch script: RANK_SIZE (default 2) processes of resnet_data_parallel on this host,
# each in its own folder device<i> (made afresh) with RANK_ID=i and DEVICE_ID=i, its environment
# in env<i>.log and its output in log<i>. The ranks meet through the rank table named by
# MINDSPORE_HCCL_CONFIG_PATH or RANK_TABLE_FILE; without one, rank_table.json is written for this
# host (seed 001's group_list layout). The device<i> folders and rank_table.json are in the
# execution folder $EXEC_PATH (default: out/resnet_data_parallel at the repository root, ignored
# by git). Arguments go to the program (--help lists them), e.g.
#   ./run.sh --image-size 32 --epoch-size 1
# DATA_PATH names the cifar-10-batches-bin folder; when unset, generated CIFAR-10 is written to
# datasets/ at the repository root on the first run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}

for arg in "$@"; do
  case "$arg" in -h | --help) exec "$bin/resnet_data_parallel" --help ;; esac
done
RANK_SIZE=${RANK_SIZE:-2}
if ! [[ "$RANK_SIZE" =~ ^[1-9][0-9]*$ ]]; then
  echo "run.sh: RANK_SIZE='$RANK_SIZE' is invalid; expected a positive integer" >&2
  exit 2
fi
if [ ! -x "$bin/resnet_data_parallel" ] || [ ! -x "$bin/cleave-datagen" ]; then
  "$root/scripts/build.sh" Release
fi
# shellcheck source=../common/data.sh
CLEAVE_DATASET=cifar10 source "$here/../common/data.sh"
example=resnet_data_parallel
source "$root/examples/common/exec_path.sh"

table=${MINDSPORE_HCCL_CONFIG_PATH:-${RANK_TABLE_FILE:-}}
if [ -z "$table" ]; then
  table=$execute_path/rank_table.json
  {
    echo '{"board_id": "0x0000", "chip_info": "cpu", "deploy_mode": "lab", "group_count": "1",'
    echo ' "group_list": [{"device_num": "'"$RANK_SIZE"'", "server_num": "1", "group_name": "",'
    echo '   "instance_count": "'"$RANK_SIZE"'", "instance_list": ['
    for ((i = 0; i < RANK_SIZE; i++)); do
      sep=$([ "$i" -lt $((RANK_SIZE - 1)) ] && echo , || true)
      echo '     {"devices": [{"device_id": "'"$i"'", "device_ip": "127.0.0.1"}], "rank_id": "'"$i"'", "server_id": "127.0.0.1"}'"$sep"
    done
    echo '   ]}], "status": "completed"}'
  } > "$table"
fi
[ -f "$table" ] || { echo "run.sh: rank table '$table' does not exist" >&2; exit 2; }
table=$(cd "$(dirname "$table")" && pwd)/$(basename "$table")
export MINDSPORE_HCCL_CONFIG_PATH=$table RANK_TABLE_FILE=$table RANK_SIZE
export CLEAVE_RANK_TABLE_PORT=${CLEAVE_RANK_TABLE_PORT:-8129}

cd "$execute_path"
echo "run.sh: each rank runs in its folder device<i> of $execute_path"
pids=()
trap 'kill "${pids[@]}" 2> /dev/null; exit 130' INT TERM
for ((i = 0; i < RANK_SIZE; i++)); do
  rm -rf "device$i"
  mkdir "device$i"
  (
    cd "device$i"
    export RANK_ID=$i DEVICE_ID=$i
    echo "start training for device $i"
    env > "env$i.log"
    exec "$bin/resnet_data_parallel" "$@" > "log$i" 2>&1
  ) &
  pids+=($!)
done

status=0
for i in "${!pids[@]}"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run.sh: rank $i exited with status $rc; its last lines ($execute_path/device$i/log$i):" >&2
    tail -n 3 "device$i/log$i" >&2
    [ "$status" -eq 0 ] && status=$rc
  fi
done
if [ "$status" -eq 0 ]; then
  for ((i = 0; i < RANK_SIZE; i++)); do grep -h "parameters fnv1a64" "device$i/log$i"; done
fi
exit "$status"
