// Training-step throughput of cleave on the `core` rows of bench/README.md.
//
//   core_bench ROW [SECONDS]   prints "ROW <samples/s>"
//
// A row is <model>_<train|eval>_b<batch>_t<threads>; models: lenet5, mlp, twomatmul. A training
// step is optim::TrainOneStep (forward, loss, backward and a Momentum(0.01, 0.9) update); eval is
// optim::Forward. Both run in GRAPH_MODE (compiled once, in the warm-up) unless
// CLEAVE_MODE=pynative. The figure is the median of 5 trials of at least SECONDS/5 each, after a
// warm-up. The MLP's and LeNet's training rows add how close the step comes to oneDNN's own
// matmul and convolution (NOTE [GEMM peak] below):
// "ROW <samples/s> gemm_gflops=.. onednn_gflops=.. gemm_peak_fraction=..".
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <string>
#include <unordered_map>

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
// The MLP's and LeNet's training steps are mostly matrix products and convolutions, so their
// rows also print how close the step comes to oneDNN's own kernels on the same work: the step's
// products (the MLP: forward X·Wᵀ per layer, backward dY·W for the layers whose input has a
// gradient, dYᵀ·X for every weight; LeNet: the same for its three Dense layers, and for its two
// convolutions the forward, the weights' gradient and, for conv2, the input's), each timed alone
// as a oneDNN matmul or convolution of the whole batch on the row's threads (layouts of oneDNN's
// choosing, reorders not counted), over the step's time:
//   gemm_peak_fraction = (products' FLOPs per step × steps/s) / (products' FLOPs / oneDNN's time).
// 1 means the step runs at oneDNN's speed with nothing else costing (ReLU, pooling, the loss, the
// update cost the rest); the threads split the batch (NOTE [Threads split the batch]) while the
// reference runs each product on all threads, as a user calling oneDNN would. Above 1 where
// cleave does better than oneDNN called plainly on the same work: LeNet's conv1, whose forward and
// filter gradient run on hand-written kernels (NOTE [Convolutions of few input channels] in
// src/kernels/cpu/conv.cc) 2x and 4.4x faster than oneDNN's, and the MLP's products over rows of
// 512 floats, which cleave gives oneDNN padded (NOTE [Leading dimensions of 2 KiB] in
// src/kernels/cpu/matmul.cc) and the reference does not.

// Median seconds per call of `once` over 5 trials of at least `trial_seconds` each, after
// `warm_calls` calls.
template <typename F>
double median_seconds(F&& once, double trial_seconds = 0.05, int warm_calls = 5) {
  for (int i = 0; i < warm_calls; ++i) once();
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
    } while (elapsed < trial_seconds);
    trials.push_back(elapsed / static_cast<double>(calls));
  }
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Runs `primitive` on buffers of the descs it asks for (contents irrelevant to its speed).
double time_primitive(const dnnl::primitive& primitive,
                      const std::vector<std::pair<int, dnnl::memory::desc>>& args) {
  dnnl::stream stream(engine());
  std::unordered_map<int, dnnl::memory> memories;
  std::vector<std::vector<float>> buffers;
  for (const auto& [arg, desc] : args) {
    buffers.emplace_back(desc.get_size() / sizeof(float) + 1, 0.25f);
    memories.emplace(arg, dnnl::memory(desc, engine(), buffers.back().data()));
  }
  return median_seconds([&] {
    primitive.execute(stream, memories);
    stream.wait();
  });
}

struct Gemm {
  int64_t m, k, n;
  bool transpose_a, transpose_b;
  double flops() const { return 2.0 * static_cast<double>(m * k * n); }
};

double onednn_seconds(const Gemm& g) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dnnl::memory::desc a({g.m, g.k}, dt::f32, g.transpose_a ? tag::ba : tag::ab);
  const dnnl::memory::desc b({g.k, g.n}, dt::f32, g.transpose_b ? tag::ba : tag::ab);
  const dnnl::memory::desc c({g.m, g.n}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine());
  return time_primitive(dnnl::matmul(pd),
                        {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
}

// A valid, stride-1 convolution (n, c, h, w) * (o, c, k, k) and which of its passes a step runs.
struct Conv {
  int64_t n, c, h, w, o, k;
  enum Pass { kForward, kBackwardData, kBackwardWeights } pass;
  double flops() const {
    return 2.0 * static_cast<double>(n * o * (h - k + 1) * (w - k + 1) * c * k * k);
  }
};

double onednn_seconds(const Conv& v) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const dnnl::memory::desc src({v.n, v.c, v.h, v.w}, dt::f32, tag::any);
  const dnnl::memory::desc weights({v.o, v.c, v.k, v.k}, dt::f32, tag::any);
  const dnnl::memory::desc dst({v.n, v.o, v.h - v.k + 1, v.w - v.k + 1}, dt::f32, tag::any);
  const dnnl::memory::dims strides{1, 1}, pad{0, 0};
  const auto alg = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, weights, dst,
                                      strides, pad, pad),
      engine());
  switch (v.pass) {
    case Conv::kForward:
      return time_primitive(dnnl::convolution_forward(fwd), {{DNNL_ARG_SRC, fwd.src_desc()},
                                                             {DNNL_ARG_WEIGHTS, fwd.weights_desc()},
                                                             {DNNL_ARG_DST, fwd.dst_desc()}});
    case Conv::kBackwardData: {
      const dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(alg, src, weights, dst, strides, pad, pad),
          engine(), fwd);
      return time_primitive(dnnl::convolution_backward_data(pd),
                            {{DNNL_ARG_DIFF_DST, pd.diff_dst_desc()},
                             {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                             {DNNL_ARG_DIFF_SRC, pd.diff_src_desc()}});
    }
    case Conv::kBackwardWeights: {
      const dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(alg, src, weights, dst, strides, pad, pad),
          engine(), fwd);
      return time_primitive(dnnl::convolution_backward_weights(pd),
                            {{DNNL_ARG_DIFF_DST, pd.diff_dst_desc()},
                             {DNNL_ARG_SRC, pd.src_desc()},
                             {DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc()}});
    }
  }
  return 0;
}

// The training-step products of a row's model at batch `b` (NOTE [GEMM peak]); none for others.
struct Products {
  std::vector<Gemm> gemms;
  std::vector<Conv> convs;
};

Products step_products(const std::string& model, int64_t b) {
  // A Dense layer in -> out: forward, the input's gradient (unless first), the weight's.
  auto dense = [b](Products& p, int64_t in, int64_t out, bool first) {
    p.gemms.push_back({b, in, out, false, true});
    if (!first) p.gemms.push_back({b, out, in, false, false});
    p.gemms.push_back({out, b, in, true, false});
  };
  Products p;
  if (model == "mlp") {  // testing::Mlp: 784 -> 512 -> 512 -> 10
    dense(p, 784, 512, true);
    dense(p, 512, 512, false);
    dense(p, 512, 10, false);
  } else if (model == "lenet5") {  // testing::LeNet5 on 32x32
    p.convs = {{b, 1, 32, 32, 6, 5, Conv::kForward},
               {b, 1, 32, 32, 6, 5, Conv::kBackwardWeights},
               {b, 6, 14, 14, 16, 5, Conv::kForward},
               {b, 6, 14, 14, 16, 5, Conv::kBackwardData},
               {b, 6, 14, 14, 16, 5, Conv::kBackwardWeights}};
    dense(p, 400, 120, false);
    dense(p, 120, 84, false);
    dense(p, 84, 10, false);
  }
  return p;
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

    // The median trial's rate: the batch over the median seconds per step.
    const double rate =
        static_cast<double>(row.batch) / median_seconds(step, seconds / 5, /*warm_calls=*/0);
    std::printf("%s %.1f", argv[1], rate);
    const Products products = step_products(row.model, row.batch);
    if (row.train && !(products.gemms.empty() && products.convs.empty())) {  // NOTE [GEMM peak]
      double flops = 0, seconds_onednn = 0;
      for (const Gemm& g : products.gemms) {
        flops += g.flops();
        seconds_onednn += onednn_seconds(g);
      }
      for (const Conv& v : products.convs) {
        flops += v.flops();
        seconds_onednn += onednn_seconds(v);
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
