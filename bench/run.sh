#!/usr/bin/env bash
# Benchmarks, side by side with a peer in one run.
# Usage: bench/run.sh core|python|graph|comm|data|place|shard|dp|search|ckpt [SECONDS_PER_ROW]
# Every suite first prints MACHINE cpu="<model>" isa=<avx512|avx2|sse> cores=<N>, and appends
# those fields to each BENCH row; the suites with a PyTorch peer (core, dp) print a PEER line per
# thread count saying how the peer runs (NOTE [Peers at their best] below).
#   core: training-step throughput against PyTorch (Debian python3-torch), same threads.
#     Prints one line per row: BENCH <row> cleave=<samples/s> torch=<samples/s> ratio=<cleave/torch>
#     (the MLP's and LeNet's training rows add gemm_gflops, onednn_gflops and gemm_peak_fraction:
#     the step's matrix products and convolutions per second against oneDNN's own kernels on the
#     same work, NOTE [GEMM peak] in core_bench.cc),
#     then, per training row run on 1 and 2 threads, the second thread's gain:
#     BENCH <model>_train_b<B>_scaling cleave_t2_over_t1=.. torch_t2_over_t1=..
#   python: the LeNet-5 training step (GRAPH_MODE, batch 32, 1 and 2 threads) driven from
#     Python (bench/python_core.py) against the C++ row of core. Prints per row
#     BENCH <row> python=<samples/s> cpp=<samples/s> ratio=<python/cpp>
#   graph: GRAPH_MODE against PYNATIVE_MODE (one thread). Prints per row
#     BENCH <row> graph=<steps/s> pynative=<steps/s> ratio=<graph/pynative>
#     BENCH <row>_peak_mib graph=<MiB> pynative=<MiB>   (peak bytes of tensor storage alive)
#   comm: AllReduce, AllGather, Broadcast at 4KB..64MB and N = 2, 4, 8: cleave's gloo backend
#     against raw Gloo (ranks as threads of one process, TCP on 127.0.0.1), then cleave's mpi
#     backend against raw MPI (ranks as processes under mpirun). Prints:
#     BENCH <op>_<size>_np<N> cleave=<GB/s> gloo=<GB/s> ratio=<cleave/gloo> cleave_us=.. gloo_us=..
#     BENCH <op>_<size>_np<N> cleave=<GB/s> mpi=<GB/s> ratio=<cleave/mpi> cleave_us=.. mpi_us=..
#     then cleave's gloo backend on shared memory (ranks as processes of this host):
#     BENCH <op>_<size>_np<N> shm=<GB/s> shm_us=..
#     and point-to-point on 2 ranks (processes), a ping-pong of 4KB and 4MB: shared memory against
#     Gloo's TCP pairs (a group made with CLEAVE_COMM_SHM=0), then cleave's mpi backend against
#     raw MPI_Send / MPI_Recv under mpirun (times are half a round trip):
#     BENCH PingPong_<size>_np2 shm=<GB/s> tcp=<GB/s> ratio=<shm/tcp> shm_us=.. tcp_us=..
#     BENCH PingPong_<size>_np2 cleave=<GB/s> mpi=<GB/s> ratio=<cleave/mpi> cleave_us=.. mpi_us=..
#     (NOTE [Bandwidth in comm_bench] in bench/comm_bench.cc defines size and bandwidth.)
#     With CLEAVE_BENCH_NETNS=1, as root: AllReduce of 4 processes over two network namespaces (2
#     per host: shared memory inside, TCP between the hosts' leaders) against 4 in one (shared
#     memory only), through scripts/netns_test.sh (its case 'bench'):
#     BENCH AllReduce_<size>_np4_netns two_hosts=<GB/s> one_host=<GB/s> ratio=<two/one> two_hosts_us=.. one_host_us=..
#   data: the seed-000 MNIST pipeline (bench/data_bench.cc) on 60000 generated images, against
#         what LeNet training on one thread consumes (core_bench lenet5_train_b32_t1):
#         BENCH mnist_pipeline_b32 cleave=<samples/s> lenet5_train_b32_t1=<samples/s>
#         headroom=<pipeline/training> (> 1: the pipeline outpaces training), the same with two
#         map workers (_w2) and asked for the label or the image column only (_label, _image:
#         the placed workers 0 and 3 of seed 000 from their second epoch); then LeNet training
#         fed by the pipeline: BENCH lenet5_fed_b32_t1 cleave=<samples/s> ... wait=<fraction of
#         the run spent waiting in next() within epochs> epoch_start_wait=<... on each epoch's
#         first batch, i.e. the shuffle-buffer fill>
#   place: seed 000's placed LeNet (examples/lenet_place) under cleave-run with 8 workers
#     (OMP_NUM_THREADS=1 each), two epochs of PLACE_STEPS (default 1000) batches of 32, the second
#     measured, without and with micro-batching (M = 1, 4, 8), against the same program on one
#     process (no job, OMP_NUM_THREADS = PLACE_SINGLE_THREADS, default the core count); each M
#     runs once more with every op timed (--op-times) for bench/place_ideal.py, which replays
#     the ops as a perfect schedule on nproc cores. Prints per M
#     BENCH lenet_place_m<M> cleave=<samples/s> single=<samples/s> bubble=<fraction>
#       ideal_ratio=<ideal time / measured time> bound_ratio=<lower bound / measured time>
#       cores=<nproc> cpu_use=<CPU time / (wall x cores)>
#     (bench/README.md "place" defines them). SECONDS_PER_ROW is unused.
#   shard: the step-parallel rewrite's compile time without a cluster (bench/shard_bench.cc):
#     BENCH <graph>_d<devices> plan_ms=.. materialize_ms=.. total_ms=.. ops=.. local_ops=..
#     for the MLP on 8 devices and a generated 1000-op graph on 8 and 1024; sharding propagation
#     on generated graphs of 1000 and 10000 ops from one configured MatMul:
#     BENCH propagate_<ops>_d8 propagate_ms=.. ops=.. derived=.. rounds=..; then training the MLP
#     (examples/semi_auto_parallel) on 2 and 8 workers under cleave-run (gloo) and mpirun (mpi):
#     BENCH mlp_train_b32_np<N>_<gloo|mpi> model=<samples/s> data=<samples/s> single=<samples/s> ...
#     (SHARD_STEPS steps, default 300, compile included); and seed 004's Net1 (examples/shard_function):
#     BENCH shard_net1_block1_np<N> sharded_ms=<per call of block1, forward and backward, on N
#       workers> eager_ms=<the same block eager on one process> sharded_vs_eager=..
#     (SHARD_CALLS calls, default 200, compiled graphs warm). SECONDS_PER_ROW is unused.
#   dp: DATA_PARALLEL training (bench/dp_bench.cc) of LeNet, a small ResNet and ResNet-50 (32x32
#     images, batch 32 per process, one thread per process) on 1 process and on 2 under
#     cleave-run, against PyTorch DDP (bench/torch_dp.py, gloo) on the same:
#     BENCH dp_<model>_b32 cleave_np2=<samples/s> torch_np2=<samples/s> ratio=<cleave/torch>
#       cleave_np1=.. torch_np1=.. scaling=<cleave np2 / np1> step_np1_ms=.. step_np2_ms=..
#       allreduce_ms=<an AllReduce of all the gradients alone> waited_ms=<per step, the time the
#       step blocked on gradient AllReduces in flight> hidden=<1 - waited_ms / allreduce_ms,
#       clipped to 0..1: the share of the all-reduce time the backward pass hid>
#     then the same 2-process job with enable_parallel_optimizer (threshold 64 KB) beside it:
#     BENCH dp_<model>_b32_parallel_optimizer cleave_np2=<samples/s> replicated_np2=<samples/s>
#       ratio=<with/without> state_mib=<optimizer state on rank 0> replicated_state_mib=..
#       param_mib=<parameters on rank 0> replicated_param_mib=..
#   search: the strategy search's time (search_bench, cleave-plan) at 8, 64 and 1024 devices, then
#     every network of bench/plan_train_bench.cc trained with each hand plan and the searched one
#     on 2, 4 and 8 workers: measured beside predicted step time, the searched plan against the best
#     hand plan, and the rank correlation of predicted and measured (bench/README.md "search").
#     The trained plans are searched and predicted with this machine's profile: cleave-calibrate
#     writes one first (groups of up to 8 ranks, about 50 s), unless SEARCH_PROFILE names one;
#     then `cleave-plan --time-ops` times each network's product and convolution slices at 2, 4
#     and 8 workers into it (NOTE [Measured op slices]; SEARCH_TIME_OPS=0: the flops curves only).
#     SEARCH_PARTS (default "times train") picks the halves to run, SEARCH_NETS (default "mlp
#     lenet transformer") the networks trained. Each network's row also gives
#     spearman_alike_tied: the rank correlation where plans the runs cannot tell apart share one
#     rank (measure_alike lists them; bench/search_rows.py sums the runs up).
#   ckpt: a sharded job's checkpoints (bench/ckpt_bench.cc: CKPT_MIB, default 1024 MiB, of Float32
#     matrices over 8 ranks by rows) saved, merged into one file (cleave-ckpt merge) and transformed
#     to 4 ranks splitting by columns (cleave-ckpt transform), each beside `cp -r` of the same
#     rank files followed by `sync`, on the same disk with the files in the page cache (warm):
#     BENCH ckpt_<save|merge|transform>_<MiB>mib cleave_mb_s=<MiB/s> cp_sync_mb_s=<MiB/s>
#       ratio=<cp_sync time / cleave time> seconds=<cleave's>  (CKPT_RUNS runs, default 3: medians)
#     The folder is CKPT_DIR (default a new one under /var/tmp: /tmp may be memory).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
suite=${1:-core}
seconds=${2:-2}
build=$root/build/Release
if [ ! -x "$build/bench/core_bench" ] || [ ! -x "$build/bench/graph_bench" ] ||
   [ ! -x "$build/bench/comm_bench" ] || [ ! -x "$build/bench/data_bench" ]; then
  "$root/scripts/build.sh" Release >/dev/null
fi
python=/usr/bin/python3
"$python" -c "import torch" 2>/dev/null || python=python3

# NOTE [Peers at their best]: this machine's environment may set OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE (a work-around for old OpenBLAS builds on some processors); they force older
# kernels on newer CPUs and halve OpenBLAS's sgemm there, and a user's machine would not have
# them. A peer (PyTorch and the OpenBLAS it calls) runs without them, in its own process only:
# cleave's runs, the tests and CI keep the environment as it is. Its threads are the row's (as
# OMP_NUM_THREADS and torch.set_num_threads, as PyTorch's documentation recommends), and the
# kernel it then runs is printed once (PEER line, bench/peer_info.py).
peer() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"; }
peer_line() {  # threads
  OMP_NUM_THREADS=$1 peer "$python" "$root/bench/peer_info.py" 2>/dev/null ||
    echo "PEER torch=unavailable"
}

# Every row says what it ran on: the CPU model, its widest vector ISA and the cores this run may
# use, appended to each BENCH line.
cpu_model=$(lscpu 2>/dev/null | awk -F: '/^Model name/ { sub(/^[ \t]+/, "", $2); print $2; exit }')
isa=$(grep -m1 -o -w -E 'avx512f' /proc/cpuinfo >/dev/null && echo avx512 ||
      { grep -m1 -q -w avx2 /proc/cpuinfo && echo avx2 || echo sse; })
machine_fields="cpu=\"${cpu_model:-unknown}\" isa=$isa cores=$(nproc)"
echo "MACHINE $machine_fields"
exec > >(awk -v m="$machine_fields" '/^BENCH / { print $0 " " m; fflush(); next } { print; fflush() }')

case "$suite" in
  core)
    rows="lenet5_train_b32_t1 lenet5_train_b32_t2 lenet5_eval_b256_t2 mlp_train_b32_t1 mlp_train_b32_t2 mlp_train_b256_t1 mlp_train_b256_t2 twomatmul_train_b16_t1"
    peer_line 1
    peer_line 2
    declare -A cleave_rate torch_rate
    for row in $rows; do
      threads=${row##*_t}
      out=$(OMP_NUM_THREADS=$threads "$build/bench/core_bench" "$row" "$seconds")
      c=$(echo "$out" | awk '{print $2}')
      extra=$(echo "$out" | cut -s -d' ' -f3-)  # gemm_peak_fraction (NOTE [GEMM peak])
      t=$(OMP_NUM_THREADS=$threads peer "$python" "$root/bench/torch_core.py" "$row" "$seconds" | awk '{print $2}')
      ratio=$(awk -v c="$c" -v t="$t" 'BEGIN { printf "%.2f", c / t }')
      echo "BENCH $row cleave=$c torch=$t ratio=$ratio${extra:+ $extra}"
      cleave_rate[$row]=$c
      torch_rate[$row]=$t
    done
    # Each training row run on 1 and 2 threads: the second thread's gain, for both.
    for row in $rows; do
      case "$row" in *_train_*_t2) ;; *) continue ;; esac
      one=${row%_t2}_t1
      [ -n "${cleave_rate[$one]:-}" ] || continue
      awk -v r="${row%_t2}" -v c1="${cleave_rate[$one]}" -v c2="${cleave_rate[$row]}" \
          -v t1="${torch_rate[$one]}" -v t2="${torch_rate[$row]}" \
          'BEGIN { printf "BENCH %s_scaling cleave_t2_over_t1=%.2f torch_t2_over_t1=%.2f\n", r, c2 / c1, t2 / t1 }'
    done
    ;;
  python)
    # The same LeNet-5 training step driven from Python (bench/python_core.py, a Cell written in
    # Python, GRAPH_MODE) against core_bench's C++ row, alternating, each a median of 5 trials.
    pyexe=/usr/bin/python3
    [ -x "$pyexe" ] || pyexe=python3
    for row in lenet5_train_b32_t1 lenet5_train_b32_t2; do
      threads=${row##*_t}
      c=$(OMP_NUM_THREADS=$threads "$build/bench/core_bench" "$row" "$seconds" | awk '{print $2}')
      p=$(OMP_NUM_THREADS=$threads PYTHONPATH="$build/python" "$pyexe" "$root/bench/python_core.py" \
        "$row" "$seconds" | awk '{print $2}')
      ratio=$(awk -v c="$c" -v p="$p" 'BEGIN { printf "%.3f", p / c }')
      echo "BENCH $row python=$p cpp=$c ratio=$ratio"
    done
    ;;
  graph)
    for row in lenet5_train_b32 twomatmul_train_b16; do
      read -r _ gs gm < <(OMP_NUM_THREADS=1 "$build/bench/graph_bench" "$row" graph "$seconds")
      read -r _ ps pm < <(OMP_NUM_THREADS=1 "$build/bench/graph_bench" "$row" pynative "$seconds")
      ratio=$(awk -v g="$gs" -v p="$ps" 'BEGIN { printf "%.2f", g / p }')
      echo "BENCH $row graph=$gs pynative=$ps ratio=$ratio"
      echo "BENCH ${row}_peak_mib graph=$gm pynative=$pm"
    done
    ;;
  comm)
    # The gloo rows measure Gloo over TCP (ranks as threads would otherwise share memory).
    CLEAVE_COMM_SHM=0 "$build/bench/comm_bench" gloo "$seconds"
    "$build/bench/comm_bench" shm "$seconds"
    if command -v mpirun >/dev/null 2>&1; then
      mpi_flags="--oversubscribe --bind-to none"
      [ "$(id -u)" = 0 ] && mpi_flags="$mpi_flags --allow-run-as-root"
      for np in 2 4 8; do
        # shellcheck disable=SC2086
        mpirun $mpi_flags -n "$np" "$build/bench/comm_bench" mpi "$seconds"
      done
    else
      echo "bench/run.sh comm: mpirun not found; MPI rows skipped" >&2
    fi
    # Across real hosts: two network namespaces joined by a bridge (scripts/netns_test.sh), as
    # root and only when asked, since it makes namespaces and a bridge.
    if [ "${CLEAVE_BENCH_NETNS:-0}" = 1 ]; then
      if [ "$(id -u)" = 0 ]; then
        NETNS_CASES=bench "$root/scripts/netns_test.sh" "$build" | grep "^BENCH"
      else
        echo "bench/run.sh comm: CLEAVE_BENCH_NETNS=1 needs root (network namespaces); netns rows skipped" >&2
      fi
    fi
    ;;
  data)
    train=$(OMP_NUM_THREADS=1 "$build/bench/core_bench" lenet5_train_b32_t1 "$seconds" | awk '{print $2}')
    for row in mnist_pipeline_b32 mnist_pipeline_b32_w2 mnist_pipeline_b32_label \
      mnist_pipeline_b32_image; do
      c=$(OMP_NUM_THREADS=1 "$build/bench/data_bench" "$row" "$seconds" | awk '{print $2}')
      headroom=$(awk -v c="$c" -v t="$train" 'BEGIN { printf "%.2f", c / t }')
      echo "BENCH $row cleave=$c lenet5_train_b32_t1=$train headroom=$headroom"
    done
    read -r _ fed waits < <(OMP_NUM_THREADS=1 "$build/bench/data_bench" lenet5_fed_b32_t1 "$seconds")
    echo "BENCH lenet5_fed_b32_t1 cleave=$fed lenet5_train_b32_t1=$train $waits"
    ;;
  place)
    bin=$build/bin
    if [ ! -x "$bin/lenet_place" ] || [ ! -x "$bin/cleave-run" ] || [ ! -x "$bin/cleave-datagen" ]; then
      "$root/scripts/build.sh" Release >/dev/null
    fi
    steps=${PLACE_STEPS:-1000}
    cores=$(nproc)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$bin/cleave-datagen" mnist --out "$work/data" --train $((steps * 32)) --test 320 >/dev/null
    # Two epochs: --stats counts the second only (the first compiles, sets up the cut edges and
    # fills the data pipelines).
    args=(--data-path "$work/data/MNIST_Data" --epochs 2 --max-steps "$steps"
          --per-print-times "$steps" --stats)
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
           echo $((20000 + RANDOM % 20000)))
    # The reference: one process, no job (place() has no effect), all cores.
    (unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID
     OMP_NUM_THREADS=${PLACE_SINGLE_THREADS:-$cores} "$bin/lenet_place" "${args[@]}") > "$work/single.log" 2>&1 || {
      tail -n 20 "$work/single.log" >&2
      echo "bench/run.sh place: the single-process run failed" >&2
      exit 1
    }
    single=$(awk '/^PLACE_STATS/ { for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
                                    printf "%.1f", v["samples"] / v["train_wall_s"] }' "$work/single.log")
    for m in 1 4 8; do
      log_dir=$work/m$m
      OMP_NUM_THREADS=1 "$bin/cleave-run" --worker_num 8 --master_port "$port" --log_dir "$log_dir" \
        -- "$bin/lenet_place" "${args[@]}" --micro-batches "$m" >"$work/m$m.out" 2>&1 || {
        tail -n 20 "$work/m$m.out" >&2
        echo "bench/run.sh place: the placed run with $m micro-batches failed (logs: $log_dir)" >&2
        exit 1
      }
      # The same run again with every op timed (its own cost would distort the first run's
      # throughput): bench/place_ideal.py replays the ops as a perfect schedule on $cores cores.
      OMP_NUM_THREADS=1 "$bin/cleave-run" --worker_num 8 --master_port "$port" --log_dir "$log_dir.ops" \
        -- "$bin/lenet_place" "${args[@]}" --micro-batches "$m" --op-times "$work/m$m.ops" \
        >"$work/m$m.ops.out" 2>&1 || {
        tail -n 20 "$work/m$m.ops.out" >&2
        echo "bench/run.sh place: the timed run with $m micro-batches failed (logs: $log_dir.ops)" >&2
        exit 1
      }
      ideal=$(python3 "$root/bench/place_ideal.py" "$work/m$m.ops" "$cores" |
              awk '/^IDEAL/ { split($2, kv, "="); print kv[2] }')
      # NOTE: bench/README.md "place" defines busy, bubble, ideal_ratio and bound_ratio.
      cat "$log_dir"/worker_*.log | awk -v m="$m" -v single="$single" -v cores="$cores" -v ideal_step="$ideal" '
        /^PLACE_STATS/ {
          for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
          busy = v["compute_s"]; sum += busy; if (busy > max) max = busy; if (busy > 0) ++active
          cpu += v["cpu_s"]
          if (v["rank"] == 0) { wall = v["train_wall_s"]; samples = v["samples"]; steps = v["runs"] }
          ++ranks
        }
        END {
          if (ranks != 8 || wall <= 0) { print "bench/run.sh place: expected 8 PLACE_STATS lines with rank 0 (got " ranks ")" > "/dev/stderr"; exit 1 }
          bound = max > sum / cores ? max : sum / cores
          lanes = active < cores ? active : cores
          bubble = lanes > 0 ? 1 - sum / (wall * lanes) : 1
          printf "BENCH lenet_place_m%d cleave=%.1f single=%s bubble=%.3f ideal_ratio=%.3f bound_ratio=%.3f cores=%d cpu_use=%.3f\n",
                 m, samples / wall, single, bubble, ideal_step * steps / wall, bound / wall, cores, cpu / (wall * cores)
        }'
    done
    ;;
  shard)
    bin=$build/bin
    if [ ! -x "$build/bench/shard_bench" ] || [ ! -x "$bin/semi_auto_parallel" ] || [ ! -x "$bin/shard_function" ] || [ ! -x "$bin/cleave-run" ]; then
      "$root/scripts/build.sh" Release >/dev/null
    fi
    # The rewrite's compile time (plan + one rank's graph), no cluster.
    for row in "mlp 8" "generated 8" "generated 1024" "propagate 8 1000" "propagate 8 10000"; do
      # shellcheck disable=SC2086
      echo "BENCH $("$build/bench/shard_bench" $row)"
    done
    # Training the MLP of examples/semi_auto_parallel (batch 32, SHARD_STEPS steps, compile
    # included) on 2 and 8 workers (one thread each), under cleave-run (gloo) and under mpirun
    # (the mpi backend): model-parallel strategies against data parallel, and one process.
    steps=${SHARD_STEPS:-300}
    work=$(mktemp -d)
    rate() {  # log files -> samples/s of rank 0
      grep -h "rank 0 of .*samples/s" "$@" | awk '{print $5}'
    }
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
    single=$(OMP_NUM_THREADS=1 "$bin/semi_auto_parallel" --steps "$steps" --per-print-times 0 | grep "samples/s" | awk '{print $5}')
    mpi_args=(--oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
    if [ "$(id -u)" = 0 ]; then mpi_args+=(--allow-run-as-root); fi
    for np in 2 8; do
      for launcher in gloo mpi; do
        for strategy in model data; do
          log=$work/$launcher$np$strategy
          args=("$bin/semi_auto_parallel" --strategy "$strategy" --steps "$steps" --per-print-times 0)
          if [ "$launcher" = gloo ]; then
            OMP_NUM_THREADS=1 "$bin/cleave-run" --worker_num "$np" --log_dir "$log" -- "${args[@]}" >/dev/null
            eval "rate_$strategy=$(rate "$log/worker_0.log")"
          else
            mpirun -n "$np" "${mpi_args[@]}" --output-filename "$log" "${args[@]}" >/dev/null
            eval "rate_$strategy=$(rate -r "$log")"
          fi
        done
        # shellcheck disable=SC2154
        echo "BENCH mlp_train_b32_np${np}_$launcher model=$rate_model data=$rate_data single=$single model_vs_data=$(ratio "$rate_model" "$rate_data") model_vs_single=$(ratio "$rate_model" "$single")"
      done
    done
    # Seed 004's Net1 (examples/shard_function): the steady-state time of one call of block1
    # (forward and backward; sharded on NP workers under cleave-run, against the same block run
    # eagerly on one process), SHARD_CALLS calls (default 200) after 20 training steps.
    calls=${SHARD_CALLS:-200}
    per_call() { grep -h "rank 0 of .*ms per call" "$@" | awk '{print $6}'; }
    eager=$(OMP_NUM_THREADS=1 "$bin/shard_function" --time-calls "$calls" | per_call)
    for np in 2 8; do
      log=$work/shard_function$np
      OMP_NUM_THREADS=1 "$bin/cleave-run" --worker_num "$np" --log_dir "$log" -- \
        "$bin/shard_function" --time-calls "$calls" >/dev/null
      sharded=$(per_call "$log/worker_0.log")
      echo "BENCH shard_net1_block1_np$np sharded_ms=$sharded eager_ms=$eager sharded_vs_eager=$(ratio "$sharded" "$eager")"
    done
    rm -rf "$work"
    ;;
  dp)
    bin=$build/bin
    if [ ! -x "$build/bench/dp_bench" ] || [ ! -x "$bin/cleave-run" ]; then
      "$root/scripts/build.sh" Release >/dev/null
    fi
    work=$(mktemp -d)
    field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }
    peer_line 1
    for model in lenet resnet_small resnet50; do
      one=$(OMP_NUM_THREADS=1 "$build/bench/dp_bench" "$model" 32 "$seconds")
      OMP_NUM_THREADS=1 "$bin/cleave-run" --worker_num 2 --log_dir "$work/$model" -- \
        "$build/bench/dp_bench" "$model" 32 "$seconds" >/dev/null
      two=$(grep -h "^dp_" "$work/$model/worker_0.log")
      # A PyTorch job that does not end within 5 minutes counts as no measurement (nan).
      torch_one=$(OMP_NUM_THREADS=1 peer timeout 300 "$python" "$root/bench/torch_dp.py" "$model" 32 "$seconds" 1 ||
        echo "samples_per_s=nan")
      torch_two=$(OMP_NUM_THREADS=1 peer timeout 300 "$python" "$root/bench/torch_dp.py" "$model" 32 "$seconds" 2 ||
        echo "samples_per_s=nan")
      awk -v m="$model" -v c1="$(field samples_per_s <<< "$one")" -v c2="$(field samples_per_s <<< "$two")" \
          -v t1="$(field samples_per_s <<< "$torch_one")" -v t2="$(field samples_per_s <<< "$torch_two")" \
          -v s1="$(field step_ms <<< "$one")" -v s2="$(field step_ms <<< "$two")" \
          -v ar="$(field allreduce_ms <<< "$two")" -v w="$(field waited_ms <<< "$two")" \
          -v wm="$(field waited_max_ms <<< "$two")" 'BEGIN {
        hidden = ar > 0 ? 1 - w / ar : 0; if (hidden < 0) hidden = 0; if (hidden > 1) hidden = 1
        printf "BENCH dp_%s_b32 cleave_np2=%.1f torch_np2=%.1f ratio=%.2f cleave_np1=%.1f torch_np1=%.1f scaling=%.2f step_np1_ms=%.2f step_np2_ms=%.2f allreduce_ms=%.3f waited_ms=%.3f waited_max_ms=%.3f hidden=%.2f\n",
               m, c2, t2, c2 / t2, c1, t1, c2 / c1, s1, s2, ar, w, wm, hidden }'
      # The parallel optimizer (MindSpore's default threshold, 64 KB) beside the replicated run.
      DP_BENCH_PARALLEL_OPTIMIZER=1 OMP_NUM_THREADS=1 "$bin/cleave-run" --worker_num 2 \
        --log_dir "$work/${model}_po" -- "$build/bench/dp_bench" "$model" 32 "$seconds" >/dev/null
      po=$(grep -h "^dp_" "$work/${model}_po/worker_0.log")
      awk -v m="$model" -v c="$(field samples_per_s <<< "$po")" -v r="$(field samples_per_s <<< "$two")" \
          -v s="$(field state_mib <<< "$po")" -v rs="$(field state_mib <<< "$two")" \
          -v p="$(field param_mib <<< "$po")" -v rp="$(field param_mib <<< "$two")" 'BEGIN {
        printf "BENCH dp_%s_b32_parallel_optimizer cleave_np2=%.1f replicated_np2=%.1f ratio=%.2f state_mib=%.3f replicated_state_mib=%.3f param_mib=%.3f replicated_param_mib=%.3f\n",
               m, c, r, c / r, s, rs, p, rp }'
    done
    rm -rf "$work"
    ;;
  ckpt)
    bin=$build/bin
    if [ ! -x "$build/bench/ckpt_bench" ] || [ ! -x "$bin/cleave-ckpt" ]; then
      "$root/scripts/build.sh" Release >/dev/null
    fi
    mib=${CKPT_MIB:-1024}
    runs=${CKPT_RUNS:-3}
    work=${CKPT_DIR:-$(mktemp -d /var/tmp/cleave_ckpt_bench.XXXXXX)}
    mkdir -p "$work"
    now() { date +%s.%N; }
    median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    : > "$work/times"
    for run in $(seq "$runs"); do
      rm -rf "$work/src" "$work/dst" "$work/copy" "$work/full.ckpt"
      save=$("$build/bench/ckpt_bench" "$work" "$mib" 8 | awk '{ sub("seconds=", "", $4); print $4 }')
      t=$(now); cp -r "$work/src" "$work/copy" && sync; cp_s=$(awk -v a="$t" -v b="$(now)" 'BEGIN { print b - a }')
      t=$(now); "$bin/cleave-ckpt" merge "$work/src" --strategy "$work/src.json" -o "$work/full.ckpt" > /dev/null
      merge=$(awk -v a="$t" -v b="$(now)" 'BEGIN { print b - a }')
      t=$(now); "$bin/cleave-ckpt" transform "$work/src" --src-strategy "$work/src.json" \
        --dst-strategy "$work/dst.json" -o "$work/dst" > /dev/null
      transform=$(awk -v a="$t" -v b="$(now)" 'BEGIN { print b - a }')
      echo "$save $cp_s $merge $transform" >> "$work/times"
    done
    bytes_mib=$(du -sm "$work/src" | awk '{ print $1 }')
    for col in "save 1" "merge 3" "transform 4"; do
      read -r name c <<< "$col"
      s=$(awk -v c="$c" '{ print $c }' "$work/times" | median)
      cp_s=$(awk '{ print $2 }' "$work/times" | median)
      awk -v n="$name" -v m="$mib" -v b="$bytes_mib" -v s="$s" -v cp="$cp_s" 'BEGIN {
        printf "BENCH ckpt_%s_%dmib cleave_mb_s=%.0f cp_sync_mb_s=%.0f ratio=%.2f seconds=%.2f\n",
               n, m, b / s, b / cp, cp / s, s }'
    done
    [ -n "${CKPT_DIR:-}" ] || rm -rf "$work"
    ;;
  search)
    bin=$build/bin
    if [ ! -x "$build/bench/search_bench" ] || [ ! -x "$build/bench/plan_train_bench" ] ||
       [ ! -x "$bin/cleave-plan" ] || [ ! -x "$bin/cleave-run" ]; then
      "$root/scripts/build.sh" Release >/dev/null
    fi
    # 1. How long the search takes, no cluster: generated graphs, seed 001's traced ResNet-50
    # (an IR text, batch 2), and through cleave-plan (trace + search + estimate) ResNet-50 with 32
    # images per device and a 24-block transformer stack. A row past SEARCH_TIMEOUT seconds
    # (default 300) prints timeout=1.
    limit=${SEARCH_TIMEOUT:-300}
    parts=${SEARCH_PARTS:-times train}
    for part in $parts; do
      if [ "$part" != times ] && [ "$part" != train ]; then
        echo "bench/run.sh search: SEARCH_PARTS has '$part'; expected 'times', 'train' or both" >&2
        exit 2
      fi
    done
    golden=$root/tests/runtime/golden/seeds/001_resnet50_data_parallel/train_step/01_trace.ir
    [[ " $parts " == *" times "* ]] &&
    for row in "residual 8 1000" "residual 64 1000" "residual 1024 1000" "text 8 $golden" \
               "text 64 $golden"; do
      # shellcheck disable=SC2086
      out=$(timeout "$limit" "$build/bench/search_bench" $row 2>&1 | grep '^ROW') || out="ROW ${row%% *}_d$(echo "$row" | awk '{print $2}') timeout=1"
      echo "BENCH ${out#ROW }"
    done
    [[ " $parts " == *" times "* ]] &&
    for row in "resnet50 --device-num 8" "resnet50 --device-num 64" "resnet50 --device-num 1024" \
               "transformer --device-num 8 --layers 24 --hidden 512 --heads 8 --seq 128" \
               "transformer --device-num 64 --layers 24 --hidden 512 --heads 8 --seq 128"; do
      name=$(echo "$row" | awk '{print $1 "_d" $3}')
      # shellcheck disable=SC2086
      if out=$(timeout "$limit" "$bin/cleave-plan" $row --runner-ups 0 --ops 1 2>&1); then
        awk -v n="$name" '/^  searched in/ { s = $3 } /^cleave-plan: done in/ { t = $4 }
          /^  predicted step/ { p = $3 } END { printf "BENCH plan_%s search_s=%s total_s=%s predicted_ms=%s\n", n, s, t, p }' <<< "$out"
      else
        echo "BENCH plan_$name timeout=1"
      fi
    done
    # 2. Is the searched plan fast when measured? Each network with every hand plan of
    # bench/plan_train_bench.cc (NOTE [Hand plans]; bench/README.md "search" lists them) and the
    # searched one, on 2, 4 and 8 workers under cleave-run, SEARCH_RUNS runs each (default 5):
    #   BENCH search_<net>_np<N>_<plan> step_ms=<median> predicted_ms=.. samples_per_s=..
    #     runs_ms=<fastest run>-<slowest run>
    # (a run's step: plan_train_bench's median step after half a second of warm-up, over at least
    # half a second of steps: NOTE [Steady steps])
    # and per network and worker count
    #   BENCH search_<net>_np<N> searched_ms=.. best_hand=<plan> best_hand_ms=..
    #     searched_vs_best=<searched / best hand step> spearman=<rank correlation of predicted
    #     and measured step times over all its plans> spearman_alike_tied=<the same, plans that
    #     measure alike sharing one rank> measure_alike=<those plans, a group per ';'>
    [[ " $parts " == *" train "* ]] || exit 0
    runs=${SEARCH_RUNS:-5}
    nets=${SEARCH_NETS:-mlp lenet transformer}
    for net in $nets; do
      if [[ " mlp lenet transformer " != *" $net "* ]]; then
        echo "bench/run.sh search: SEARCH_NETS has '$net'; expected some of: mlp lenet transformer" >&2
        exit 2
      fi
    done
    work=$(mktemp -d)
    # This machine's profile (the shipped one was measured on another: its cores, ISA and
    # collectives differ), so that the search and the prediction cost what this machine runs.
    profile=${SEARCH_PROFILE:-$work/machine.json}
    if [[ ${SEARCH_TIME_OPS:-1} != [01] ]]; then
      echo "bench/run.sh search: SEARCH_TIME_OPS is '$SEARCH_TIME_OPS'; expected 1 (time the op slices) or 0" >&2
      exit 2
    fi
    if [ -z "${SEARCH_PROFILE:-}" ]; then  # groups of up to 8 ranks, as the largest job below
      "$bin/cleave-calibrate" --max-ranks 8 -o "$profile" >/dev/null  # progress on stderr
    fi
    if [[ ${SEARCH_TIME_OPS:-1} == 1 ]]; then
      # Each network's slices timed on this machine (NOTE [Measured op slices]): the same
      # global graphs plan_train_bench traces (32 samples per worker).
      cp "$profile" "$work/timed.json"
      profile=$work/timed.json
      declare -A plan_args=([mlp]="mlp" [lenet]="lenet"
        [transformer]="transformer --layers 2 --hidden 128 --heads 4 --seq 16")
      for net in $nets; do
        for np in 2 4 8; do
          # shellcheck disable=SC2086
          "$bin/cleave-plan" ${plan_args[$net]} --device-num "$np" --batch-per-device 32 \
            --profile "$profile" --time-ops "$profile" --runner-ups 0 |
            sed -n "s/^  timed \([0-9]*\) op slices with \([0-9]*\) threads\{0,1\} in \([0-9.]*\) s.*/BENCH search_time_ops_${net}_np${np}_t\2 slices=\1 seconds=\3/p"
        done
      done
    fi
    # Kept for whoever reads the rows later (the plans depend on it; the work folder goes).
    [ "$profile" -ef "$build/search_profile.json" ] || cp "$profile" "$build/search_profile.json"
    echo "BENCH search_profile file=$build/search_profile.json"
    declare -A plans=(
      [mlp]="data replicated column megatron row hybrid data_fc1_column megatron_tail_replicated"
      [lenet]="data replicated example fc_megatron fc_column conv_channels conv2_out fc_replicated"
      [transformer]="data replicated megatron mlp_megatron attention_megatron column row hybrid")
    for net in $nets; do
      for np in 2 4 8; do
        : >"$work/rows"
        # Round by round, each plan once a round, in an order of its own (seeded by the round):
        # a slow spell of the host then slows a run of every plan rather than every run of one,
        # and no plan always follows the same one (bench/README.md "Plans that measure alike").
        for ((r = 0; r < runs; ++r)); do
          # shellcheck disable=SC2086
          order=$("$python" -c 'import random, sys
plans = sys.argv[2:]
random.Random(int(sys.argv[1])).shuffle(plans)
print(" ".join(plans))' "$r" ${plans[$net]} searched)
          for plan in $order; do
            OMP_NUM_THREADS=1 "$bin/cleave-run" --worker_num "$np" --log_dir "$work/log" -- \
              "$build/bench/plan_train_bench" --net "$net" --plan "$plan" --profile "$profile" \
              >/dev/null 2>&1 || true
            grep -h '^ROW' "$work/log/worker_0.log" >>"$work/rows" || true
          done
        done
        "$python" "$root/bench/search_rows.py" "$work/rows" "$net" "$np"
        # Every run's ROW line, kept for whoever checks the medians and the groups later.
        mkdir -p "$build/search_rows"
        cp "$work/rows" "$build/search_rows/${net}_np${np}.rows"
      done
    done
    echo "BENCH search_rows dir=$build/search_rows"
    rm -rf "$work"
    ;;
  *)
    echo "bench/run.sh: unknown suite '$suite'; expected: core, python, graph, comm, data, place, shard, dp, search or ckpt" >&2
    exit 2
    ;;
esac
