#!/usr/bin/env bash
# Seed 000's distributed graph partition in Python (train.py) in the seed's run.sh pattern: one
# scheduler and MS_WORKER_NUM (8) workers, all running train.py, from the folders sched/ and
# worker_<N>/ of the execution folder ($EXEC_PATH, default out/python_lenet_place) with their
# output in sched/sched.log and worker_<N>/worker_<N>.log; then waits for every process and shows
# worker 0's "Accuracy is: ..." line. It is examples/lenet_place/run.sh (the C++ program's script,
# whose comment lists the variables and the failure reports) running train.py instead.
# Arguments go to train.py (--epochs, --per-print-times, --seed; --help).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${CLEAVE_BIN_DIR:-$root/build/Release/bin}
source "$root/examples/python/common/python.sh"
export EXEC_PATH=${EXEC_PATH:-$root/out/python_lenet_place}
export LENET_PLACE_PROGRAM="$python $here/train.py"
exec "$root/examples/lenet_place/run.sh" "$@"
