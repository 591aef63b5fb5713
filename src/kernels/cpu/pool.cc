// The pooling kernels of pool.h: which path runs each call (NOTE [Pooling paths]). The paths are
// the files listed in pool_paths.h.
#include "kernels/cpu/pool.h"

#include <fmt/format.h>

#include "kernels/cpu/pool_paths.h"

namespace cleave::kernels::cpu {

std::string Pool2DGeometry::key() const {
  return fmt::format("x{},{},{},{} k{},{} s{},{} p{},{},{},{} y{},{}", n, c, h, w, kh, kw, stride_h,
                     stride_w, pad_top, pad_bottom, pad_left, pad_right, oh, ow);
}

namespace {

// NOTE [Pooling paths]
// Float32 pooling runs on the hand-written kernels below: a fast path for 2x2 windows of stride
// 2 without padding (NOTE [2x2 pooling fast path]), one for global pooling, and general kernels
// for every other geometry, all on cleave's plain nchw tensors. oneDNN 2.6 was slower on every
// shape measured: on AVX2 it pools plain nchw memory with scalar C++ (simple_nchw) and runs its
// JIT code only on channel-blocked nChw8c memory, which costs a reorder of every input and output,
// and its max pooling backward first reruns the forward pass to get a workspace. It stays as a
// comparison path (PoolPath::kOneDnn: tests check that it agrees, bench/pool_bench re-measures
// both; re-measure when oneDNN is upgraded). Measurements: bench/README.md, 'core'.
//
// NOTE [Max pooling backward recomputes]
// MaxPoolGrad takes x and dy and finds each window's first maximum again from x, rather than
// reading a record of the maxima saved by the forward pass: such a record (oneDNN's workspace)
// has a size and meaning private to the implementation that wrote it, the Float64 path has no
// such thing, and an extra output of MaxPool2D would be visible to graph passes and sharding
// rules. The hand-written kernels compare the window's cells again, which costs about one more
// pass over x; the oneDNN comparison path reruns its forward pass in forward_training mode to
// get the workspace, then runs its backward.

bool is_2x2_stride_2(const Pool2DGeometry& g) {
  return g.kh == 2 && g.kw == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_top == 0 &&
         g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0;
}

// One output per plane, whose window holds every cell of the plane.
bool is_global(const Pool2DGeometry& g) {
  const pool_paths::Window win = pool_paths::window(g, 0, 0);
  return g.oh == 1 && g.ow == 1 && win.r0 == 0 && win.r1 == g.h && win.c0 == 0 && win.c1 == g.w;
}

// The specialised hand-written kernels apply (NOTE [2x2 pooling fast path]).
bool fast_2x2(const Pool2DGeometry& g, PoolPath path) {
  return path == PoolPath::kAuto && is_2x2_stride_2(g);
}
bool fast_global(const Pool2DGeometry& g, PoolPath path) {
  return path == PoolPath::kAuto && is_global(g);
}

}  // namespace

void max_pool2d_forward(const Pool2DGeometry& g, const Tensor& x, const Tensor& y, PoolPath path) {
  if (y.numel() == 0) return;
  if (x.dtype() == DType::kFloat64)
    return pool_paths::reference_max_forward(g, x.data<double>(), y.data<double>());
  if (path == PoolPath::kOneDnn)
    return pool_paths::onednn_forward(g, dnnl::algorithm::pooling_max, x, y);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  if (fast_2x2(g, path)) return pool_paths::native_max_forward_2x2(g, xp, yp);
  if (fast_global(g, path)) return pool_paths::native_global_forward(g, /*max=*/true, xp, yp);
  pool_paths::native_max_forward(g, xp, yp);
}

void max_pool2d_backward(const Pool2DGeometry& g, const Tensor& x, const Tensor& dy,
                         const Tensor& dx, PoolPath path) {
  if (dx.numel() == 0) return;
  if (x.dtype() == DType::kFloat64) {
    return pool_paths::reference_max_backward(g, x.data<double>(), dy.data<double>(),
                                              dx.data<double>());
  }
  if (path == PoolPath::kOneDnn) return pool_paths::onednn_max_backward(g, x, dy, dx);
  const float* xp = x.data<float>();
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  if (fast_2x2(g, path)) return pool_paths::native_max_backward_2x2(g, xp, dyp, dxp);
  if (fast_global(g, path)) return pool_paths::native_global_max_backward(g, xp, dyp, dxp);
  pool_paths::native_max_backward(g, xp, dyp, dxp);
}

void avg_pool2d_forward(const Pool2DGeometry& g, const Tensor& x, const Tensor& y, PoolPath path) {
  if (y.numel() == 0) return;
  if (x.dtype() == DType::kFloat64)
    return pool_paths::reference_avg_forward(g, x.data<double>(), y.data<double>());
  if (path == PoolPath::kOneDnn) {
    return pool_paths::onednn_forward(g, dnnl::algorithm::pooling_avg_exclude_padding, x, y);
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  if (fast_2x2(g, path)) return pool_paths::native_avg_forward_2x2(g, xp, yp);
  if (fast_global(g, path)) return pool_paths::native_global_forward(g, /*max=*/false, xp, yp);
  pool_paths::native_avg_forward(g, xp, yp);
}

void avg_pool2d_backward(const Pool2DGeometry& g, const Tensor& dy, const Tensor& dx,
                         PoolPath path) {
  if (dx.numel() == 0) return;
  if (dy.dtype() == DType::kFloat64) {
    return pool_paths::reference_avg_backward(g, dy.data<double>(), dx.data<double>());
  }
  if (path == PoolPath::kOneDnn) return pool_paths::onednn_avg_backward(g, dy, dx);
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  if (fast_2x2(g, path)) return pool_paths::native_avg_backward_2x2(g, dyp, dxp);
  if (fast_global(g, path)) return pool_paths::native_global_avg_backward(g, dyp, dxp);
  pool_paths::native_avg_backward(g, dyp, dxp);
}

}  // namespace cleave::kernels::cpu
