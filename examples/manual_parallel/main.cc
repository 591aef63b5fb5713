// Seed 002's manual data parallelism (MindSpore's "Manually Parallelism" tutorial: data
// parallelism written by hand with collective communication, run under mpirun): every rank reads
// the same global batches of 32, its network slices its rows [rank*32/N, (rank+1)*32/N) out of the
// batch inside construct, and the loss (mean over the local rows) is AllReduce'd (sum) and divided
// by the device count. Every rank prints the same LossMonitor lines:
//
//   epoch: 1 step: 20, loss is 2.24...
//
// Started by examples/manual_parallel/run.sh (cleave-run) or run_mpirun.sh (mpirun); started
// alone, cleave::init() gives world size 1 and the slice is the whole batch.
//
// Training runs in GRAPH_MODE, as the seed's program (--mode pynative runs it eagerly): the
// AllReduce of the loss is a node of the compiled training step, and its gradient (AllReduce) is
// part of the compiled backward.
//
// Gradients: AllReduce(sum)'s gradient is AllReduce(sum) of the output gradient, so rank r's
// local loss gets gradient N * (1/N) = 1 and its parameters the gradient of the mean loss over
// ITS rows only, which differs between ranks. Without more, the ranks' parameters drift apart
// after the first step (as in the seed's MindSpore program, whose optimizer has no gradient
// reducer in this mode). So the training step here averages the gradients over the ranks
// (AllReduce mean) before the update, as MindSpore's DistributedGradReducer does: every rank
// then applies the gradient of the global mean loss, the parameters stay identical on every rank
// and equal to a single process training on whole batches. In GRAPH_MODE that is
// parallel_mode DATA_PARALLEL with gradients_mean (the compiled step all-reduces every gradient);
// in PYNATIVE_MODE a training step of its own does it. --no-grad-mean turns that off.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cleave/cleave.h"
#include "cleave/flags.h"
#include "common/manual_parallel.h"

namespace {

using namespace cleave;
using examples::NetWithReduceLoss;
using examples::Network;
namespace ds = cleave::dataset;
namespace CV = cleave::dataset::vision;
namespace C = cleave::dataset::transforms;

ds::DatasetPtr create_dataset(const std::string& dataset_path, int64_t batch_size,
                              int64_t num_samples, uint64_t seed) {
  ds::MnistOptions options;
  options.usage = "train";
  options.num_samples = num_samples;
  ds::DatasetPtr dataset = ds::MnistDataset(dataset_path, options);
  CV::Rescale rescale(1.0 / 255.0, 0);
  CV::Normalize normalize({0.1307}, {0.3081});
  CV::HWC2CHW hwc2chw;
  C::TypeCast label_transform(DType::kInt32);
  dataset = dataset->map({rescale, normalize, hwc2chw}, {"image"});
  dataset = dataset->map({label_transform}, {"label"});
  dataset = dataset->batch(batch_size);
  return dataset;
}

// The eager step with the gradients averaged over the ranks before the update (see the top).
class GradMeanTrainStep : public train::TrainStep {
 public:
  GradMeanTrainStep(nn::CellPtr net_with_loss, std::shared_ptr<optim::Optimizer> optimizer)
      : net_with_loss_(std::move(net_with_loss)), optimizer_(std::move(optimizer)) {}

  Tensor operator()(const Tensor& data, const Tensor& label) override {
    Tensor loss = (*net_with_loss_)(data, label);
    autodiff::backward(loss);
    std::vector<Tensor> grads;
    {
      NoGradGuard no_grad;
      for (const Tensor& p : optimizer_->parameters()) {
        Tensor g = p.grad();
        grads.push_back(g.defined() ? ops::all_reduce(g, {.op = comm::ReduceOp::kMean}) : g);
      }
    }
    optimizer_->apply(grads);
    optimizer_->zero_grad();
    return loss.detach();
  }

 private:
  nn::CellPtr net_with_loss_;
  std::shared_ptr<optim::Optimizer> optimizer_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Seed 002: manual data parallelism of a Dense network on MNIST."};
  std::vector<cleave::flags::Variable> variables = {
      {"DATA_PATH", "the MNIST_Data folder (--data-path)"}};
  for (const auto& v : cleave::flags::cluster_variables()) variables.push_back(v);
  cleave::flags::setup(app, variables);
  const char* env_path = std::getenv("DATA_PATH");
  std::string data_path = env_path != nullptr ? env_path : "";
  int64_t epochs = 10;
  int64_t num_samples = 0;
  int64_t per_print_times = 20;
  uint64_t seed = 1;
  bool no_grad_mean = false;
  std::string mode = "graph";
  app.add_option("--data-path", data_path, "MNIST_Data folder (default: $DATA_PATH)");
  app.add_option("--epochs", epochs, "epochs to train")->check(cleave::flags::positive());
  app.add_option("--num-samples", num_samples,
                 "train on the first this many images only (0: all); with 32 per batch this is "
                 "32 * steps per epoch")
      ->check(cleave::flags::non_negative());
  app.add_option("--per-print-times", per_print_times, "LossMonitor prints every this many steps")
      ->check(cleave::flags::non_negative());
  app.add_option("--seed", seed, "seed of the weights and the shuffle order (same on every rank)");
  app.add_flag("--no-grad-mean", no_grad_mean,
               "update each rank with its own gradient, as the seed's program literally does "
               "(the ranks' parameters then drift apart)");
  app.add_option("--mode", mode,
                 "graph (GRAPH_MODE, the seed's) or pynative (each op runs at once)")
      ->check(cleave::flags::one_of({"graph", "pynative"}));
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  if (data_path.empty()) {
    std::fprintf(stderr,
                 "manual_parallel: no data: set DATA_PATH or --data-path to an MNIST_Data "
                 "folder\n");
    return 2;
  }

  try {
    const bool graph = mode == "graph";
    runtime::set_context({.mode = graph ? runtime::GRAPH_MODE : runtime::PYNATIVE_MODE});
    init();
    const int cur_rank = get_rank();
    const int64_t batch_size = 32;
    const int device_num = get_group_size();
    CLEAVE_CHECK_ARG(batch_size % device_num == 0,
                     "manual_parallel: the batch of {} does not split over {} devices", batch_size,
                     device_num);

    set_seed(seed);
    auto net = std::make_shared<Network>(cur_rank, device_num);
    auto net_with_loss = std::make_shared<NetWithReduceLoss>(net, cur_rank, device_num);
    auto optimizer = std::make_shared<optim::SGD>(net->trainable_params(), 1e-2);
    auto data_set = create_dataset(data_path + "/train", batch_size, num_samples, seed);

    if (graph && !no_grad_mean && device_num > 1) {
      runtime::set_auto_parallel_context(
          {.parallel_mode = runtime::DATA_PARALLEL, .gradients_mean = true});
    }
    train::Model model(net_with_loss, /*loss_fn=*/nullptr, optimizer);
    if (!graph && !no_grad_mean)
      model.set_train_step(std::make_shared<GradMeanTrainStep>(net_with_loss, optimizer));
    model.train(epochs, data_set, {std::make_shared<train::LossMonitor>(per_print_times)});

    // A fingerprint of the trained parameters, so that runs and ranks can be compared.
    double sum = 0, sum_sq = 0;
    for (const Tensor& p : net->trainable_params()) {
      for (float v : p.to_vector<float>()) {
        sum += v;
        sum_sq += static_cast<double>(v) * v;
      }
    }
    fmt::print("rank {} of {}: parameters sum {:.10e} sum of squares {:.10e}\n", cur_rank,
               device_num, sum, sum_sq);
    std::fflush(stdout);
    release();
  } catch (const Error& e) {
    std::fprintf(stderr, "manual_parallel: %s\n", e.what());
    std::fflush(stderr);
    report_failure(e.what());  // the whole job stops at once with this error
    return 1;
  }
  return 0;
}
