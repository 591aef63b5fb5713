// Seed 000's distributed graph partition (MindSpore's "Distributed Graph Partition" tutorial:
// LeNet on MNIST with place()): its train.py in C++. The same program runs as the scheduler and as
// every worker (run.sh, or `cleave-run --worker_num 8 -- lenet_place`); init() joins the job, and
// the place() calls put fc1, fc2, fc3, conv1 and conv2 on workers 0..4. The compiler cuts the whole
// training step by these labels into one graph per worker, joined by RpcSend/RpcRecv pairs;
// workers 5..7 own nothing and only take part in the job. Worker 0 prints the loss and the
// accuracy:
//
//   ================= Start training =================
//   epoch: 1 step: 1, loss is 2.30...
//   ...
//   epoch time: 12345.678 ms, per step time: 6.584 ms
//   ================= Start testing =================
//   Accuracy is: {'Accuracy': 0.98...}
//
// Started without a job (no MS_ROLE, mpirun or rank table), init() gives a world of one and
// place() has no effect: the single-process training of examples/lenet, with the same numbers.
//
// Beyond the seed: --micro-batches M pipelines each batch as M micro-batches
// (set_auto_parallel_context), --max-steps N trains only the first N batches of every epoch,
// --save-graphs DIR dumps every rank's graphs for `cleave-ir --ranks`, and --stats prints, on
// every worker, one line of where its time went, counted after the first epoch when there are
// several (bench/run.sh place reads it):
//
//   PLACE_STATS rank=0 compute_s=1.23 recv_wait_s=0.45 runs=300 train_wall_s=2.5 samples=9600
//     cpu_s=2.1   (cpu_s: the CPU time of all of this process's threads over the same window)
//
// --checkpoint-dir DIR saves the training state at the end of training into
// DIR/rank_<R>/lenet-<epoch>_<step>.safetensors on every worker (ModelCheckpoint: the workers
// first gather the parameters each part updates, so every file holds the whole state, as one
// process would save it). --resume DIR continues such a run from those files.
//
// --op-times PREFIX (with --stats) also writes PREFIX.rank<R>: every op of this worker's placed
// graphs in the order it runs them, with its total CPU time over the same window (tab-separated:
// graph, op, node, tag, seconds, runs); bench/place_ideal.py replays them as a perfect schedule.
// (Timing every op costs time itself: measure throughput in a run without it.)
#include <fmt/core.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "cleave/flags.h"
#include "common/lenet.h"

using namespace cleave;
using namespace cleave::examples;

namespace {

constexpr int64_t kBatchSize = 32;  // create_dataset's default, as in the seed

struct Options {
  std::string data_path;
  int64_t epochs = 10;
  int64_t per_print_times = 1;
  uint64_t seed = 1;
  int micro_batches = 1;
  int64_t max_steps = 0;  // 0: every batch
  bool stats = false;
  std::string op_times;        // empty: none
  std::string save_graphs;     // empty: no dumps
  std::string checkpoint_dir;  // empty: no checkpoint
  std::string resume_dir;      // empty: a fresh run
};

// --stats measures from the end of the first `warmup_epochs` epochs (compilation, the set-up of
// the cut edges and the data pipeline's first fill happen in the first epoch).
struct SteadyState : train::Callback {
  explicit SteadyState(int64_t warmup_epochs) : warmup(warmup_epochs) {}
  void on_train_begin(train::RunContext&) override {
    if (warmup == 0) restart(0);
  }
  void on_epoch_end(train::RunContext& ctx) override {
    if (ctx.cur_epoch_num == warmup) restart(ctx.cur_step_num);
  }
  void restart(int64_t steps) {
    runtime::reset_placed_run_stats();
    start = std::chrono::steady_clock::now();
    cpu_start = process_cpu_seconds();
    steps_before = steps;
  }
  // CPU time of every thread of this process (kernels, copies, data pipeline, transport).
  static double process_cpu_seconds() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6;
    };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
  }
  int64_t warmup;
  int64_t steps_before = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double cpu_start = process_cpu_seconds();
};

int run(const Options& options) {
  // Every rank dumps into the same folder (an absolute path: the workers run in different
  // folders), so that save_graphs_path/<graph name>/ holds every rank's subgraph.
  runtime::set_context(
      {.mode = runtime::GRAPH_MODE,
       .save_graphs = options.save_graphs.empty() ? 0 : 1,
       .save_graphs_path = options.save_graphs.empty()
                               ? std::string(".")
                               : std::filesystem::absolute(options.save_graphs).string()});
  // The scheduler's process serves the job inside init() and exits there (it needs no data).
  init();
  if (options.data_path.empty()) {
    std::fprintf(stderr,
                 "lenet_place: no data: set DATA_PATH or --data-path to an MNIST_Data folder\n");
    return 2;
  }
  runtime::set_auto_parallel_context({.pipeline_micro_batches = options.micro_batches});
  runtime::set_placed_op_profiling(!options.op_times.empty());

  set_seed(options.seed);
  auto net = std::make_shared<LeNet>();
  net->fc1->place("MS_WORKER", 0);
  net->fc2->place("MS_WORKER", 1);
  net->fc3->place("MS_WORKER", 2);
  net->conv1->place("MS_WORKER", 3);
  net->conv2->place("MS_WORKER", 4);

  auto opt = get_optimizer(*net);
  auto criterion = get_loss();
  train::Model model(net, criterion, opt, {{"Accuracy", std::make_shared<train::Accuracy>()}});

  std::printf("================= Start training =================\n");
  std::fflush(stdout);
  auto ds_train = create_dataset(options.data_path + "/train");
  if (options.max_steps > 0) ds_train = ds_train->take(options.max_steps);
  auto steady = std::make_shared<SteadyState>(options.epochs > 1 ? 1 : 0);
  std::vector<train::CallbackPtr> callbacks = {
      std::make_shared<train::LossMonitor>(options.per_print_times),
      std::make_shared<train::TimeMonitor>(), steady};
  if (!options.checkpoint_dir.empty()) {  // only the last step: on_train_end saves it
    callbacks.push_back(std::make_shared<train::ModelCheckpoint>(
        train::CheckpointConfig{.save_checkpoint_steps = int64_t{1} << 40, .format = "safetensors"},
        "lenet", fmt::format("{}/rank_{}", options.checkpoint_dir, get_rank())));
  }
  if (!options.resume_dir.empty()) {  // every worker loads the whole state its rank saved
    const std::string path = train::latest_checkpoint(
        fmt::format("{}/rank_{}", options.resume_dir, get_rank()), "lenet");
    model.load_train_state(path);
    fmt::print("resuming from {} (epoch {}, step {})\n", path, model.progress().epoch_num,
               model.progress().step_num);
  }
  model.train(options.epochs, ds_train, callbacks, /*dataset_sink_mode=*/false);
  const std::chrono::duration<double> train_wall = std::chrono::steady_clock::now() - steady->start;
  const double train_cpu = SteadyState::process_cpu_seconds() - steady->cpu_start;
  const runtime::PlacedRunStats stats = runtime::placed_run_stats();
  const std::vector<runtime::PlacedOpTime> op_times = runtime::placed_op_times();

  std::printf("================= Start testing =================\n");
  std::fflush(stdout);
  auto ds_eval = create_dataset(options.data_path + "/test");
  const train::EvalResult acc = model.eval(ds_eval, /*dataset_sink_mode=*/false);

  if (get_rank() == 0) fmt::print("Accuracy is: {}\n", acc.to_string());
  if (options.stats) {
    fmt::print(
        "PLACE_STATS rank={} compute_s={:.6f} recv_wait_s={:.6f} runs={} train_wall_s={:.6f} "
        "samples={} cpu_s={:.6f}\n",
        get_rank(), stats.compute_seconds, stats.recv_wait_seconds, stats.runs, train_wall.count(),
        (model.progress().step_num - steady->steps_before) * kBatchSize, train_cpu);
  }
  if (!options.op_times.empty()) {
    const std::string path = fmt::format("{}.rank{}", options.op_times, get_rank());
    std::FILE* out = std::fopen(path.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "lenet_place: cannot write %s\n", path.c_str());
      return 1;
    }
    for (const runtime::PlacedOpTime& t : op_times) {
      fmt::print(out, "{}\t{}\t{}\t{}\t{:.9f}\t{}\n", t.graph, t.op, t.node, t.tag, t.seconds,
                 t.runs);
    }
    std::fclose(out);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Seed 000: trains LeNet on MNIST with fc1, fc2, fc3, conv1, conv2 placed on workers 0..4 "
      "(alone: on one process) and prints the test accuracy on worker 0."};
  std::vector<cleave::flags::Variable> variables = {
      {"DATA_PATH", "the MNIST_Data folder (--data-path)"}};
  for (const auto& v : cleave::flags::cluster_variables()) variables.push_back(v);
  cleave::flags::setup(app, variables);
  Options options;
  const char* env_path = std::getenv("DATA_PATH");
  options.data_path = env_path != nullptr ? env_path : "";
  app.add_option("--data-path", options.data_path, "MNIST_Data folder (default: $DATA_PATH)");
  app.add_option("--epochs", options.epochs, "epochs to train")->check(cleave::flags::positive());
  app.add_option("--per-print-times", options.per_print_times,
                 "LossMonitor prints every this many steps")
      ->check(cleave::flags::non_negative());
  app.add_option("--seed", options.seed, "seed of the weights and the shuffle order");
  app.add_option("--micro-batches", options.micro_batches,
                 "split each batch of 32 into this many micro-batches pipelined through the "
                 "placed stages (must divide 32)")
      ->check(cleave::flags::positive());
  app.add_option("--max-steps", options.max_steps,
                 "train only the first N batches of every epoch (default: all)")
      ->check(cleave::flags::positive())
      ->default_str("");
  app.add_flag(
      "--stats", options.stats,
      "print PLACE_STATS (kernel time, receive wait, train wall time, samples) at the end");
  app.add_option("--op-times", options.op_times,
                 "write each op's time in the placed graphs to PREFIX.rank<R> (with --stats: "
                 "over the same window)");
  app.add_option("--save-graphs", options.save_graphs,
                 "write the compiled graphs of every stage and rank (save_graphs) under this "
                 "folder; `cleave-ir --ranks FOLDER/train_step_0` draws the ranks' subgraphs");
  app.add_option("--resume", options.resume_dir,
                 "continue the run that saved DIR/rank_<R>/lenet-<epoch>_<step>.safetensors "
                 "(its --checkpoint-dir; same --seed, data and workers): train up to --epochs");
  app.add_option("--checkpoint-dir", options.checkpoint_dir,
                 "save the training state at the end of training into "
                 "DIR/rank_<R>/lenet-<epoch>_<step>.safetensors on every worker");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;

  try {
    return run(options);
  } catch (const std::exception& e) {
    const std::string where = is_initialized() ? fmt::format(" (rank {})", get_rank()) : "";
    std::fprintf(stderr, "lenet_place%s: %s\n", where.c_str(), e.what());
    std::fflush(stderr);
    report_failure(e.what());  // the whole job stops at once with this error
    return 1;
  }
}
