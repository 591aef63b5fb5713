#include "kernels/cpu/pool.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/onednn_layout.h"
#include "parallel.h"

namespace cleave::kernels::cpu {

std::string Pool2DGeometry::key() const {
  return fmt::format("x{},{},{},{} k{},{} s{},{} p{},{},{},{} y{},{}", n, c, h, w, kh, kw, stride_h,
                     stride_w, pad_top, pad_bottom, pad_left, pad_right, oh, ow);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Float32: oneDNN.
//
// NOTE [Pooling memory layouts]
// oneDNN 2.6 on AVX2 pools plain nchw memory with a scalar C++ implementation (simple_nchw) and
// channel-blocked nChw8c memory with JIT code. Measured as for NOTE [Convolution memory layouts]
// (1 thread, f32, 2x2 stride 2, us; "blocked" includes the reorders of the inputs and outputs,
// backward includes the forward_training pass that writes the workspace):
//
//                        max fwd          max bwd           avg fwd         avg bwd
//   x (N, C, H, W)       plain  blocked   plain   blocked   plain  blocked  plain  blocked
//   32x6x28x28  (LeNet)    983    321     1886     2955       714    169    1094     455
//   32x8x28x28            1310    227     2496     1048       952    125    1452     394
//   32x16x10x10 (LeNet)    332     67      646      293       247     66     394     132
//   32x64x32x32          13779   7051    26477    11813     10211   6489   15618    4513
//
// So pooling runs on nChw8c with reorders, except max pooling backward when C is not a multiple
// of the block of 8: the JIT max backward is then slower than the plain implementation.
//
// NOTE [Max pooling backward recomputes]
// oneDNN's max pooling backward reads a workspace that its forward_training pass writes (where
// each maximum was found). MaxPool2D could return that workspace as an extra hidden output, but
// its size and meaning are private to the oneDNN implementation chosen (u8 or s32 offsets, in
// the pass's own layout), the Float64 path has no such thing, and an extra output would be
// visible to graph passes and sharding rules. MaxPoolGrad instead takes x and reruns the forward
// pass in forward_training mode to get the workspace, then runs the backward. The extra forward
// pooling is one pass over x, small next to the convolutions around it; MaxPool2D's own forward
// uses forward_inference, which writes no workspace.
// ---------------------------------------------------------------------------------------------

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr int64_t kChannelBlock = 8;  // nChw8c

struct PoolDescs {
  memory::desc src, dst;                // plain nchw: cleave's tensors
  memory::desc src_layout, dst_layout;  // what the primitives work on
  memory::dims strides, kernel, pad_l, pad_r;
};

PoolDescs pool_descs(const Pool2DGeometry& g, bool blocked) {
  const tag layout = blocked ? tag::nChw8c : tag::nchw;
  return {memory::desc({g.n, g.c, g.h, g.w}, dt::f32, tag::nchw),
          memory::desc({g.n, g.c, g.oh, g.ow}, dt::f32, tag::nchw),
          memory::desc({g.n, g.c, g.h, g.w}, dt::f32, layout),
          memory::desc({g.n, g.c, g.oh, g.ow}, dt::f32, layout),
          {g.stride_h, g.stride_w},
          {g.kh, g.kw},
          {g.pad_top, g.pad_left},
          {g.pad_bottom, g.pad_right}};
}

dnnl::pooling_forward::primitive_desc forward_pd(const PoolDescs& d, dnnl::algorithm alg,
                                                 dnnl::prop_kind prop) {
  dnnl::pooling_forward::desc desc(prop, alg, d.src_layout, d.dst_layout, d.strides, d.kernel,
                                   d.pad_l, d.pad_r);
  return {desc, onednn_engine()};
}

const char* alg_name(dnnl::algorithm alg) {
  return alg == dnnl::algorithm::pooling_max ? "max" : "avg";
}

struct PoolForward {
  dnnl::pooling_forward primitive;
  LayoutBridge src, dst;
};

void onednn_forward(const Pool2DGeometry& g, dnnl::algorithm alg, const Tensor& x,
                    const Tensor& y) {
  const PoolForward& p = cached_primitive<PoolForward>(
      fmt::format("Pool2D {} inference f32 {}", alg_name(alg), g.key()), [&] {
        const PoolDescs d = pool_descs(g, /*blocked=*/true);
        return PoolForward{
            dnnl::pooling_forward(forward_pd(d, alg, dnnl::prop_kind::forward_inference)),
            LayoutBridge::input(d.src, d.src_layout), LayoutBridge::output(d.dst, d.dst_layout)};
      });
  auto& stream = onednn_stream();
  memory dst = p.dst.place_out(y.raw_data());
  p.primitive.execute(stream,
                      {{DNNL_ARG_SRC, p.src.bring_in(x.raw_data(), stream)}, {DNNL_ARG_DST, dst}});
  p.dst.take_out(dst, y.raw_data(), stream);
  stream.wait();
}

struct MaxPoolBackward {
  dnnl::pooling_forward forward;  // forward_training, for the workspace
  memory::desc forward_dst, workspace;
  dnnl::pooling_backward backward;
  LayoutBridge src, diff_dst, diff_src;
};

void onednn_max_backward(const Pool2DGeometry& g, const Tensor& x, const Tensor& dy,
                         const Tensor& dx) {
  const MaxPoolBackward& p = cached_primitive<MaxPoolBackward>("MaxPoolGrad f32 " + g.key(), [&] {
    const PoolDescs d = pool_descs(g, /*blocked=*/g.c % kChannelBlock == 0);
    const auto alg = dnnl::algorithm::pooling_max;
    auto fwd = forward_pd(d, alg, dnnl::prop_kind::forward_training);
    dnnl::pooling_backward::desc desc(alg, d.src_layout, d.dst_layout, d.strides, d.kernel, d.pad_l,
                                      d.pad_r);
    dnnl::pooling_backward::primitive_desc bwd(desc, onednn_engine(), fwd);
    return MaxPoolBackward{dnnl::pooling_forward(fwd),
                           fwd.dst_desc(),
                           fwd.workspace_desc(),
                           dnnl::pooling_backward(bwd),
                           LayoutBridge::input(d.src, d.src_layout),
                           LayoutBridge::input(d.dst, d.dst_layout),
                           LayoutBridge::output(d.src, d.src_layout)};
  });
  auto& engine = onednn_engine();
  auto& stream = onednn_stream();
  memory recomputed_dst(p.forward_dst, engine);  // discarded
  memory workspace(p.workspace, engine);
  p.forward.execute(stream, {{DNNL_ARG_SRC, p.src.bring_in(x.raw_data(), stream)},
                             {DNNL_ARG_DST, recomputed_dst},
                             {DNNL_ARG_WORKSPACE, workspace}});
  memory diff_src = p.diff_src.place_out(dx.raw_data());
  p.backward.execute(stream, {{DNNL_ARG_DIFF_DST, p.diff_dst.bring_in(dy.raw_data(), stream)},
                              {DNNL_ARG_DIFF_SRC, diff_src},
                              {DNNL_ARG_WORKSPACE, workspace}});
  p.diff_src.take_out(diff_src, dx.raw_data(), stream);
  stream.wait();
}

struct AvgPoolBackward {
  dnnl::pooling_backward primitive;
  LayoutBridge diff_dst, diff_src;
};

void onednn_avg_backward(const Pool2DGeometry& g, const Tensor& dy, const Tensor& dx) {
  const AvgPoolBackward& p = cached_primitive<AvgPoolBackward>("AvgPoolGrad f32 " + g.key(), [&] {
    const PoolDescs d = pool_descs(g, /*blocked=*/true);
    constexpr auto alg = dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_backward::desc desc(alg, d.src_layout, d.dst_layout, d.strides, d.kernel, d.pad_l,
                                      d.pad_r);
    return AvgPoolBackward{
        dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
            desc, onednn_engine(), forward_pd(d, alg, dnnl::prop_kind::forward_training))),
        LayoutBridge::input(d.dst, d.dst_layout), LayoutBridge::output(d.src, d.src_layout)};
  });
  auto& stream = onednn_stream();
  memory diff_src = p.diff_src.place_out(dx.raw_data());
  p.primitive.execute(stream, {{DNNL_ARG_DIFF_DST, p.diff_dst.bring_in(dy.raw_data(), stream)},
                               {DNNL_ARG_DIFF_SRC, diff_src}});
  p.diff_src.take_out(diff_src, dx.raw_data(), stream);
  stream.wait();
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
  parallel_for(g.n * g.c, g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        y[(p * g.oh + i) * g.ow + j] = plane[argmax_in_window(g, plane, i, j)];
      }
    }
  });
}

template <typename T>
void reference_max_backward(const Pool2DGeometry& g, const T* x, const T* dy, T* dx) {
  parallel_for(g.n * g.c, g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    T* dplane = dx + p * g.h * g.w;
    std::fill(dplane, dplane + g.h * g.w, T(0));
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        dplane[argmax_in_window(g, plane, i, j)] += dy[(p * g.oh + i) * g.ow + j];
      }
    }
  });
}

template <typename T>
void reference_avg_forward(const Pool2DGeometry& g, const T* x, T* y) {
  parallel_for(g.n * g.c, g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain, [&](int64_t p) {
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
  });
}

template <typename T>
void reference_avg_backward(const Pool2DGeometry& g, const T* dy, T* dx) {
  parallel_for(g.n * g.c, g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain, [&](int64_t p) {
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
  });
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
