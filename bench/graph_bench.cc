// GRAPH_MODE against PYNATIVE_MODE: training-step throughput and peak tensor memory.
//
//   graph_bench ROW MODE [SECONDS]   prints "ROW <steps/s> <peak MiB>"
//
// ROW is <model>_train_b<batch> (lenet5, twomatmul, mlp); MODE is graph or pynative. A step is
// optim::TrainOneStep (forward, loss, backward, Momentum(0.01, 0.9)). Steps/s is the median of 5
// trials of at least SECONDS/5 each after a warm-up (which includes the one compilation in graph
// mode). Peak memory is the highest number of bytes of CPU tensor storage alive during the timed
// steps (cpu_peak_live_bytes; parameters, optimizer state and the data included).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "testing/models.h"

using namespace cleave;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: graph_bench ROW graph|pynative [SECONDS]\n");
    return 2;
  }
  try {
    const std::string name = argv[1], mode = argv[2];
    const double seconds = argc > 3 ? std::stod(argv[3]) : 2.0;
    CLEAVE_CHECK_ARG(mode == "graph" || mode == "pynative",
                     "graph_bench: mode '{}'; expected graph or pynative", mode);
    runtime::set_context({.mode = mode == "graph" ? runtime::GRAPH_MODE : runtime::PYNATIVE_MODE});
    const size_t b = name.find("_b");
    CLEAVE_CHECK_ARG(b != std::string::npos, "graph_bench: row '{}' is not <model>_train_b<batch>",
                     name);
    const std::string model = name.substr(0, name.find('_'));
    const int64_t batch = std::stoll(name.substr(b + 2));
    set_seed(0);
    std::shared_ptr<nn::Cell> net, loss_fn;
    Tensor x, y;
    if (model == "lenet5") {
      net = std::make_shared<testing::LeNet5>();
      x = Tensor::normal({batch, 1, 32, 32});
      y = ops::cast(Tensor::uniform({batch}, 0, 10), DType::kInt32);
      loss_fn = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    } else if (model == "mlp") {
      net = std::make_shared<testing::Mlp>();
      x = Tensor::normal({batch, 1, 28, 28});
      y = ops::cast(Tensor::uniform({batch}, 0, 10), DType::kInt32);
      loss_fn = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    } else if (model == "twomatmul") {
      net = std::make_shared<testing::TwoMatMul>();
      x = Tensor::normal({batch, 32});
      y = Tensor::normal({batch, 16});
      loss_fn = std::make_shared<nn::MSELoss>("mean");
    } else {
      CLEAVE_FAIL("graph_bench: unknown model '{}'; expected lenet5, mlp or twomatmul", model);
    }
    net->set_train(true);
    nn::WithLossCell with_loss(net, loss_fn);
    optim::Momentum opt(net->trainable_params(), 0.01, 0.9);
    optim::TrainOneStep step(with_loss, opt);

    using clock = std::chrono::steady_clock;
    const auto warm_end = clock::now() + std::chrono::duration<double>(std::min(0.5, seconds / 4));
    while (clock::now() < warm_end) step(x, y);
    reset_cpu_peak_live_bytes();
    std::vector<double> rates;
    for (int trial = 0; trial < 5; ++trial) {
      int64_t steps = 0;
      const auto start = clock::now();
      double elapsed = 0;
      do {
        step(x, y);
        ++steps;
        elapsed = std::chrono::duration<double>(clock::now() - start).count();
      } while (elapsed < seconds / 5);
      rates.push_back(static_cast<double>(steps) / elapsed);
    }
    std::sort(rates.begin(), rates.end());
    std::printf("%s %.1f %.3f\n", argv[1], rates[rates.size() / 2],
                static_cast<double>(cpu_peak_live_bytes()) / (1024.0 * 1024.0));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
