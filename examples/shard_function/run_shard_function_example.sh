#!/usr/bin/env bash
# The seed's launch script: bash run_shard_function_example.sh RANK_SIZE RANK_TABLE_FILE.
# RANK_SIZE processes of shard_function on this host, each in its own folder device<i> (made
# afresh) with RANK_ID=i and DEVICE_ID=i, its environment in env<i>.log and its output in
# train.log<i>; the ranks meet through the rank table RANK_TABLE_FILE (give "-" to have
# rank_table.json written for this host). The device<i> folders are in the execution folder
# $EXEC_PATH (default: out/shard_function at the repository root, ignored by git). Further
# arguments go to the program. Waits for every rank and exits with the first failure's status.
set -euo pipefail
echo "=============================================================================================================="
echo "Please run the script as: "
echo "bash run_shard_function_example.sh RANK_SIZE RANK_TABLE_FILE"
echo "For example: bash run_shard_function_example.sh 8 rank_table_8pcs.json"
echo "It is better to use the absolute path."
echo "=============================================================================================================="
if [ $# -lt 2 ]; then
  echo "Usage: bash run_shard_function_example.sh RANK_SIZE RANK_TABLE_FILE" >&2
  exit 1
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}
RANK_SIZE=$1
table=$2
shift 2
if ! [[ "$RANK_SIZE" =~ ^[1-9][0-9]*$ ]]; then
  echo "run_shard_function_example.sh: RANK_SIZE='$RANK_SIZE' is invalid; expected a positive integer" >&2
  exit 2
fi
if [ ! -x "$bin/shard_function" ]; then
  "$root/scripts/build.sh" Release
fi
example=shard_function
source "$root/examples/common/exec_path.sh"
if [ "$table" = "-" ]; then
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
[ -f "$table" ] || { echo "run_shard_function_example.sh: rank table '$table' does not exist" >&2; exit 2; }
table=$(cd "$(dirname "$table")" && pwd)/$(basename "$table")
export RANK_TABLE_FILE=$table RANK_SIZE
export CLEAVE_RANK_TABLE_PORT=${CLEAVE_RANK_TABLE_PORT:-8149}

cd "$execute_path"
pids=()
trap 'kill "${pids[@]}" 2> /dev/null; exit 130' INT TERM
for ((i = 0; i < RANK_SIZE; i++)); do
  rm -rf "device$i"
  mkdir "device$i"
  (
    cd "device$i"
    export DEVICE_ID=$i RANK_ID=$i
    echo "start training for device $i"
    env > "env$i.log"
    exec "$bin/shard_function" "$@" > "train.log$i" 2>&1
  ) &
  pids+=($!)
done
echo "The program launch succeed, the log is under $execute_path/device0/train.log0."
status=0
for i in "${!pids[@]}"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run_shard_function_example.sh: rank $i exited with status $rc; its last lines ($execute_path/device$i/train.log$i):" >&2
    tail -n 3 "device$i/train.log$i" >&2
    [ "$status" -eq 0 ] && status=$rc
  fi
done
exit "$status"
