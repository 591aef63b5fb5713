// Per-call time of the Float32 pooling kernels, hand-written path against oneDNN: the figures
// behind NOTE [Pooling paths] in src/kernels/cpu/pool.cc (bench/README.md, 'core').
//
//   pool_bench [THREADS]   prints one line per shape and pass: "<shape> <pass> native=<us>
//   onednn=<us>"
//
// Each figure is the median over 7 trials of the mean time per call, each trial at least 20 ms,
// after a warm-up (which also builds and caches the oneDNN primitives). oneDNN's figure includes
// the reorders to and from its blocked layout, as the op pays them.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "kernel_bench.h"
#include "kernels/cpu/pool.h"

using namespace cleave;
using kernels::cpu::Pool2DGeometry;
using kernels::cpu::PoolPath;

namespace {

struct Case {
  Shape x;
  int64_t kernel, stride;
  bool same;  // pad_mode "same", else "valid"
};

// Output size and padding of one dim (NOTE [Conv and pool pad modes]).
void plan(int64_t in, int64_t k, int64_t s, bool same, int64_t& out, int64_t& before,
          int64_t& after) {
  if (!same) {
    out = (in - k) / s + 1, before = after = 0;
    return;
  }
  out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>(0, (out - 1) * s + k - in);
  before = total / 2, after = total - before;
}

Pool2DGeometry geometry(const Case& c) {
  Pool2DGeometry g;
  g.n = c.x[0], g.c = c.x[1], g.h = c.x[2], g.w = c.x[3];
  g.kh = g.kw = c.kernel;
  g.stride_h = g.stride_w = c.stride;
  plan(g.h, c.kernel, c.stride, c.same, g.oh, g.pad_top, g.pad_bottom);
  plan(g.w, c.kernel, c.stride, c.same, g.ow, g.pad_left, g.pad_right);
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = threads_arg(argc, argv);
  omp_set_num_threads(threads);
  const std::vector<Case> cases = {
      {{32, 6, 28, 28}, 2, 2, false},   {{32, 16, 10, 10}, 2, 2, false},
      {{32, 8, 28, 28}, 2, 2, false},   {{32, 64, 56, 56}, 2, 2, false},
      {{32, 64, 112, 112}, 3, 2, true}, {{32, 16, 28, 28}, 3, 2, true},
      {{32, 64, 32, 32}, 3, 1, true},   {{32, 256, 7, 7}, 7, 7, false},
  };
  for (const Case& c : cases) {
    const Pool2DGeometry g = geometry(c);
    const Tensor x = Tensor::normal(c.x);
    const Tensor y = Tensor::empty({g.n, g.c, g.oh, g.ow}, DType::kFloat32);
    const Tensor dy = Tensor::normal(y.shape());
    const Tensor dx = Tensor::empty(c.x, DType::kFloat32);
    const std::string name = fmt::format("{} k{} s{} {}", c.x.to_string(), c.kernel, c.stride,
                                         c.same ? "same" : "valid");
    auto row = [&](const char* pass, const std::function<void(PoolPath)>& run) {
      const double fast = median_us([&] { run(PoolPath::kAuto); });
      const double general = median_us([&] { run(PoolPath::kGeneral); });
      const double onednn = median_us([&] { run(PoolPath::kOneDnn); });
      std::printf("%-32s %-8s auto=%9.1f general=%9.1f onednn=%9.1f\n", name.c_str(), pass, fast,
                  general, onednn);
      std::fflush(stdout);
    };
    row("max fwd", [&](PoolPath p) { kernels::cpu::max_pool2d_forward(g, x, y, p); });
    row("max bwd", [&](PoolPath p) { kernels::cpu::max_pool2d_backward(g, x, dy, dx, p); });
    row("avg fwd", [&](PoolPath p) { kernels::cpu::avg_pool2d_forward(g, x, y, p); });
    row("avg bwd", [&](PoolPath p) { kernels::cpu::avg_pool2d_backward(g, dy, dx, p); });
  }
  return 0;
}
