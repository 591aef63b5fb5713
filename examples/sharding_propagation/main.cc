// Seed 003: AUTO_PARALLEL with sharding propagation. One MatMul has a strategy given by hand,
// ((2, 4), (4, 1)); the ReLU, the second MatMul and the loss get theirs from propagation.
//
//   sharding_propagation [--epochs 5] [--steps-per-epoch 4] [--batch 2] [--graphs DIR]
//                        [--ckpt-dir DIR] [--strategy-save FILE] [--strategy-load FILE]
//                        [--resume DIR --resume-strategy FILE] [--matmul-strategy S]
//                        [--enable-parallel-optimizer] [--parallel-optimizer-threshold KB]
//
// Net(in_dim 32, hidden_dim 16, out_dim 16) with parameters w and w2 initialised "normal", MSELoss,
// Momentum(lr 0.2, momentum 0.1), a GeneratorDataset of one fixed random batch of --batch rows per
// rank repeated --steps-per-epoch times (dataset_strategy "data_parallel": each rank's batch is
// its slice of the global batch; every rank reads the same rows, as in the seed), LossMonitor and
// ModelCheckpoint into <ckpt-dir>/<rank>. GRAPH_MODE with save_graphs 2: rank R's graphs go to
// <graphs>/rank_<R>/ (rank 0 also writes the step_parallel_begin dump with every strategy).
// Alone (no job) it trains the same rows on one device: its losses are the job's. --resume DIR
// continues from the newest checkpoint set a job saved into DIR (DIR/<rank>/CKP-*.ckpt) under the
// strategy file --resume-strategy, on any number of ranks (Model.load_distributed_checkpoint):
// the next train() runs the steps after the saved one up to --epochs. --matmul-strategy replaces
// the seed's ((2, 4), (4, 1)) (a job of another device count needs one that fits it), and
// --enable-parallel-optimizer splits w and w2 and their momentum over their replicas (with
// --parallel-optimizer-threshold 0: they are smaller than MindSpore's default 64 KB).
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cleave/cleave.h"
#include "cleave/flags.h"
#include "cleave/ir/parse.h"
#include "common/sharding_propagation.h"

namespace {

using namespace cleave;
using examples::Net;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Seed 003: AUTO_PARALLEL with sharding propagation from one hand-set MatMul."};
  cleave::flags::setup(app, cleave::flags::cluster_variables());
  int64_t epochs = 5, steps_per_epoch = 4, batch = 2;
  std::string graphs = "saved_graph", ckpt_dir = ".", strategy_save, strategy_load, resume,
              resume_strategy, matmul_strategy;
  bool parallel_optimizer = false;
  int64_t parallel_optimizer_threshold = 64;
  app.add_option("--epochs", epochs, "training epochs")->check(cleave::flags::positive());
  app.add_option("--steps-per-epoch", steps_per_epoch, "batches per epoch")
      ->check(cleave::flags::positive());
  app.add_option("--batch", batch, "rows per rank")->check(cleave::flags::positive());
  app.add_option("--graphs", graphs, "save_graphs_path: rank R's IR dumps go to DIR/rank_R");
  app.add_option("--ckpt-dir", ckpt_dir, "checkpoints go to DIR/<rank id>");
  app.add_option("--strategy-save", strategy_save,
                 "strategy_ckpt_save_file: write every operator's strategy here");
  app.add_option("--strategy-load", strategy_load,
                 "strategy_ckpt_load_file: take the strategies from this file");
  app.add_option("--resume", resume,
                 "continue from the newest checkpoint set in DIR (one folder per rank)");
  app.add_option("--resume-strategy", resume_strategy,
                 "the strategy file of the job that saved --resume's checkpoints")
      ->needs(app.get_option("--resume"));
  app.add_option("--matmul-strategy", matmul_strategy,
                 "the first MatMul's strategy instead of the seed's ((2, 4), (4, 1))");
  app.add_flag("--enable-parallel-optimizer", parallel_optimizer,
               "split the parameters and their optimizer state over their replicas");
  app.add_option("--parallel-optimizer-threshold", parallel_optimizer_threshold,
                 "KB: smaller parameters stay replicated (default 64)")
      ->check(cleave::flags::non_negative_number());
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  try {
    init();
    const int rank = get_rank(), n = get_group_size();
    runtime::set_context({.mode = runtime::GRAPH_MODE,
                          .save_graphs = 2,
                          .save_graphs_path = fmt::format("{}/rank_{}", graphs, rank)});
    if (n > 1) {
      runtime::AutoParallelContext parallel{.parallel_mode = runtime::AUTO_PARALLEL,
                                            .search_mode = "sharding_propagation",
                                            .dataset_strategy = std::string("data_parallel"),
                                            .strategy_ckpt_save_file = strategy_save,
                                            .strategy_ckpt_load_file = strategy_load,
                                            .enable_parallel_optimizer = parallel_optimizer};
      parallel.parallel_optimizer_config.parallel_optimizer_threshold =
          parallel_optimizer_threshold;
      runtime::set_auto_parallel_context(parallel);
    }
    // The seed's get_dataset: one fixed random batch, the same on every rank.
    set_seed(1);
    const Tensor input = Tensor::uniform({batch, 32});
    const Tensor label = Tensor::uniform({batch, 16});
    auto data = dataset::GeneratorDataset(
        [&](int64_t) {
          return dataset::Row{input, label};
        },
        steps_per_epoch, {"input", "label"});
    set_seed(2);
    auto net = std::make_shared<Net>(32, 16, 16);
    if (!matmul_strategy.empty()) net->shard_matmul(ir::parse_strategy(matmul_strategy));
    auto loss = std::make_shared<nn::MSELoss>();
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.2, 0.1);
    train::Model model(net, loss, opt);
    if (!resume.empty()) {
      // Compiled first, the parameters are this rank's slices: the load reads only the files
      // holding them (its own file when the strategy is the saving job's).
      model.build(data);
      model.load_distributed_checkpoint(resume, resume_strategy);
      std::printf("rank %d read %zu checkpoint file(s) of %s\n", rank, model.loaded_files().size(),
                  resume.c_str());
    }
    model.train(epochs, data,
                {std::make_shared<train::LossMonitor>(),
                 std::make_shared<train::ModelCheckpoint>(train::CheckpointConfig{}, "CKP",
                                                          fmt::format("{}/{}", ckpt_dir, rank))},
                /*dataset_sink_mode=*/false);
    std::fflush(stdout);
    release();
  } catch (const Error& e) {
    std::fprintf(stderr, "sharding_propagation: %s\n", e.what());
    std::fflush(stderr);
    report_failure(e.what());  // the whole job stops at once with this error
    return 1;
  }
  return 0;
}
