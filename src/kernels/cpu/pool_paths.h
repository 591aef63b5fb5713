// The implementations behind pool.h, one file per path (NOTE [Pooling paths] in pool.cc), and the
// pieces they share. Internal to the kernels layer.
//   pool.cc            the public functions: pick a path for each call;
//   pool_fast.cc       Float32, hand-written: 2x2 windows of stride 2, and global pooling;
//   pool_general.cc    Float32, hand-written: every other geometry;
//   pool_onednn.cc     Float32 through oneDNN: the comparison path (PoolPath::kOneDnn);
//   pool_reference.cc  Float64: reference loops over each window's cells.
// Each path runs alone through the public functions, chosen by the geometry, PoolPath and the
// dtype (tests/kernels/pool_test.cc checks that all of them agree).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pool.h"

namespace cleave::kernels::cpu::pool_paths {

// ---- shared by the paths ----

// `candidate` replaces `best` only when strictly greater, so the first maximum stays (NOTE [Max
// pooling ties]). For floats and f32x8 alike.
template <typename V>
inline V keep_first_max(V best, V candidate) {
  return candidate > best ? candidate : best;
}

// The real rows [r0, r1) and columns [c0, c1) of window (i, j).
struct Window {
  int64_t r0, r1, c0, c1;
};

inline Window window(const Pool2DGeometry& g, int64_t i, int64_t j) {
  const int64_t r = i * g.stride_h - g.pad_top, c = j * g.stride_w - g.pad_left;
  return {std::max<int64_t>(r, 0), std::min(r + g.kh, g.h), std::max<int64_t>(c, 0),
          std::min(c + g.kw, g.w)};
}

// Runs plane(p) for each of the n·c planes, threaded when the tensor is large.
template <typename F>
void for_each_plane(const Pool2DGeometry& g, F&& plane) {
  parallel_for(g.n * g.c, g.n * g.c * g.h * g.w > kParallelGrain, plane);
}

// ---- Float32, hand-written: pool_fast.cc (NOTE [2x2 pooling fast path]) ----

// x (n, c, h, w) -> y (n, c, h / 2, w / 2) for 2x2 windows of stride 2 without padding.
void native_max_forward_2x2(const Pool2DGeometry& g, const float* x, float* y);
void native_avg_forward_2x2(const Pool2DGeometry& g, const float* x, float* y);
void native_max_backward_2x2(const Pool2DGeometry& g, const float* x, const float* dy, float* dx);
void native_avg_backward_2x2(const Pool2DGeometry& g, const float* dy, float* dx);

// Global pooling: one window covering each whole plane (is_global in pool.cc).
void native_global_forward(const Pool2DGeometry& g, bool max, const float* x, float* y);
void native_global_max_backward(const Pool2DGeometry& g, const float* x, const float* dy,
                                float* dx);
void native_global_avg_backward(const Pool2DGeometry& g, const float* dy, float* dx);

// ---- Float32, hand-written: pool_general.cc (any geometry) ----

void native_max_forward(const Pool2DGeometry& g, const float* x, float* y);
void native_avg_forward(const Pool2DGeometry& g, const float* x, float* y);
void native_max_backward(const Pool2DGeometry& g, const float* x, const float* dy, float* dx);
void native_avg_backward(const Pool2DGeometry& g, const float* dy, float* dx);

// ---- Float32 through oneDNN: pool_onednn.cc (PoolPath::kOneDnn) ----

// alg: dnnl::algorithm::pooling_max or pooling_avg_exclude_padding.
void onednn_forward(const Pool2DGeometry& g, dnnl::algorithm alg, const Tensor& x, const Tensor& y);
void onednn_max_backward(const Pool2DGeometry& g, const Tensor& x, const Tensor& dy,
                         const Tensor& dx);
void onednn_avg_backward(const Pool2DGeometry& g, const Tensor& dy, const Tensor& dx);

// ---- Float64: pool_reference.cc (instantiated for double) ----

template <typename T>
void reference_max_forward(const Pool2DGeometry& g, const T* x, T* y);
template <typename T>
void reference_max_backward(const Pool2DGeometry& g, const T* x, const T* dy, T* dx);
template <typename T>
void reference_avg_forward(const Pool2DGeometry& g, const T* x, T* y);
template <typename T>
void reference_avg_backward(const Pool2DGeometry& g, const T* dy, T* dx);

}  // namespace cleave::kernels::cpu::pool_paths
