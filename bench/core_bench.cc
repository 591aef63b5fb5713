// Training-step throughput of cleave on the `core` rows of bench/README.md.
//
//   core_bench ROW [SECONDS]   prints "ROW <samples/s>"
//
// A row is <model>_<train|eval>_b<batch>_t<threads>; models: lenet5, mlp, twomatmul. A training
// step is optim::TrainOneStep (forward, loss, backward and a Momentum(0.01, 0.9) update); eval is
// optim::Forward. Both run in GRAPH_MODE (compiled once, in the warm-up) unless
// CLEAVE_MODE=pynative. The figure is the median of 5 trials of at least SECONDS/5 each, after a
// warm-up. The MLP's training rows add how close the step comes to oneDNN's matmul (NOTE [GEMM
// peak] below): "ROW <samples/s> gemm_gflops=.. onednn_gflops=.. gemm_peak_fraction=..".
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
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

// NOTE [GEMM peak]
// The MLP's training step is matrix products and little else, so its rows also print how close
// the step comes to oneDNN's own matmul: the step's products (forward X·Wᵀ per layer; backward
// dY·W for the two layers whose input has a gradient, dYᵀ·X for every weight), timed one by one
// as plain oneDNN matmuls of the whole batch on the row's threads, over the step's time:
//   gemm_peak_fraction = (products' FLOPs per step × steps/s) / (products' FLOPs / oneDNN's time).
// 1 means the step runs at oneDNN's matmul speed with nothing else costing; the threads split
// the batch (NOTE [Threads split the batch]) while the reference runs each product on all
// threads, as a user calling oneDNN would.
struct Gemm {
  int64_t m, k, n;
  bool transpose_a, transpose_b;
};

double onednn_seconds(const Gemm& g) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc a({g.m, g.k}, dt::f32, g.transpose_a ? tag::ba : tag::ab);
  const dnnl::memory::desc b({g.k, g.n}, dt::f32, g.transpose_b ? tag::ba : tag::ab);
  const dnnl::memory::desc c({g.m, g.n}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine);
  const dnnl::matmul product(pd);
  std::vector<float> va(static_cast<size_t>(g.m * g.k), 0.5f),
      vb(static_cast<size_t>(g.k * g.n), 0.25f), vc(static_cast<size_t>(g.m * g.n));
  dnnl::memory ma(a, engine, va.data()), mb(b, engine, vb.data()), mc(c, engine, vc.data());
  auto once = [&] {
    product.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    stream.wait();
  };
  for (int i = 0; i < 5; ++i) once();
  using clock = std::chrono::steady_clock;
  std::vector<double> trials;
  for (int t = 0; t < 5; ++t) {
    int64_t calls = 0;
    const auto start = clock::now();
    double elapsed = 0;
    do {
      once();
      ++calls;
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
    } while (elapsed < 0.05);
    trials.push_back(elapsed / static_cast<double>(calls));
  }
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

// The MLP's (testing::Mlp: 784 -> 512 -> 512 -> 10) training-step products at batch `b`.
std::vector<Gemm> mlp_step_gemms(int64_t b) {
  return {{b, 784, 512, false, true}, {b, 512, 512, false, true},  {b, 512, 10, false, true},
          {b, 10, 512, false, false}, {b, 512, 512, false, false}, {512, b, 784, true, false},
          {512, b, 512, true, false}, {10, b, 512, true, false}};
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
    const double rate = rates[rates.size() / 2];
    std::printf("%s %.1f", argv[1], rate);
    if (row.model == "mlp" && row.train) {  // NOTE [GEMM peak]
      double flops = 0, seconds_onednn = 0;
      for (const Gemm& g : mlp_step_gemms(row.batch)) {
        flops += 2.0 * static_cast<double>(g.m * g.k * g.n);
        seconds_onednn += onednn_seconds(g);
      }
      const double step_rate = flops * rate / static_cast<double>(row.batch);
      const double peak = flops / seconds_onednn;
      std::printf(" gemm_gflops=%.1f onednn_gflops=%.1f gemm_peak_fraction=%.2f", step_rate / 1e9,
                  peak / 1e9, step_rate / peak);
    }
    std::printf("\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
