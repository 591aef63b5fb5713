#include "softmax.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "loops.h"
#include "onednn.h"
#include "parallel.h"
#include "simd.h"

namespace cleave::kernels::cpu {
namespace {

// NOTE [Softmax paths]
// Rows (inner == 1) are processed in chunks of about kChunkElems elements that stay in L1: one
// pass writes x - max per row, one vectorised exp runs over the whole chunk (so short rows, e.g.
// 10 classes, still fill the vector lanes), and one pass normalises each row. An axis that is not
// the last (inner > 1) is walked with the inner dim contiguous and vectorised.
//
// oneDNN's softmax is faster on large inputs but has a fixed cost per call that dominates small
// ones, so f32 rows of at least kOneDnnMinElems elements in total go to oneDNN (its jit kernel
// wants the softmax axis dense and innermost, so only inner == 1 does). The backward pass is a dot
// product and an axpy per row and always runs on these loops, which beat oneDNN 2.6's softmax
// backward at every size measured. Measurements: bench/README.md, 'core'.
constexpr int64_t kChunkElems = 2048;
constexpr int64_t kOneDnnMinElems = 4096;

void exp_inplace(float* p, int64_t n) {
  int64_t i = 0;
  for (; i + simd::kLanes <= n; i += simd::kLanes) simd::store(p + i, simd::exp(simd::load(p + i)));
  if (i < n) simd::store_partial(p + i, simd::exp(simd::load_partial(p + i, n - i, 0.0f)), n - i);
}

void exp_inplace(double* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = std::exp(p[i]);
}

template <typename T>
T row_max(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

template <typename T>
T row_sum(const T* x, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

// ---- forward ----

template <typename T>
void forward_rows(const T* x, T* y, int64_t rows, int64_t cols, SoftmaxKind kind) {
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElems / cols);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  parallel_for(chunks, rows * cols > kParallelGrain, [&](int64_t chunk) {
    const int64_t r0 = chunk * chunk_rows;
    const int64_t r1 = std::min(rows, r0 + chunk_rows);
    T maxes[kChunkElems];
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const T m = row_max(xr, cols);
      maxes[r - r0] = m;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - m;
    }
    exp_inplace(y + r0 * cols, (r1 - r0) * cols);
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const T s = row_sum(yr, cols);
      if (kind == SoftmaxKind::kSoftmax) {
        const T inv = T(1) / s;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
      } else {
        // (x - max) - log(s), not x - (max + log(s)): the first difference is exact, the
        // second would lose the digits of log(s) when |max| is large.
        const T m = maxes[r - r0], log_sum = std::log(s);
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) - log_sum;
      }
    }
  });
}

template <typename T>
void forward_strided(const T* x, T* y, const SoftmaxShape& s, SoftmaxKind kind) {
  const int64_t inner = s.inner, size = s.axis * s.inner;
  parallel_for(s.outer, s.outer * size > kParallelGrain, [&](int64_t o) {
    const T* xo = x + o * size;
    T* yo = y + o * size;
    std::vector<T> maxes(static_cast<size_t>(inner), -std::numeric_limits<T>::infinity());
    std::vector<T> sums(static_cast<size_t>(inner), T(0));
    T* m = maxes.data();
    T* sum = sums.data();
    for (int64_t c = 0; c < s.axis; ++c) {
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) m[i] = std::max(m[i], xo[c * inner + i]);
    }
    for (int64_t c = 0; c < s.axis; ++c) {
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) yo[c * inner + i] = xo[c * inner + i] - m[i];
    }
    exp_inplace(yo, size);
    for (int64_t c = 0; c < s.axis; ++c) {
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) sum[i] += yo[c * inner + i];
    }
    if (kind == SoftmaxKind::kSoftmax) {
      for (int64_t i = 0; i < inner; ++i) sum[i] = T(1) / sum[i];
      for (int64_t c = 0; c < s.axis; ++c) {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) yo[c * inner + i] *= sum[i];
      }
    } else {
      for (int64_t i = 0; i < inner; ++i) sum[i] = std::log(sum[i]);
      for (int64_t c = 0; c < s.axis; ++c) {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) {
          yo[c * inner + i] = (xo[c * inner + i] - m[i]) - sum[i];
        }
      }
    }
  });
}

template <typename T>
void forward_loops(const T* x, T* y, const SoftmaxShape& s, SoftmaxKind kind) {
  if (s.outer * s.axis * s.inner == 0) return;
  if (s.inner == 1) {
    forward_rows(x, y, s.outer, s.axis, kind);
  } else {
    forward_strided(x, y, s, kind);
  }
}

// ---- oneDNN forward ----

struct OneDnnSoftmax {
  dnnl::softmax_v2_forward primitive;
  dnnl::memory src;
  dnnl::memory dst;
};

void forward_onednn(const float* x, float* y, int64_t rows, int64_t cols, SoftmaxKind kind) {
  const bool log = kind == SoftmaxKind::kLogSoftmax;
  const std::string key = fmt::format("softmax f32 {}x{} log{}", rows, cols, log);
  OneDnnSoftmax& p = cached_primitive<OneDnnSoftmax>(key, [&] {
    const dnnl::memory::desc md({rows, cols}, dnnl::memory::data_type::f32,
                                dnnl::memory::format_tag::ab);
    dnnl::engine& engine = onednn_engine();
    const dnnl::softmax_v2_forward::primitive_desc pd(
        dnnl::softmax_v2_forward::desc(
            dnnl::prop_kind::forward_inference,
            log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md, md, 1),
        engine);
    return OneDnnSoftmax{.primitive = dnnl::softmax_v2_forward(pd),
                         .src = dnnl::memory(md, engine, DNNL_MEMORY_NONE),
                         .dst = dnnl::memory(md, engine, DNNL_MEMORY_NONE)};
  });
  p.src.set_data_handle(const_cast<float*>(x));
  p.dst.set_data_handle(y);
  dnnl::stream& stream = onednn_stream();
  p.primitive.execute(stream, {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_DST, p.dst}});
  stream.wait();
}

// ---- backward ----

template <typename T>
void backward_rows(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, SoftmaxKind kind) {
  parallel_for(rows, rows * cols > kParallelGrain, [&](int64_t r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    if (kind == SoftmaxKind::kSoftmax) {
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < cols; ++c) dot += dyr[c] * yr[c];
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
    } else {
      const T sum = row_sum(dyr, cols);
      std::copy(yr, yr + cols, dxr);
      exp_inplace(dxr, cols);
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) dxr[c] = dyr[c] - dxr[c] * sum;
    }
  });
}

template <typename T>
void backward_strided(const T* y, const T* dy, T* dx, const SoftmaxShape& s, SoftmaxKind kind) {
  const int64_t inner = s.inner, size = s.axis * s.inner;
  parallel_for(s.outer, s.outer * size > kParallelGrain, [&](int64_t o) {
    const T* yo = y + o * size;
    const T* dyo = dy + o * size;
    T* dxo = dx + o * size;
    std::vector<T> sums(static_cast<size_t>(inner), T(0));
    T* sum = sums.data();
    const bool softmax = kind == SoftmaxKind::kSoftmax;
    for (int64_t c = 0; c < s.axis; ++c) {
      const T* yc = yo + c * inner;
      const T* dyc = dyo + c * inner;
      if (softmax) {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) sum[i] += dyc[i] * yc[i];
      } else {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) sum[i] += dyc[i];
      }
    }
    if (!softmax) {
      std::copy(yo, yo + size, dxo);
      exp_inplace(dxo, size);
    }
    for (int64_t c = 0; c < s.axis; ++c) {
      const T* yc = yo + c * inner;
      const T* dyc = dyo + c * inner;
      T* dxc = dxo + c * inner;
      if (softmax) {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) dxc[i] = yc[i] * (dyc[i] - sum[i]);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) dxc[i] = dyc[i] - dxc[i] * sum[i];
      }
    }
  });
}

template <typename T>
void backward_loops(const T* y, const T* dy, T* dx, const SoftmaxShape& s, SoftmaxKind kind) {
  if (s.outer * s.axis * s.inner == 0) return;
  if (s.inner == 1) {
    backward_rows(y, dy, dx, s.outer, s.axis, kind);
  } else {
    backward_strided(y, dy, dx, s, kind);
  }
}

}  // namespace

void softmax_forward_loops(const float* x, float* y, const SoftmaxShape& shape, SoftmaxKind kind) {
  forward_loops(x, y, shape, kind);
}

void softmax_forward(const float* x, float* y, const SoftmaxShape& shape, SoftmaxKind kind) {
  const int64_t numel = shape.outer * shape.axis * shape.inner;
  if (shape.inner == 1 && numel >= kOneDnnMinElems) {
    forward_onednn(x, y, shape.outer, shape.axis, kind);
  } else {
    forward_loops(x, y, shape, kind);
  }
}

void softmax_forward(const double* x, double* y, const SoftmaxShape& shape, SoftmaxKind kind) {
  forward_loops(x, y, shape, kind);
}

void softmax_backward(const float* y, const float* dy, float* dx, const SoftmaxShape& shape,
                      SoftmaxKind kind) {
  backward_loops(y, dy, dx, shape, kind);
}

void softmax_backward(const double* y, const double* dy, double* dx, const SoftmaxShape& shape,
                      SoftmaxKind kind) {
  backward_loops(y, dy, dx, shape, kind);
}

}  // namespace cleave::kernels::cpu
