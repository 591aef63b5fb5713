// Seed 000's LeNet on MNIST (MindSpore's "Distributed Graph Partition" tutorial), on one process:
// the program of the graph-partition tutorial without the place() lines, which have no effect
// without a cluster (as the seed says). It prints what the seed's workers print:
//
//   ================= Start training =================
//   epoch: 1 step: 1, loss is 2.30...
//   ...
//   epoch time: 12345.678 ms, per step time: 6.584 ms
//   ================= Start testing =================
//   Accuracy is: {'Accuracy': 0.98...}
//
// DATA_PATH (or --data-path) is the MNIST_Data folder with train/ and test/ subfolders in the
// IDX format; examples/lenet/run.sh generates one with cleave-datagen when none is given. The
// network, data pipeline, optimizer and loss are in examples/common/lenet.h. --checkpoint-dir DIR
// saves the training state every epoch; --resume DIR continues from the newest one there, with
// the same losses as the run that was not interrupted.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cleave/cleave.h"
#include "cleave/flags.h"
#include "common/lenet.h"

using namespace cleave;
using namespace cleave::examples;

int main(int argc, char** argv) {
  CLI::App app{"Trains seed 000's LeNet on MNIST on one process and prints its test accuracy."};
  cleave::flags::setup(app, {{"DATA_PATH", "the MNIST_Data folder (--data-path)"}});
  const char* env_path = std::getenv("DATA_PATH");
  std::string data_path = env_path != nullptr ? env_path : "";
  int64_t epochs = 10;
  int64_t per_print_times = 1;
  uint64_t seed = 1;
  std::string checkpoint_dir;
  std::string resume_dir;
  app.add_option("--data-path", data_path, "MNIST_Data folder (default: $DATA_PATH)");
  app.add_option("--epochs", epochs, "epochs to train")->check(cleave::flags::positive());
  app.add_option("--per-print-times", per_print_times, "LossMonitor prints every this many steps")
      ->check(cleave::flags::non_negative());
  app.add_option("--seed", seed, "seed of the weights and the shuffle order");
  app.add_option("--checkpoint-dir", checkpoint_dir,
                 "also save checkpoints (ModelCheckpoint, every epoch) to this folder");
  app.add_option("--resume", resume_dir,
                 "continue the run whose newest checkpoint lenet-<epoch>_<step>.ckpt is in this "
                 "folder (its --checkpoint-dir; same --seed and data): train up to --epochs");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  if (data_path.empty()) {
    std::fprintf(stderr, "lenet: no data: set DATA_PATH or --data-path to an MNIST_Data folder\n");
    return 2;
  }

  try {
    set_seed(seed);
    auto net = std::make_shared<LeNet>();
    auto opt = get_optimizer(*net);
    auto criterion = get_loss();
    train::Model model(net, criterion, opt, {{"Accuracy", std::make_shared<train::Accuracy>()}});
    if (!resume_dir.empty()) {
      const std::string path = train::latest_checkpoint(resume_dir, "lenet");
      model.load_train_state(path);
      fmt::print("resuming from {} (epoch {}, step {})\n", path, model.progress().epoch_num,
                 model.progress().step_num);
    }

    std::printf("================= Start training =================\n");
    std::fflush(stdout);
    auto ds_train = create_dataset(data_path + "/train");
    std::vector<train::CallbackPtr> callbacks = {
        std::make_shared<train::LossMonitor>(per_print_times),
        std::make_shared<train::TimeMonitor>(), std::make_shared<train::ProgressBar>()};
    if (!checkpoint_dir.empty()) {
      callbacks.push_back(std::make_shared<train::ModelCheckpoint>(
          train::CheckpointConfig{.save_checkpoint_steps = ds_train->get_dataset_size()}, "lenet",
          checkpoint_dir));
    }
    model.train(epochs, ds_train, callbacks, /*dataset_sink_mode=*/false);

    std::printf("================= Start testing =================\n");
    std::fflush(stdout);
    auto ds_eval = create_dataset(data_path + "/test");
    const train::EvalResult acc = model.eval(ds_eval, /*dataset_sink_mode=*/false);
    fmt::print("Accuracy is: {}\n", acc.to_string());
  } catch (const Error& e) {
    std::fprintf(stderr, "lenet: %s\n", e.what());
    return 1;
  }
  return 0;
}
