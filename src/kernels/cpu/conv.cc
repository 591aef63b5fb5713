#include "kernels/cpu/conv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/onednn_layout.h"
#include "kernels/cpu/simd.h"

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
  Tensor in0_copy, in1_copy, out_copy;  // NOTE [Bridge buffers from the allocation cache]
  dnnl::memory written = p.out.place_out(out.raw_data(), out_copy);
  p.primitive.execute(stream, {{p.in0_arg, p.in0.bring_in(in0.raw_data(), stream, in0_copy)},
                               {p.in1_arg, p.in1.bring_in(in1.raw_data(), stream, in1_copy)},
                               {p.out_arg, written}});
  p.out.take_out(written, out.raw_data(), stream);
  stream.wait();
}

// ---------------------------------------------------------------------------------------------
// Float32: convolutions of few input channels, by hand.
//
// NOTE [Convolutions of few input channels]
// A dense convolution (group 1, stride 1, dilation 1, kernel width <= kMaxDirectKw) with fewer
// than kMinBlockedChannels input channels runs its forward and filter-gradient passes on the
// hand-written kernels below rather than oneDNN. oneDNN's plain-layout backward-weights pass for
// such a convolution is its im2col + GEMM one ("x64:gemm:jit"), whose per-image products
// (o x c·kh·kw x oh·ow: 6 x 25 x 784 for LeNet's conv1) are too small for a GEMM: LeNet's conv1
// filter gradient ran at 9 GFLOP/s, 0.80 ms of a 2.5 ms step. Its forward pass, on blocked layouts,
// pads the single input channel to a block of 8 and reorders the output back.
// Both kernels read xp, x with its padding made explicit (zeros) and its rows padded so that a
// row of ow output columns rounded up to whole 8-lane vectors, shifted by any tap j < kw, stays
// inside it (PaddedInput). Both vectorise along the output row x:
//   forward:  y[n, o, y, x]  = sum over c, i, j of w[o, c, i, j] * xp[n, c, y + i, x + j]:
//             a GEMM micro-kernel (w by the shifted rows of xp): a tile of up to six output
//             channels by two vectors of a row keeps its 12 accumulators in registers over the
//             c·kh·kw taps, with one shifted load of xp per vector and tap and one broadcast
//             weight per channel and tap; images run in parallel;
//   filter:   dw[o, c, i, j] = sum over n, y, x of dy[n, o, y, x] * xp[n, c, y + i, x + j]:
//             a row of dy (copied per image into a buffer padded with zeros to whole vectors),
//             8 lanes at a time, meets row y + i of xp shifted by j; two output channels and the
//             kw taps keep 2·kw accumulators in registers over an image's rows, carried across
//             images, and each lane's partial sums are added at the end. Output channel pairs run
//             in parallel; each dw element is summed in one fixed order whatever the threads.
// The backward pass to the input stays on oneDNN (a network's first convolution, the usual one
// with few input channels, has none). bench/conv_bench compares the paths (bench/README.md,
// "Convolutions of one or two input channels"); tests/kernels/conv_paths_test.cc and
// tests/ops/conv_test.cc check them against the Float64 reference loops.
// ---------------------------------------------------------------------------------------------

constexpr int64_t kMaxDirectKw = 7;
// The forward kernel wins from this many taps (c·kh·kw) on; below, oneDNN (NOTE [Convolutions of
// few input channels]).
constexpr int64_t kMinDirectForwardTaps = 25;

// Whether the hand-written kernels take g at all, and whether they run it on `path`.
bool direct_supported(const Conv2DGeometry& g) {
  return g.group == 1 && g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 &&
         g.dilation_w == 1 && g.kw <= kMaxDirectKw;
}

bool direct_path(const Conv2DGeometry& g, Pass pass, ConvPath path) {
  if (path == ConvPath::kDirect) {
    CLEAVE_CHECK_ARG(direct_supported(g),
                     "ConvPath::kDirect: convolution {} is not one the hand-written kernels take "
                     "(group 1, stride 1, dilation 1, kernel width <= {})",
                     g.key(), kMaxDirectKw);
    return true;
  }
  return path == ConvPath::kAuto && g.c < kMinBlockedChannels && direct_supported(g) &&
         (pass == Pass::kBackwardWeights || g.c * g.kh * g.kw >= kMinDirectForwardTaps);
}

int64_t whole_vectors(int64_t n) { return (n + simd::kLanes - 1) / simd::kLanes * simd::kLanes; }

// x (n, c, h, w) as xp (n, c, hp, wp): xp[n, c, r, q] = x[n, c, r - pad_top, q - pad_left], 0
// outside x; hp = oh + kh - 1 rows, wp = whole_vectors(ow) + kw - 1 columns.
// The buffer comes from the CPU allocation cache (NOTE [CPU allocation cache] in
// src/core/storage.cc): a fresh vector of this size would be mmap'd and faulted in on every call.
class PaddedInput {
 public:
  int64_t hp = 0, wp = 0;

  explicit PaddedInput(const Conv2DGeometry& g)
      : hp(g.oh + g.kh - 1),
        wp(whole_vectors(g.ow) + g.kw - 1),
        data_(Tensor::zeros(Shape({g.n * g.c * hp * wp}), DType::kFloat32)) {}

  float* data() { return data_.data<float>(); }
  const float* plane(int64_t n, int64_t c, int64_t c_count) const {
    return data_.data<float>() + (n * c_count + c) * hp * wp;
  }

 private:
  Tensor data_;
};

// Fills p (made for g) from x.
void pad_input(const Conv2DGeometry& g, const float* x, PaddedInput& p) {
  float* to = p.data();
  const int64_t from = std::max<int64_t>(0, g.pad_left);   // xp's column of x's first copied one
  const int64_t skip = std::max<int64_t>(0, -g.pad_left);  // x's columns left of xp's
  const int64_t count = std::min(g.w - skip, p.wp - from);
  if (count <= 0) return;
  for (int64_t nc = 0; nc < g.n * g.c; ++nc) {
    for (int64_t r = 0; r < p.hp; ++r) {
      const int64_t ih = r - g.pad_top;
      if (ih < 0 || ih >= g.h) continue;
      std::memcpy(to + (nc * p.hp + r) * p.wp + from, x + (nc * g.h + ih) * g.w + skip,
                  static_cast<size_t>(count) * sizeof(float));
    }
  }
}

// y of output channels o0 .. o0 + OB - 1, output row y, columns x0 .. x0 + XC vectors (clipped
// to ow), of image n: a GEMM micro-kernel of w (OB x c·kh·kw) by the shifted rows of xp.
template <int OB, int XC>
void forward_tile(const Conv2DGeometry& g, const PaddedInput& xp, const float* w, int64_t n,
                  int64_t o0, int64_t y, int64_t x0, float* out) {
  using simd::f32x8;
  f32x8 acc[OB][XC];
  for (int b = 0; b < OB; ++b) {
    for (int k = 0; k < XC; ++k) acc[b][k] = f32x8{};
  }
  const int64_t taps = g.kh * g.kw;
  for (int64_t c = 0; c < g.c; ++c) {
    const float* plane = xp.plane(n, c, g.c);
    for (int64_t i = 0; i < g.kh; ++i) {
      const float* xr = plane + (y + i) * xp.wp + x0;
      const float* wr = w + (o0 * g.c + c) * taps + i * g.kw;
      for (int64_t j = 0; j < g.kw; ++j) {
        f32x8 xv[XC];
        for (int k = 0; k < XC; ++k) xv[k] = simd::load(xr + k * simd::kLanes + j);
        for (int b = 0; b < OB; ++b) {
          const f32x8 wb = simd::broadcast(wr[b * g.c * taps + j]);
          for (int k = 0; k < XC; ++k) acc[b][k] += wb * xv[k];
        }
      }
    }
  }
  for (int b = 0; b < OB; ++b) {
    float* row = out + ((n * g.o + o0 + b) * g.oh + y) * g.ow;
    for (int k = 0; k < XC; ++k) {
      const int64_t x = x0 + k * simd::kLanes;
      if (x + simd::kLanes <= g.ow) {
        simd::store(row + x, acc[b][k]);
      } else {
        simd::store_partial(row + x, acc[b][k], std::min(g.ow - x, simd::kLanes));
      }
    }
  }
}

// Output channels in tiles of up to kForwardChannels (12 accumulators with two vectors).
constexpr int64_t kForwardChannels = 6;

template <int OB>
void forward_row(const Conv2DGeometry& g, const PaddedInput& xp, const float* w, int64_t n,
                 int64_t o0, int64_t y, float* out) {
  constexpr int64_t kTile = 2 * simd::kLanes;
  for (int64_t x0 = 0; x0 < g.ow; x0 += kTile) {
    if (g.ow - x0 > simd::kLanes) {
      forward_tile<OB, 2>(g, xp, w, n, o0, y, x0, out);
    } else {
      forward_tile<OB, 1>(g, xp, w, n, o0, y, x0, out);
    }
  }
}

void forward_rows(const Conv2DGeometry& g, const PaddedInput& xp, const float* w, int64_t n,
                  int64_t o0, int64_t y, float* out) {
  switch (std::min(kForwardChannels, g.o - o0)) {
    case 1:
      return forward_row<1>(g, xp, w, n, o0, y, out);
    case 2:
      return forward_row<2>(g, xp, w, n, o0, y, out);
    case 3:
      return forward_row<3>(g, xp, w, n, o0, y, out);
    case 4:
      return forward_row<4>(g, xp, w, n, o0, y, out);
    case 5:
      return forward_row<5>(g, xp, w, n, o0, y, out);
    default:
      return forward_row<6>(g, xp, w, n, o0, y, out);
  }
}

void direct_forward(const Conv2DGeometry& g, const float* x, const float* w, float* y) {
  PaddedInput xp(g);
  pad_input(g, x, xp);
  const bool parallel =
      g.n > 1 && g.n * g.o * g.oh * g.ow * g.c * g.kh * g.kw > 64 * kParallelGrain;
  parallel_for(g.n, parallel, [&](int64_t n) {
    for (int64_t o0 = 0; o0 < g.o; o0 += kForwardChannels) {
      for (int64_t r = 0; r < g.oh; ++r) forward_rows(g, xp, w, n, o0, r, y);
    }
  });
}

// The kernel taps' accumulators of one image's rows for output channels o0 .. o0 + OB - 1, input
// channel c and kernel row i. xr: xp's rows of (n, c) from row i; d[b]: dy's rows of (n, o0 + b),
// padded to whole vectors.
template <int KW, int OB>
void filter_gradient_rows(int64_t oh, int64_t owv, int64_t wp, const float* xr,
                          const float* const* d, simd::f32x8 (&acc)[OB][KW]) {
  using simd::f32x8;
  f32x8 a[OB][KW];
  for (int b = 0; b < OB; ++b) {
    for (int j = 0; j < KW; ++j) a[b][j] = acc[b][j];
  }
  for (int64_t y = 0; y < oh; ++y, xr += wp) {
    for (int64_t x = 0; x < owv; x += simd::kLanes) {
      f32x8 dv[OB];
      for (int b = 0; b < OB; ++b) dv[b] = simd::load(d[b] + y * owv + x);
      for (int j = 0; j < KW; ++j) {
        const f32x8 xv = simd::load(xr + x + j);
        for (int b = 0; b < OB; ++b) a[b][j] += dv[b] * xv;
      }
    }
  }
  for (int b = 0; b < OB; ++b) {
    for (int j = 0; j < KW; ++j) acc[b][j] = a[b][j];
  }
}

// dw of output channels o0 .. o0 + OB - 1 (OB = 2, or 1 for the last of an odd count).
template <int KW, int OB>
void filter_gradient_block(const Conv2DGeometry& g, const PaddedInput& xp, const float* dy,
                           int64_t o0, float* dw) {
  using simd::f32x8;
  const int64_t owv = whole_vectors(g.ow);
  std::vector<f32x8> acc(static_cast<size_t>(g.c * g.kh * OB * KW), f32x8{});
  std::vector<float> dyp(static_cast<size_t>(OB * g.oh * owv), 0.0f);  // one image's, padded
  for (int64_t n = 0; n < g.n; ++n) {
    const float* d[OB];
    for (int b = 0; b < OB; ++b) {
      float* to = dyp.data() + b * g.oh * owv;
      const float* from = dy + (n * g.o + o0 + b) * g.oh * g.ow;
      for (int64_t y = 0; y < g.oh; ++y) {
        std::memcpy(to + y * owv, from + y * g.ow, static_cast<size_t>(g.ow) * sizeof(float));
      }
      d[b] = to;
    }
    for (int64_t c = 0; c < g.c; ++c) {
      for (int64_t i = 0; i < g.kh; ++i) {
        auto& a = *reinterpret_cast<f32x8(*)[OB][KW]>(acc.data() + (c * g.kh + i) * OB * KW);
        filter_gradient_rows<KW, OB>(g.oh, owv, xp.wp, xp.plane(n, c, g.c) + i * xp.wp, d, a);
      }
    }
  }
  for (int64_t c = 0; c < g.c; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int b = 0; b < OB; ++b) {
        for (int j = 0; j < KW; ++j) {
          dw[(((o0 + b) * g.c + c) * g.kh + i) * g.kw + j] =
              simd::reduce_add(acc[static_cast<size_t>(((c * g.kh + i) * OB + b) * KW + j)]);
        }
      }
    }
  }
}

template <int KW>
void filter_gradient_block(const Conv2DGeometry& g, const PaddedInput& xp, const float* dy,
                           int64_t o0, float* dw) {
  if (o0 + 1 < g.o) return filter_gradient_block<KW, 2>(g, xp, dy, o0, dw);
  filter_gradient_block<KW, 1>(g, xp, dy, o0, dw);
}

void direct_backward_filter(const Conv2DGeometry& g, const float* dy, const float* x, float* dw) {
  PaddedInput xp(g);
  pad_input(g, x, xp);
  const int64_t blocks = (g.o + 1) / 2;
  const bool parallel = g.n * g.o * g.oh * g.ow * g.c * g.kh * g.kw > 64 * kParallelGrain;
  parallel_for(blocks, parallel, [&](int64_t b) {
    switch (g.kw) {
#define CLEAVE_FILTER_GRADIENT_KW(KW) \
  case KW:                            \
    return filter_gradient_block<KW>(g, xp, dy, 2 * b, dw);
      CLEAVE_FILTER_GRADIENT_KW(1)
      CLEAVE_FILTER_GRADIENT_KW(2)
      CLEAVE_FILTER_GRADIENT_KW(3)
      CLEAVE_FILTER_GRADIENT_KW(4)
      CLEAVE_FILTER_GRADIENT_KW(5)
      CLEAVE_FILTER_GRADIENT_KW(6)
      CLEAVE_FILTER_GRADIENT_KW(7)
#undef CLEAVE_FILTER_GRADIENT_KW
    }
  });
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

bool conv2d_forward_runs_by_hand(const Conv2DGeometry& g) {
  return direct_path(g, Pass::kForward, ConvPath::kAuto);
}

void conv2d_forward(const Conv2DGeometry& g, const Tensor& x, const Tensor& weight, const Tensor& y,
                    ConvPath path) {
  if (y.numel() == 0) return;
  if (empty_sum(g)) return y.fill(0);
  if (x.dtype() == DType::kFloat32) {
    // NOTE [Convolutions of few input channels]
    if (direct_path(g, Pass::kForward, path)) {
      return direct_forward(g, x.data<float>(), weight.data<float>(), y.data<float>());
    }
    return run_pass(g, Pass::kForward, x, weight, y);
  }
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
                            const Tensor& dweight, ConvPath path) {
  if (dweight.numel() == 0) return;
  if (empty_sum(g) || dy.numel() == 0) return dweight.fill(0);
  if (dy.dtype() == DType::kFloat32) {
    // NOTE [Convolutions of few input channels]
    if (direct_path(g, Pass::kBackwardWeights, path)) {
      return direct_backward_filter(g, dy.data<float>(), x.data<float>(), dweight.data<float>());
    }
    return run_pass(g, Pass::kBackwardWeights, dy, x, dweight);
  }
  reference_backward_filter(g, dy.data<double>(), x.data<double>(), dweight.data<double>());
}

}  // namespace cleave::kernels::cpu
