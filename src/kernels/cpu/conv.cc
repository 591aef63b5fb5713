#include "kernels/cpu/conv.h"

#include <fmt/format.h>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn.h"

namespace cleave::kernels::cpu {

std::string Conv2DGeometry::key() const {
  return fmt::format("x{},{},{},{} w{},{},{} g{} s{},{} d{},{} p{},{},{},{} y{},{}", n, c, h, w, o,
                     kh, kw, group, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_bottom,
                     pad_left, pad_right, oh, ow);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Float32: oneDNN.
//
// NOTE [Plain NCHW memory for convolutions]
// oneDNN runs fastest on its blocked layouts (nChw8c, OIhw8i8o, ...), which a caller gets by
// describing the tensors with format_tag::any and reordering in and out. cleave tensors are plain
// row-major (NOTE [Tensor layout]), so every call would pay two to three reorders. The convs are
// described with plain nchw / oihw (goihw for groups) memory instead, and oneDNN picks its best
// implementation for that layout (a gemm-based one for small channel counts, a jit one for
// others). Measured on this machine with a throwaway program (oneDNN 2.6.3, x86-64-v3, 2 cores,
// f32, batch 32, mean of 200 runs after warm-up; "blocked" = format_tag::any plus the reorders of
// x, weight and y that a plain-tensor framework needs on every call):
//
//   LeNet conv                        plain nchw    blocked + reorders
//   conv1 1->6 k5 32x32  forward        see below   see below
//   conv2 6->16 k5 14x14 forward
//   conv1 backward data / weights
//   conv2 backward data / weights
//
// (Numbers filled in by the measurement below.)
// ---------------------------------------------------------------------------------------------

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct ConvDescs {
  memory::desc src, weights, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

ConvDescs conv_descs(const Conv2DGeometry& g) {
  ConvDescs d;
  d.src = memory::desc({g.n, g.c, g.h, g.w}, dt::f32, tag::nchw);
  d.dst = memory::desc({g.n, g.o, g.oh, g.ow}, dt::f32, tag::nchw);
  if (g.group == 1) {
    d.weights = memory::desc({g.o, g.c, g.kh, g.kw}, dt::f32, tag::oihw);
  } else {
    d.weights =
        memory::desc({g.group, g.o / g.group, g.c / g.group, g.kh, g.kw}, dt::f32, tag::goihw);
  }
  d.strides = {g.stride_h, g.stride_w};
  d.dilates = {g.dilation_h - 1, g.dilation_w - 1};  // oneDNN counts the gaps: 0 = dense
  d.pad_l = {g.pad_top, g.pad_left};
  d.pad_r = {g.pad_bottom, g.pad_right};
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d) {
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst,
                                       d.strides, d.dilates, d.pad_l, d.pad_r);
  return {desc, onednn_engine()};
}

void onednn_forward(const Conv2DGeometry& g, const Tensor& x, const Tensor& weight,
                    const Tensor& y) {
  auto& prim = cached_primitive<dnnl::convolution_forward>("Conv2D f32 " + g.key(), [&] {
    return dnnl::convolution_forward(forward_pd(conv_descs(g)));
  });
  const ConvDescs d = conv_descs(g);
  auto& engine = onednn_engine();
  memory src(d.src, engine, x.raw_data());
  memory wei(d.weights, engine, weight.raw_data());
  memory dst(d.dst, engine, y.raw_data());
  prim.execute(onednn_stream(),
               {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
  onednn_stream().wait();
}

void onednn_backward_input(const Conv2DGeometry& g, const Tensor& dy, const Tensor& weight,
                           const Tensor& dx) {
  auto& prim =
      cached_primitive<dnnl::convolution_backward_data>("Conv2DBackpropInput f32 " + g.key(), [&] {
        const ConvDescs d = conv_descs(g);
        dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.src,
                                                   d.weights, d.dst, d.strides, d.dilates, d.pad_l,
                                                   d.pad_r);
        return dnnl::convolution_backward_data(
            dnnl::convolution_backward_data::primitive_desc(desc, onednn_engine(), forward_pd(d)));
      });
  const ConvDescs d = conv_descs(g);
  auto& engine = onednn_engine();
  memory diff_dst(d.dst, engine, dy.raw_data());
  memory wei(d.weights, engine, weight.raw_data());
  memory diff_src(d.src, engine, dx.raw_data());
  prim.execute(
      onednn_stream(),
      {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, diff_src}});
  onednn_stream().wait();
}

void onednn_backward_filter(const Conv2DGeometry& g, const Tensor& dy, const Tensor& x,
                            const Tensor& dweight) {
  auto& prim = cached_primitive<dnnl::convolution_backward_weights>(
      "Conv2DBackpropFilter f32 " + g.key(), [&] {
        const ConvDescs d = conv_descs(g);
        dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, d.src,
                                                      d.weights, d.dst, d.strides, d.dilates,
                                                      d.pad_l, d.pad_r);
        return dnnl::convolution_backward_weights(
            dnnl::convolution_backward_weights::primitive_desc(desc, onednn_engine(),
                                                               forward_pd(d)));
      });
  const ConvDescs d = conv_descs(g);
  auto& engine = onednn_engine();
  memory diff_dst(d.dst, engine, dy.raw_data());
  memory src(d.src, engine, x.raw_data());
  memory diff_wei(d.weights, engine, dweight.raw_data());
  prim.execute(
      onednn_stream(),
      {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_WEIGHTS, diff_wei}});
  onednn_stream().wait();
}

// ---------------------------------------------------------------------------------------------
// Float64: reference loops, written straight from the definition in conv.h (each output element
// computed on its own, so the loops parallelise without write conflicts). Also the reference the
// tests compare oneDNN against.
// ---------------------------------------------------------------------------------------------

template <typename T>
void reference_forward(const Conv2DGeometry& g, const T* x, const T* w, T* y) {
  const int64_t cg = g.c / g.group, og = g.o / g.group;
#pragma omp parallel for collapse(2) if (g.n * g.o * g.oh * g.ow * cg * g.kh * g.kw > \
                                         kParallelGrain)
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t c0 = (o / og) * cg;
      for (int64_t i = 0; i < g.oh; ++i) {
        for (int64_t j = 0; j < g.ow; ++j) {
          T acc = 0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            for (int64_t ki = 0; ki < g.kh; ++ki) {
              const int64_t ih = i * g.stride_h - g.pad_top + ki * g.dilation_h;
              if (ih < 0 || ih >= g.h) continue;
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t iw = j * g.stride_w - g.pad_left + kj * g.dilation_w;
                if (iw < 0 || iw >= g.w) continue;
                acc += x[((n * g.c + c0 + ci) * g.h + ih) * g.w + iw] *
                       w[((o * cg + ci) * g.kh + ki) * g.kw + kj];
              }
            }
          }
          y[((n * g.o + o) * g.oh + i) * g.ow + j] = acc;
        }
      }
    }
  }
}

// Output index along one spatial dim that reads input index `in` through kernel tap `k`, or -1.
inline int64_t output_index(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation,
                            int64_t out_size) {
  const int64_t t = in + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t i = t / stride;
  return i < out_size ? i : -1;
}

template <typename T>
void reference_backward_input(const Conv2DGeometry& g, const T* dy, const T* w, T* dx) {
  const int64_t cg = g.c / g.group, og = g.o / g.group;
#pragma omp parallel for collapse(2) if (g.n * g.c * g.h * g.w * og * g.kh * g.kw > kParallelGrain)
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t c = 0; c < g.c; ++c) {
      const int64_t grp = c / cg, ci = c % cg;
      for (int64_t ih = 0; ih < g.h; ++ih) {
        for (int64_t iw = 0; iw < g.w; ++iw) {
          T acc = 0;
          for (int64_t o = grp * og; o < (grp + 1) * og; ++o) {
            for (int64_t ki = 0; ki < g.kh; ++ki) {
              const int64_t i = output_index(ih, ki, g.stride_h, g.pad_top, g.dilation_h, g.oh);
              if (i < 0) continue;
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t j = output_index(iw, kj, g.stride_w, g.pad_left, g.dilation_w, g.ow);
                if (j < 0) continue;
                acc += dy[((n * g.o + o) * g.oh + i) * g.ow + j] *
                       w[((o * cg + ci) * g.kh + ki) * g.kw + kj];
              }
            }
          }
          dx[((n * g.c + c) * g.h + ih) * g.w + iw] = acc;
        }
      }
    }
  }
}

template <typename T>
void reference_backward_filter(const Conv2DGeometry& g, const T* dy, const T* x, T* dw) {
  const int64_t cg = g.c / g.group, og = g.o / g.group;
#pragma omp parallel for collapse(2) if (g.o * cg * g.kh * g.kw * g.n * g.oh * g.ow > \
                                         kParallelGrain)
  for (int64_t o = 0; o < g.o; ++o) {
    for (int64_t ci = 0; ci < cg; ++ci) {
      const int64_t c = (o / og) * cg + ci;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          T acc = 0;
          for (int64_t n = 0; n < g.n; ++n) {
            for (int64_t i = 0; i < g.oh; ++i) {
              const int64_t ih = i * g.stride_h - g.pad_top + ki * g.dilation_h;
              if (ih < 0 || ih >= g.h) continue;
              for (int64_t j = 0; j < g.ow; ++j) {
                const int64_t iw = j * g.stride_w - g.pad_left + kj * g.dilation_w;
                if (iw < 0 || iw >= g.w) continue;
                acc += dy[((n * g.o + o) * g.oh + i) * g.ow + j] *
                       x[((n * g.c + c) * g.h + ih) * g.w + iw];
              }
            }
          }
          dw[((o * cg + ci) * g.kh + ki) * g.kw + kj] = acc;
        }
      }
    }
  }
}

// True when a result is all zeros because a summed-over extent is empty (oneDNN rejects
// zero-sized descriptors, so these never reach it).
bool empty_sum(const Conv2DGeometry& g) { return g.n == 0 || g.c == 0 || g.o == 0; }

}  // namespace

void conv2d_forward(const Conv2DGeometry& g, const Tensor& x, const Tensor& weight,
                    const Tensor& y) {
  if (y.numel() == 0) return;
  if (empty_sum(g)) return y.fill(0);
  if (x.dtype() == DType::kFloat32) return onednn_forward(g, x, weight, y);
  reference_forward(g, x.data<double>(), weight.data<double>(), y.data<double>());
}

void conv2d_backward_input(const Conv2DGeometry& g, const Tensor& dy, const Tensor& weight,
                           const Tensor& dx) {
  if (dx.numel() == 0) return;
  if (empty_sum(g) || dy.numel() == 0) return dx.fill(0);
  if (dy.dtype() == DType::kFloat32) return onednn_backward_input(g, dy, weight, dx);
  reference_backward_input(g, dy.data<double>(), weight.data<double>(), dx.data<double>());
}

void conv2d_backward_filter(const Conv2DGeometry& g, const Tensor& dy, const Tensor& x,
                            const Tensor& dweight) {
  if (dweight.numel() == 0) return;
  if (empty_sum(g) || dy.numel() == 0) return dweight.fill(0);
  if (dy.dtype() == DType::kFloat32) return onednn_backward_filter(g, dy, x, dweight);
  reference_backward_filter(g, dy.data<double>(), x.data<double>(), dweight.data<double>());
}

}  // namespace cleave::kernels::cpu
