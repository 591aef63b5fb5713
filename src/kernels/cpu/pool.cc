#include "kernels/cpu/pool.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn.h"

namespace cleave::kernels::cpu {

std::string Pool2DGeometry::key() const {
  return fmt::format("x{},{},{},{} k{},{} s{},{} p{},{},{},{} y{},{}", n, c, h, w, kh, kw, stride_h,
                     stride_w, pad_top, pad_bottom, pad_left, pad_right, oh, ow);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Float32: oneDNN, plain nchw memory (NOTE [Plain NCHW memory for convolutions]).
//
// NOTE [Max pooling backward recomputes]
// oneDNN's max pooling backward reads a workspace that its forward_training pass writes (where
// each maximum was found). MaxPool2D could return that workspace as an extra hidden output, but
// its size and meaning are private to the oneDNN implementation chosen (u8 or s32 offsets), the
// Float64 path has no such thing, and an extra output would be visible to graph passes and
// sharding rules. MaxPoolGrad instead takes x and reruns the forward pass in forward_training
// mode to get the workspace, then runs the backward. The extra forward pooling is one pass over
// x, small next to the convolutions around it; MaxPool2D's own forward uses forward_inference,
// which writes no workspace.
// ---------------------------------------------------------------------------------------------

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct PoolDescs {
  memory::desc src, dst;
  memory::dims strides, kernel, pad_l, pad_r;
};

PoolDescs pool_descs(const Pool2DGeometry& g) {
  return {memory::desc({g.n, g.c, g.h, g.w}, dt::f32, tag::nchw),
          memory::desc({g.n, g.c, g.oh, g.ow}, dt::f32, tag::nchw),
          {g.stride_h, g.stride_w},
          {g.kh, g.kw},
          {g.pad_top, g.pad_left},
          {g.pad_bottom, g.pad_right}};
}

dnnl::pooling_forward::primitive_desc forward_pd(const Pool2DGeometry& g, dnnl::algorithm alg,
                                                 dnnl::prop_kind prop) {
  const PoolDescs d = pool_descs(g);
  dnnl::pooling_forward::desc desc(prop, alg, d.src, d.dst, d.strides, d.kernel, d.pad_l, d.pad_r);
  return {desc, onednn_engine()};
}

const char* alg_name(dnnl::algorithm alg) {
  return alg == dnnl::algorithm::pooling_max ? "max" : "avg";
}

void onednn_forward(const Pool2DGeometry& g, dnnl::algorithm alg, const Tensor& x,
                    const Tensor& y) {
  auto& prim = cached_primitive<dnnl::pooling_forward>(
      fmt::format("Pool2D {} inference f32 {}", alg_name(alg), g.key()), [&] {
        return dnnl::pooling_forward(forward_pd(g, alg, dnnl::prop_kind::forward_inference));
      });
  const PoolDescs d = pool_descs(g);
  memory src(d.src, onednn_engine(), x.raw_data());
  memory dst(d.dst, onednn_engine(), y.raw_data());
  prim.execute(onednn_stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  onednn_stream().wait();
}

struct MaxPoolBackward {
  dnnl::pooling_forward::primitive_desc forward_pd;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward backward;
};

void onednn_max_backward(const Pool2DGeometry& g, const Tensor& x, const Tensor& dy,
                         const Tensor& dx) {
  auto& p = cached_primitive<MaxPoolBackward>("MaxPoolGrad f32 " + g.key(), [&] {
    const PoolDescs d = pool_descs(g);
    auto fwd = forward_pd(g, dnnl::algorithm::pooling_max, dnnl::prop_kind::forward_training);
    dnnl::pooling_backward::desc desc(dnnl::algorithm::pooling_max, d.src, d.dst, d.strides,
                                      d.kernel, d.pad_l, d.pad_r);
    dnnl::pooling_backward::primitive_desc bwd(desc, onednn_engine(), fwd);
    return MaxPoolBackward{fwd, dnnl::pooling_forward(fwd), dnnl::pooling_backward(bwd)};
  });
  const PoolDescs d = pool_descs(g);
  auto& engine = onednn_engine();
  memory src(d.src, engine, x.raw_data());
  memory scratch_dst(d.dst, engine);  // the recomputed forward output, discarded
  memory workspace(p.forward_pd.workspace_desc(), engine);
  p.forward.execute(
      onednn_stream(),
      {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, scratch_dst}, {DNNL_ARG_WORKSPACE, workspace}});
  memory diff_dst(d.dst, engine, dy.raw_data());
  memory diff_src(d.src, engine, dx.raw_data());
  p.backward.execute(onednn_stream(), {{DNNL_ARG_DIFF_DST, diff_dst},
                                       {DNNL_ARG_DIFF_SRC, diff_src},
                                       {DNNL_ARG_WORKSPACE, workspace}});
  onednn_stream().wait();
}

void onednn_avg_backward(const Pool2DGeometry& g, const Tensor& dy, const Tensor& dx) {
  constexpr auto alg = dnnl::algorithm::pooling_avg_exclude_padding;
  auto& prim = cached_primitive<dnnl::pooling_backward>("AvgPoolGrad f32 " + g.key(), [&] {
    const PoolDescs d = pool_descs(g);
    dnnl::pooling_backward::desc desc(alg, d.src, d.dst, d.strides, d.kernel, d.pad_l, d.pad_r);
    return dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
        desc, onednn_engine(), forward_pd(g, alg, dnnl::prop_kind::forward_training)));
  });
  const PoolDescs d = pool_descs(g);
  memory diff_dst(d.dst, onednn_engine(), dy.raw_data());
  memory diff_src(d.src, onednn_engine(), dx.raw_data());
  prim.execute(onednn_stream(), {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_src}});
  onednn_stream().wait();
}

// ---------------------------------------------------------------------------------------------
// Float64: reference loops over each window's real cells [r0, r1) x [c0, c1).
// ---------------------------------------------------------------------------------------------

struct Window {
  int64_t r0, r1, c0, c1;
};

inline Window window(const Pool2DGeometry& g, int64_t i, int64_t j) {
  const int64_t r = i * g.stride_h - g.pad_top, c = j * g.stride_w - g.pad_left;
  return {std::max<int64_t>(r, 0), std::min(r + g.kh, g.h), std::max<int64_t>(c, 0),
          std::min(c + g.kw, g.w)};
}

// Offset within one (h, w) plane of the first maximum of window (i, j).
template <typename T>
int64_t argmax_in_window(const Pool2DGeometry& g, const T* plane, int64_t i, int64_t j) {
  const Window win = window(g, i, j);
  int64_t best = win.r0 * g.w + win.c0;
  for (int64_t r = win.r0; r < win.r1; ++r) {
    for (int64_t c = win.c0; c < win.c1; ++c) {
      if (plane[r * g.w + c] > plane[best]) best = r * g.w + c;
    }
  }
  return best;
}

template <typename T>
void reference_max_forward(const Pool2DGeometry& g, const T* x, T* y) {
#pragma omp parallel for if (g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain)
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T* plane = x + p * g.h * g.w;
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        y[(p * g.oh + i) * g.ow + j] = plane[argmax_in_window(g, plane, i, j)];
      }
    }
  }
}

template <typename T>
void reference_max_backward(const Pool2DGeometry& g, const T* x, const T* dy, T* dx) {
#pragma omp parallel for if (g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain)
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T* plane = x + p * g.h * g.w;
    T* dplane = dx + p * g.h * g.w;
    std::fill(dplane, dplane + g.h * g.w, T(0));
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        dplane[argmax_in_window(g, plane, i, j)] += dy[(p * g.oh + i) * g.ow + j];
      }
    }
  }
}

template <typename T>
void reference_avg_forward(const Pool2DGeometry& g, const T* x, T* y) {
#pragma omp parallel for if (g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain)
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T* plane = x + p * g.h * g.w;
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        const Window win = window(g, i, j);
        T sum = 0;
        for (int64_t r = win.r0; r < win.r1; ++r) {
          for (int64_t c = win.c0; c < win.c1; ++c) sum += plane[r * g.w + c];
        }
        y[(p * g.oh + i) * g.ow + j] = sum / T((win.r1 - win.r0) * (win.c1 - win.c0));
      }
    }
  }
}

template <typename T>
void reference_avg_backward(const Pool2DGeometry& g, const T* dy, T* dx) {
#pragma omp parallel for if (g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain)
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    T* dplane = dx + p * g.h * g.w;
    std::fill(dplane, dplane + g.h * g.w, T(0));
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        const Window win = window(g, i, j);
        const T share = dy[(p * g.oh + i) * g.ow + j] / T((win.r1 - win.r0) * (win.c1 - win.c0));
        for (int64_t r = win.r0; r < win.r1; ++r) {
          for (int64_t c = win.c0; c < win.c1; ++c) dplane[r * g.w + c] += share;
        }
      }
    }
  }
}

}  // namespace

void max_pool2d_forward(const Pool2DGeometry& g, const Tensor& x, const Tensor& y) {
  if (y.numel() == 0) return;
  if (x.dtype() == DType::kFloat32) return onednn_forward(g, dnnl::algorithm::pooling_max, x, y);
  reference_max_forward(g, x.data<double>(), y.data<double>());
}

void max_pool2d_backward(const Pool2DGeometry& g, const Tensor& x, const Tensor& dy,
                         const Tensor& dx) {
  if (dx.numel() == 0) return;
  if (x.dtype() == DType::kFloat32) return onednn_max_backward(g, x, dy, dx);
  reference_max_backward(g, x.data<double>(), dy.data<double>(), dx.data<double>());
}

void avg_pool2d_forward(const Pool2DGeometry& g, const Tensor& x, const Tensor& y) {
  if (y.numel() == 0) return;
  if (x.dtype() == DType::kFloat32) {
    return onednn_forward(g, dnnl::algorithm::pooling_avg_exclude_padding, x, y);
  }
  reference_avg_forward(g, x.data<double>(), y.data<double>());
}

void avg_pool2d_backward(const Pool2DGeometry& g, const Tensor& dy, const Tensor& dx) {
  if (dx.numel() == 0) return;
  if (dy.dtype() == DType::kFloat32) return onednn_avg_backward(g, dy, dx);
  reference_avg_backward(g, dy.data<double>(), dx.data<double>());
}

}  // namespace cleave::kernels::cpu
