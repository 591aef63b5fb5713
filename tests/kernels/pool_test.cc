// The Float32 pooling paths (kernels::cpu::PoolPath: the specialised hand-written kernels the ops
// run, the hand-written general kernels, oneDNN) against the Float64 reference loops, forward and
// backward, over geometries chosen to hit every branch of NOTE [2x2 pooling fast path]: rows of
// fewer than 8 outputs, exactly 8, a multiple of 8, an overlapping last step, odd heights and
// widths, global windows of fewer and more than 8 cells, and padded general windows.
#include "kernels/cpu/pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using kernels::cpu::Pool2DGeometry;
using kernels::cpu::PoolPath;
using testing::all_close;
using testing::random_f64;

struct Case {
  Shape x;
  int64_t kh, kw, stride_h, stride_w;
  bool same;  // pad_mode "same", else "valid"
};

std::string describe(const Case& c) {
  return fmt::format("x {} kernel ({}, {}) stride ({}, {}) {}", c.x.to_string(), c.kh, c.kw,
                     c.stride_h, c.stride_w, c.same ? "same" : "valid");
}

// One dim of NOTE [Conv and pool pad modes].
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
  g.kh = c.kh, g.kw = c.kw, g.stride_h = c.stride_h, g.stride_w = c.stride_w;
  plan(g.h, c.kh, c.stride_h, c.same, g.oh, g.pad_top, g.pad_bottom);
  plan(g.w, c.kw, c.stride_w, c.same, g.ow, g.pad_left, g.pad_right);
  return g;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  // 2x2 stride 2 valid (the fast path): ow = 1, 3, 5, 7 (scalar rows), 8 (one step), 9 (an
  // overlapping last step), 14 (LeNet), 16 (two steps), 17; odd heights and widths leave a last
  // row or column out of every window.
  for (int64_t w : {2, 7, 10, 15, 16, 17, 18, 28, 32, 35}) {
    for (int64_t h : {2, 5, 6}) all.push_back({{2, 3, h, w}, 2, 2, 2, 2, false});
  }
  all.push_back({{2, 3, 28, 28}, 2, 2, 2, 2, true});  // "same" on even sizes: the fast path too
  // General geometries, with and without padding.
  all.push_back({{2, 3, 5, 7}, 2, 2, 2, 2, true});
  all.push_back({{2, 3, 9, 19}, 2, 2, 2, 2, true});
  all.push_back({{2, 3, 9, 20}, 3, 3, 2, 2, true});
  all.push_back({{2, 2, 7, 6}, 3, 3, 1, 1, true});
  all.push_back({{2, 2, 11, 23}, 3, 3, 1, 1, false});
  all.push_back({{2, 2, 7, 9}, 3, 2, 2, 1, true});
  all.push_back({{2, 2, 6, 13}, 2, 3, 1, 2, false});
  all.push_back({{2, 2, 10, 10}, 4, 4, 3, 3, true});
  all.push_back({{2, 2, 9, 9}, 3, 3, 3, 3, false});
  all.push_back({{2, 2, 5, 6}, 1, 1, 1, 1, false});
  all.push_back({{2, 2, 5, 7}, 1, 1, 2, 2, true});
  // Global windows: 4, 30, 49 and 81 cells; "same" with a kernel larger than the plane.
  all.push_back({{2, 3, 2, 2}, 2, 2, 1, 1, false});
  all.push_back({{2, 3, 5, 6}, 5, 6, 1, 1, false});
  all.push_back({{2, 3, 7, 7}, 7, 7, 7, 7, false});
  all.push_back({{2, 3, 9, 9}, 9, 9, 1, 1, false});
  all.push_back({{2, 3, 7, 7}, 8, 8, 8, 8, true});
  all.push_back({{2, 3, 5, 5}, 3, 3, 3, 3, false});  // one output per plane, but not global
  return all;
}

const PoolPath kPaths[] = {PoolPath::kAuto, PoolPath::kGeneral, PoolPath::kOneDnn};

const char* path_name(PoolPath p) {
  return p == PoolPath::kAuto ? "auto" : p == PoolPath::kGeneral ? "general" : "oneDNN";
}

// Runs every path of max (or average) pooling on x and checks y and dx against the Float64
// reference. dx starts as NaN: every cell must be written.
void check_paths(const Case& c, const Tensor& x64, bool max, double tolerance) {
  const Pool2DGeometry g = geometry(c);
  const Shape y_shape{g.n, g.c, g.oh, g.ow};
  const ops::Pool2DOptions options{.kernel_size = {c.kh, c.kw},
                                   .stride = {c.stride_h, c.stride_w},
                                   .pad_mode = c.same ? "same" : "valid"};
  ASSERT_EQ(ops::max_pool2d(x64, options).shape(), y_shape) << "geometry() disagrees with the op";

  const Tensor dy64 = random_f64(y_shape, -1, 1, 7);
  Tensor y64 = Tensor::empty(y_shape, DType::kFloat64), dx64 = Tensor::empty(c.x, DType::kFloat64);
  if (max) {
    kernels::cpu::max_pool2d_forward(g, x64, y64);
    kernels::cpu::max_pool2d_backward(g, x64, dy64, dx64);
  } else {
    kernels::cpu::avg_pool2d_forward(g, x64, y64);
    kernels::cpu::avg_pool2d_backward(g, dy64, dx64);
  }
  const Tensor x32 = ops::cast(x64, DType::kFloat32), dy32 = ops::cast(dy64, DType::kFloat32);
  for (PoolPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const float nan = std::nanf("");
    Tensor y32 = Tensor::full(y_shape, nan), dx32 = Tensor::full(c.x, nan);
    if (max) {
      kernels::cpu::max_pool2d_forward(g, x32, y32, path);
      kernels::cpu::max_pool2d_backward(g, x32, dy32, dx32, path);
    } else {
      kernels::cpu::avg_pool2d_forward(g, x32, y32, path);
      kernels::cpu::avg_pool2d_backward(g, dy32, dx32, path);
    }
    EXPECT_TRUE(all_close(y32, y64, tolerance, tolerance)) << "forward";
    EXPECT_TRUE(all_close(dx32, dx64, tolerance, tolerance)) << "backward";
  }
}

TEST(PoolPaths, MaxMatchesFloat64Reference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    check_paths(c, random_f64(c.x, -1, 1, 3), /*max=*/true, 1e-6);
  }
}

TEST(PoolPaths, AverageMatchesFloat64Reference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    check_paths(c, random_f64(c.x, -1, 1, 4), /*max=*/false, 1e-5);
  }
}

TEST(PoolPaths, MaxTiesGoToTheFirstMaximumOnEveryPath) {
  // Values from {0, 1, 2}: most windows hold ties, and each path must give the gradient to the
  // same cell as the reference (NOTE [Max pooling ties]); a gradient on the wrong cell is off by
  // about 1, far beyond the tolerance.
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const Tensor x = ops::cast(ops::cast(random_f64(c.x, 0, 3, 5), DType::kInt32), DType::kFloat64);
    check_paths(c, x, /*max=*/true, 1e-6);
  }
}

TEST(PoolPaths, FastPathWritesEveryCellOfTheLeftOverRowAndColumn) {
  // 2x2 stride 2 on a 5x7 input: row 4 and column 6 are in no window and get gradient 0.
  const Case c{{1, 1, 5, 7}, 2, 2, 2, 2, false};
  const Pool2DGeometry g = geometry(c);
  const Tensor x = ops::cast(random_f64(c.x, -1, 1, 6), DType::kFloat32);
  for (bool max : {true, false}) {
    Tensor dx = Tensor::full(c.x, 5.0);
    const Tensor dy = Tensor::ones({1, 1, g.oh, g.ow});
    if (max) {
      kernels::cpu::max_pool2d_backward(g, x, dy, dx);
    } else {
      kernels::cpu::avg_pool2d_backward(g, dy, dx);
    }
    for (int64_t r = 0; r < 5; ++r) EXPECT_EQ(dx.at({0, 0, r, 6}), 0.0) << r;
    for (int64_t col = 0; col < 7; ++col) {
      EXPECT_EQ(dx.at({0, 0, 4, col}), 0.0) << col;
    }
    // Each window's gradient (1) lands on its cells exactly once.
    EXPECT_DOUBLE_EQ(ops::reduce_sum(dx).item(), static_cast<double>(g.oh * g.ow));
  }
}

}  // namespace
}  // namespace cleave
