// The job checkpoint_set_test.cc kills (NOTE [Killing a saving job] there): the MLP of
// sharded_mlp.h on 4 thread ranks in SEMI_AUTO_PARALLEL, trained by Model.train on one fixed
// batch for an epoch of a million steps, ModelCheckpoint saving every step into DIR/<rank> (its
// strategy file DIR/strategy.json), until it is killed.
//
//   checkpoint_kill_child DIR
#include <cstdio>

#include "cleave/cleave.h"
#include "testing/ranks.h"
#include "train/sharded_mlp.h"

int main(int argc, char** argv) {
  using namespace cleave;
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoint_kill_child DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  try {
    runtime::set_context({.mode = runtime::GRAPH_MODE});
    runtime::set_auto_parallel_context({.parallel_mode = runtime::SEMI_AUTO_PARALLEL,
                                        .dataset_strategy = "full_batch",
                                        .strategy_ckpt_save_file = dir + "/strategy.json"});
    set_seed(5);
    const Tensor x = Tensor::normal({8, 12});
    const Tensor y = ops::cast(Tensor::uniform({8}, 0, 8), DType::kInt32);
    cleave::testing::run_thread_job(4, [&](comm::ProcessGroup& g) {
      auto data = dataset::GeneratorDataset(
          [&](int64_t) {
            return dataset::Row{x, y};
          },
          1000000, {"data", "label"});
      const auto net = ckpt_testing::make_mlp(4);
      train::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"),
                         std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9));
      model.train(1, data,
                  {std::make_shared<train::ModelCheckpoint>(
                      train::CheckpointConfig{.save_checkpoint_steps = 1, .keep_checkpoint_max = 1},
                      "CKP", dir + "/" + std::to_string(g.rank()))});
    });
  } catch (const Error& e) {
    std::fprintf(stderr, "checkpoint_kill_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
