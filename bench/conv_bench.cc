// Per-call time of the Float32 convolution kernels, hand-written path against oneDNN: the figures
// behind NOTE [Convolutions of few input channels] in src/kernels/cpu/conv.cc (bench/README.md,
// 'core').
//
//   conv_bench [THREADS]   prints one line per shape and pass: "<shape> <pass> direct=<us>
//                          onednn=<us> ratio=<onednn / direct> auto=<us>" (auto: the path the
//                          ops take, ConvPath::kAuto)
//
// Each figure is the median over 7 trials of the mean time per call, each trial at least 20 ms,
// after a warm-up (which also builds and caches the oneDNN primitives). oneDNN's figure includes
// the reorders to and from its blocked layout, as the op pays them. The shapes: LeNet's conv1,
// then a sweep of the input channels at one spatial size (where the path changes), then larger
// first layers.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "kernel_bench.h"
#include "kernels/cpu/conv.h"

using namespace cleave;
using kernels::cpu::Conv2DGeometry;
using kernels::cpu::ConvPath;

namespace {

struct Case {
  int64_t n, c, hw, o, k;
  bool same;  // pad (k - 1) / 2 on each side, else no padding
};

Conv2DGeometry geometry(const Case& c) {
  Conv2DGeometry g;
  g.n = c.n, g.c = c.c, g.h = g.w = c.hw, g.o = c.o, g.kh = g.kw = c.k;
  const int64_t pad = c.same ? (c.k - 1) / 2 : 0;
  g.pad_top = g.pad_left = pad;
  g.pad_bottom = g.pad_right = c.same ? c.k - 1 - pad : 0;
  g.oh = g.h + g.pad_top + g.pad_bottom - c.k + 1;
  g.ow = g.w + g.pad_left + g.pad_right - c.k + 1;
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = threads_arg(argc, argv);
  omp_set_num_threads(threads);
  std::vector<Case> cases = {{32, 1, 32, 6, 5, false}};
  for (int64_t c = 1; c <= 6; ++c) cases.push_back({32, c, 28, 16, 3, true});
  cases.push_back({32, 1, 64, 16, 7, true});
  cases.push_back({32, 2, 64, 32, 5, true});
  cases.push_back({8, 1, 128, 32, 3, true});
  for (const Case& c : cases) {
    const Conv2DGeometry g = geometry(c);
    const Tensor x = Tensor::normal({g.n, g.c, g.h, g.w});
    const Tensor w = Tensor::normal({g.o, g.c, g.kh, g.kw});
    const Tensor y = Tensor::empty({g.n, g.o, g.oh, g.ow}, DType::kFloat32);
    const Tensor dy = Tensor::normal(y.shape());
    const Tensor dw = Tensor::empty(w.shape(), DType::kFloat32);
    const std::string name = fmt::format("x{} w{} {}", x.shape().to_string(), w.shape().to_string(),
                                         c.same ? "same" : "valid");
    auto row = [&](const char* pass, const std::function<void(ConvPath)>& run) {
      const double direct = median_us([&] { run(ConvPath::kDirect); });
      const double onednn = median_us([&] { run(ConvPath::kOneDnn); });
      const double automatic = median_us([&] { run(ConvPath::kAuto); });
      std::printf("%-44s %-7s direct=%8.1f onednn=%8.1f ratio=%5.2f auto=%8.1f\n", name.c_str(),
                  pass, direct, onednn, onednn / direct, automatic);
      std::fflush(stdout);
    };
    row("fwd", [&](ConvPath p) { kernels::cpu::conv2d_forward(g, x, w, y, p); });
    row("filter", [&](ConvPath p) { kernels::cpu::conv2d_backward_filter(g, dy, x, dw, p); });
  }
  return 0;
}
