// Training-step throughput of cleave on the `core` rows of bench/README.md.
//
//   core_bench ROW [SECONDS]   prints "ROW <samples/s>"
//
// A row is <model>_<train|eval>_b<batch>_t<threads>; models: lenet5, mlp, twomatmul. A training
// step is optim::TrainOneStep (forward, loss, backward and a Momentum(0.01, 0.9) update); eval is
// optim::Forward. Both run in GRAPH_MODE (compiled once, in the warm-up) unless
// CLEAVE_MODE=pynative. The figure is the median of 5 trials of at least SECONDS/5 each, after a
// warm-up.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "testing/models.h"

using namespace cleave;

namespace {

struct Row {
  std::string model;
  bool train = true;
  int64_t batch = 32;
  int threads = 1;
};

Row parse_row(const std::string& name) {
  Row row;
  const size_t a = name.find('_');
  const size_t b = name.find("_b", a);
  const size_t t = name.find("_t", b + 1);
  CLEAVE_CHECK_ARG(a != std::string::npos && b != std::string::npos && t != std::string::npos,
                   "core_bench: row '{}' is not <model>_<train|eval>_b<batch>_t<threads>", name);
  row.model = name.substr(0, a);
  row.train = name.substr(a + 1, b - a - 1) == "train";
  row.batch = std::stoll(name.substr(b + 2, t - b - 2));
  row.threads = std::stoi(name.substr(t + 2));
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: core_bench ROW [SECONDS]\n");
    return 2;
  }
  try {
    const Row row = parse_row(argv[1]);
    const double seconds = argc > 2 ? std::stod(argv[2]) : 2.0;
    omp_set_num_threads(row.threads);
    set_seed(0);

    std::shared_ptr<nn::Cell> net;
    Tensor x, y;
    std::shared_ptr<nn::Cell> loss_fn;
    if (row.model == "lenet5") {
      net = std::make_shared<testing::LeNet5>();
      x = Tensor::normal({row.batch, 1, 32, 32});
      y = ops::cast(Tensor::uniform({row.batch}, 0, 10), DType::kInt32);
      loss_fn = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    } else if (row.model == "mlp") {
      net = std::make_shared<testing::Mlp>();
      x = Tensor::normal({row.batch, 1, 28, 28});
      y = ops::cast(Tensor::uniform({row.batch}, 0, 10), DType::kInt32);
      loss_fn = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    } else if (row.model == "twomatmul") {
      net = std::make_shared<testing::TwoMatMul>();
      x = Tensor::normal({row.batch, 32});
      y = Tensor::normal({row.batch, 16});
      loss_fn = std::make_shared<nn::MSELoss>("mean");
    } else {
      CLEAVE_FAIL("core_bench: unknown model '{}'; expected lenet5, mlp or twomatmul", row.model);
    }
    net->set_train(row.train);
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
    // The context's mode (GRAPH_MODE by default; CLEAVE_MODE=pynative for PyNative).
    const char* mode = std::getenv("CLEAVE_MODE");
    if (mode != nullptr && std::string(mode) == "pynative") {
      runtime::set_context({.mode = runtime::PYNATIVE_MODE});
    }
    auto with_loss = std::make_shared<nn::WithLossCell>(net, loss_fn);
    optim::TrainOneStep train_step(with_loss, opt);
    optim::Forward forward(net);

    auto step = [&] {
      if (row.train) {
        train_step(x, y);
      } else {
        Tensor logits = forward(x);
        (void)logits;
      }
    };
    using clock = std::chrono::steady_clock;
    const auto warm_end = clock::now() + std::chrono::duration<double>(std::min(0.5, seconds / 4));
    while (clock::now() < warm_end) step();

    std::vector<double> rates;
    for (int trial = 0; trial < 5; ++trial) {
      int64_t steps = 0;
      const auto start = clock::now();
      double elapsed = 0;
      do {
        step();
        ++steps;
        elapsed = std::chrono::duration<double>(clock::now() - start).count();
      } while (elapsed < seconds / 5);
      rates.push_back(static_cast<double>(steps * row.batch) / elapsed);
    }
    std::sort(rates.begin(), rates.end());
    std::printf("%s %.1f\n", argv[1], rates[rates.size() / 2]);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
