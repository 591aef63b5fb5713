#!/usr/bin/env bash
# Benchmarks, side by side with a peer in one run. Usage: bench/run.sh core|data [SECONDS_PER_ROW]
#   core: training-step throughput against PyTorch (Debian python3-torch), same threads.
#         Prints one line per row: BENCH <row> cleave=<samples/s> torch=<samples/s> ratio=<cleave/torch>
#   data: the seed-000 MNIST pipeline (bench/data_bench.cc) on 60000 generated images, against
#         what LeNet training on one thread consumes (core_bench lenet5_train_b32_t1):
#         BENCH mnist_pipeline_b32 cleave=<samples/s> lenet5_train_b32_t1=<samples/s>
#         headroom=<pipeline/training> (> 1: the pipeline outpaces training); then LeNet training
#         fed by the pipeline: BENCH lenet5_fed_b32_t1 cleave=<samples/s> ... wait=<fraction of
#         the run spent waiting in next() within epochs> epoch_start_wait=<... on each epoch's
#         first batch, i.e. the shuffle-buffer fill>
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
suite=${1:-core}
seconds=${2:-2}
build=$root/build/Release
if [ ! -x "$build/bench/core_bench" ] || [ ! -x "$build/bench/data_bench" ]; then
  "$root/scripts/build.sh" Release >/dev/null
fi
python=/usr/bin/python3
"$python" -c "import torch" 2>/dev/null || python=python3

case "$suite" in
  core)
    rows="lenet5_train_b32_t1 lenet5_train_b32_t2 lenet5_eval_b256_t2 mlp_train_b32_t1 mlp_train_b256_t1 twomatmul_train_b16_t1"
    for row in $rows; do
      threads=${row##*_t}
      c=$(OMP_NUM_THREADS=$threads "$build/bench/core_bench" "$row" "$seconds" | awk '{print $2}')
      t=$(OMP_NUM_THREADS=$threads "$python" "$root/bench/torch_core.py" "$row" "$seconds" | awk '{print $2}')
      ratio=$(awk -v c="$c" -v t="$t" 'BEGIN { printf "%.2f", c / t }')
      echo "BENCH $row cleave=$c torch=$t ratio=$ratio"
    done
    ;;
  data)
    train=$(OMP_NUM_THREADS=1 "$build/bench/core_bench" lenet5_train_b32_t1 "$seconds" | awk '{print $2}')
    for row in mnist_pipeline_b32 mnist_pipeline_b32_w2; do
      c=$(OMP_NUM_THREADS=1 "$build/bench/data_bench" "$row" "$seconds" | awk '{print $2}')
      headroom=$(awk -v c="$c" -v t="$train" 'BEGIN { printf "%.2f", c / t }')
      echo "BENCH $row cleave=$c lenet5_train_b32_t1=$train headroom=$headroom"
    done
    read -r _ fed waits < <(OMP_NUM_THREADS=1 "$build/bench/data_bench" lenet5_fed_b32_t1 "$seconds")
    echo "BENCH lenet5_fed_b32_t1 cleave=$fed lenet5_train_b32_t1=$train $waits"
    ;;
  *)
    echo "bench/run.sh: unknown suite '$suite'; expected: core or data" >&2
    exit 2
    ;;
esac
