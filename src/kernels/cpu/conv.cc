#include "kernels/cpu/conv.h"

#include <fmt/format.h>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/onednn_layout.h"

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
// NOTE [Convolution memory layouts]
// cleave tensors are plain row-major (NOTE [Tensor layout]): x and y are nchw, weights oihw
// (goihw with groups). oneDNN's fastest convolutions work on blocked layouts (nChw8c, OIhw8i8o on
// AVX2), which a caller gets by describing the tensors with format_tag::any and reordering its
// plain tensors in and out on every call. Blocked plus reorders measured faster on every pass of
// LeNet's convolutions except the backward passes of conv1, whose single input channel nChw8c
// pads to a block of 8; a sweep of the input channels put the crossover at 3. So every
// pass lets oneDNN choose (format_tag::any) and reorders, except the backward passes of
// convolutions with fewer than kMinBlockedChannels input channels, which stay on plain memory.
// Measurements: bench/README.md, 'core'.
// ---------------------------------------------------------------------------------------------

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr int64_t kMinBlockedChannels = 3;

enum class Pass { kForward, kBackwardData, kBackwardWeights };

struct ConvDescs {
  memory::desc src, weights, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

// The plain layouts of the three tensors, or format_tag::any for oneDNN to choose.
ConvDescs conv_descs(const Conv2DGeometry& g, bool any) {
  ConvDescs d;
  d.src = memory::desc({g.n, g.c, g.h, g.w}, dt::f32, any ? tag::any : tag::nchw);
  d.dst = memory::desc({g.n, g.o, g.oh, g.ow}, dt::f32, any ? tag::any : tag::nchw);
  if (g.group == 1) {
    d.weights = memory::desc({g.o, g.c, g.kh, g.kw}, dt::f32, any ? tag::any : tag::oihw);
  } else {
    d.weights = memory::desc({g.group, g.o / g.group, g.c / g.group, g.kh, g.kw}, dt::f32,
                             any ? tag::any : tag::goihw);
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

// One oneDNN convolution pass ready to run on plain tensors: it reads two tensors (in0, in1) and
// writes one (out), each through a bridge from / to the plain layout.
struct ConvPass {
  dnnl::primitive primitive;
  int in0_arg, in1_arg, out_arg;
  LayoutBridge in0, in1, out;
};

ConvPass make_pass(const Conv2DGeometry& g, Pass pass) {
  const bool any = pass == Pass::kForward || g.c >= kMinBlockedChannels;
  const ConvDescs plain = conv_descs(g, /*any=*/false);
  const ConvDescs d = conv_descs(g, any);
  const auto alg = dnnl::algorithm::convolution_direct;
  switch (pass) {
    case Pass::kForward: {
      const auto pd = forward_pd(d);
      return {dnnl::convolution_forward(pd),
              DNNL_ARG_SRC,
              DNNL_ARG_WEIGHTS,
              DNNL_ARG_DST,
              LayoutBridge::input(plain.src, pd.src_desc()),
              LayoutBridge::input(plain.weights, pd.weights_desc()),
              LayoutBridge::output(plain.dst, pd.dst_desc())};
    }
    case Pass::kBackwardData: {
      dnnl::convolution_backward_data::desc desc(alg, d.src, d.weights, d.dst, d.strides, d.dilates,
                                                 d.pad_l, d.pad_r);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, onednn_engine(),
                                                               forward_pd(d));
      return {dnnl::convolution_backward_data(pd),
              DNNL_ARG_DIFF_DST,
              DNNL_ARG_WEIGHTS,
              DNNL_ARG_DIFF_SRC,
              LayoutBridge::input(plain.dst, pd.diff_dst_desc()),
              LayoutBridge::input(plain.weights, pd.weights_desc()),
              LayoutBridge::output(plain.src, pd.diff_src_desc())};
    }
    case Pass::kBackwardWeights: {
      dnnl::convolution_backward_weights::desc desc(alg, d.src, d.weights, d.dst, d.strides,
                                                    d.dilates, d.pad_l, d.pad_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, onednn_engine(),
                                                                  forward_pd(d));
      return {dnnl::convolution_backward_weights(pd),
              DNNL_ARG_DIFF_DST,
              DNNL_ARG_SRC,
              DNNL_ARG_DIFF_WEIGHTS,
              LayoutBridge::input(plain.dst, pd.diff_dst_desc()),
              LayoutBridge::input(plain.src, pd.src_desc()),
              LayoutBridge::output(plain.weights, pd.diff_weights_desc())};
    }
  }
  CLEAVE_ASSERT(false, "unknown convolution pass");
}

// Runs the cached pass for `g` on plain buffers: out = pass(in0, in1).
void run_pass(const Conv2DGeometry& g, Pass pass, const Tensor& in0, const Tensor& in1,
              const Tensor& out) {
  static constexpr const char* kNames[] = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"};
  const ConvPass& p =
      cached_primitive<ConvPass>(std::string(kNames[static_cast<int>(pass)]) + " f32 " + g.key(),
                                 [&] { return make_pass(g, pass); });
  auto& stream = onednn_stream();
  dnnl::memory written = p.out.place_out(out.raw_data());
  p.primitive.execute(stream, {{p.in0_arg, p.in0.bring_in(in0.raw_data(), stream)},
                               {p.in1_arg, p.in1.bring_in(in1.raw_data(), stream)},
                               {p.out_arg, written}});
  p.out.take_out(written, out.raw_data(), stream);
  stream.wait();
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
  if (x.dtype() == DType::kFloat32) return run_pass(g, Pass::kForward, x, weight, y);
  reference_forward(g, x.data<double>(), weight.data<double>(), y.data<double>());
}

void conv2d_backward_input(const Conv2DGeometry& g, const Tensor& dy, const Tensor& weight,
                           const Tensor& dx) {
  if (dx.numel() == 0) return;
  if (empty_sum(g) || dy.numel() == 0) return dx.fill(0);
  if (dy.dtype() == DType::kFloat32) return run_pass(g, Pass::kBackwardData, dy, weight, dx);
  reference_backward_input(g, dy.data<double>(), weight.data<double>(), dx.data<double>());
}

void conv2d_backward_filter(const Conv2DGeometry& g, const Tensor& dy, const Tensor& x,
                            const Tensor& dweight) {
  if (dweight.numel() == 0) return;
  if (empty_sum(g) || dy.numel() == 0) return dweight.fill(0);
  if (dy.dtype() == DType::kFloat32) return run_pass(g, Pass::kBackwardWeights, dy, x, dweight);
  reference_backward_filter(g, dy.data<double>(), x.data<double>(), dweight.data<double>());
}

}  // namespace cleave::kernels::cpu
