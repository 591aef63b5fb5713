#include "kernels/cpu/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/loops.h"
#include "parallel.h"

namespace cleave::kernels::cpu {
namespace {

// ---------------------------------------------------------------------------------------------
// Coordinate mapping of NOTE [Resize coordinate mapping], for one dim. Nearest indices are
// computed in integers so that exact halves round the same way on every machine.
// ---------------------------------------------------------------------------------------------

struct LinearTap {
  int64_t i0 = 0, i1 = 0;
  double w1 = 0;  // weight of i1; i0 gets 1 − w1
};

LinearTap linear_tap(int64_t i, int64_t in, int64_t out, ResizeCorners corners) {
  double s;
  if (corners == ResizeCorners::kAlignCorners) {
    s = out > 1 ? static_cast<double>(i * (in - 1)) / static_cast<double>(out - 1) : 0.0;
  } else {
    s = static_cast<double>((2 * i + 1) * in - out) / static_cast<double>(2 * out);
    s = std::max(s, 0.0);
  }
  LinearTap t;
  t.i0 = std::min(static_cast<int64_t>(std::floor(s)), in - 1);
  t.i1 = std::min(t.i0 + 1, in - 1);
  t.w1 = s - static_cast<double>(t.i0);
  return t;
}

int64_t nearest_tap(int64_t i, int64_t in, int64_t out, ResizeCorners corners) {
  if (corners == ResizeCorners::kAlignCorners) {
    if (out == 1) return 0;
    return (2 * i * (in - 1) + (out - 1)) / (2 * (out - 1));  // round(i·(in−1)/(out−1))
  }
  return std::min((2 * i + 1) * in / (2 * out), in - 1);  // floor((i + ½)·in/out)
}

struct Dims {
  int64_t planes, h, w, oh, ow;
};

// x (n, c, h, w) and y (n, c, oh, ow).
Dims dims_of(const Tensor& x, const Tensor& y) {
  return {x.dim(0) * x.dim(1), x.dim(2), x.dim(3), y.dim(2), y.dim(3)};
}

// Per-dim tables for the vectorised Float32 loops. Indices are 32-bit so that the column loops
// compile to 8-wide gathers (vgatherdps); a row holds far fewer than 2^31 pixels.
struct LinearTable {
  std::vector<int32_t> i0, i1;
  std::vector<float> w1;
};

LinearTable linear_table(int64_t in, int64_t out, ResizeCorners corners) {
  LinearTable t{std::vector<int32_t>(out), std::vector<int32_t>(out), std::vector<float>(out)};
  for (int64_t i = 0; i < out; ++i) {
    const LinearTap tap = linear_tap(i, in, out, corners);
    t.i0[i] = static_cast<int32_t>(tap.i0);
    t.i1[i] = static_cast<int32_t>(tap.i1);
    t.w1[i] = static_cast<float>(tap.w1);
  }
  return t;
}

std::vector<int32_t> nearest_table(int64_t in, int64_t out, ResizeCorners corners) {
  std::vector<int32_t> t(out);
  for (int64_t i = 0; i < out; ++i) t[i] = static_cast<int32_t>(nearest_tap(i, in, out, corners));
  return t;
}

// ---------------------------------------------------------------------------------------------
// Float32: bilinear interpolates each output row in two passes, first the two input rows into
// one row of width w (contiguous, vectorised), then across that row at the output columns
// (gathers from a row in cache). The backward runs the same passes in reverse per plane.
// ---------------------------------------------------------------------------------------------

void bilinear_forward_f32(const Dims& d, const float* x, ResizeCorners corners, float* y) {
  const LinearTable rows = linear_table(d.h, d.oh, corners);
  const LinearTable cols = linear_table(d.w, d.ow, corners);
  const int32_t* c0 = cols.i0.data();
  const int32_t* c1 = cols.i1.data();
  const float* cw = cols.w1.data();
  // NOTE [Serial fast path]: the (plane, output row) pairs, one range on this thread below the
  // grain.
  const auto rows_of = [&](int64_t begin, int64_t end) {
    if (begin == end) return;
    std::vector<float> row(d.w);
    float* tmp = row.data();
    for (int64_t pi = begin, p = begin / d.oh, i = begin % d.oh; pi < end; ++pi) {
      const float* r0 = x + (p * d.h + rows.i0[i]) * d.w;
      const float* r1 = x + (p * d.h + rows.i1[i]) * d.w;
      const float b = rows.w1[i], a = 1.0f - b;
#pragma omp simd
      for (int64_t k = 0; k < d.w; ++k) tmp[k] = a * r0[k] + b * r1[k];
      float* out = y + (p * d.oh + i) * d.ow;
#pragma omp simd
      for (int64_t j = 0; j < d.ow; ++j) out[j] = (1.0f - cw[j]) * tmp[c0[j]] + cw[j] * tmp[c1[j]];
      if (++i == d.oh) i = 0, ++p;
    }
  };
  range_for(d.planes * d.oh, d.planes * d.oh * d.ow > kParallelGrain, rows_of);
}

void bilinear_backward_f32(const Dims& d, const float* dy, ResizeCorners corners, float* dx) {
  const LinearTable rows = linear_table(d.h, d.oh, corners);
  const LinearTable cols = linear_table(d.w, d.ow, corners);
  // NOTE [Serial fast path]: the planes, one range on this thread below the grain.
  range_for(d.planes, d.planes * d.oh * d.ow > kParallelGrain, [&](int64_t begin, int64_t end) {
    if (begin == end) return;
    std::vector<float> row(d.w);
    float* tmp = row.data();
    for (int64_t p = begin; p < end; ++p) {
      float* plane = dx + p * d.h * d.w;
      std::fill(plane, plane + d.h * d.w, 0.0f);
      for (int64_t i = 0; i < d.oh; ++i) {
        const float* g = dy + (p * d.oh + i) * d.ow;
        std::fill(tmp, tmp + d.w, 0.0f);
        for (int64_t j = 0; j < d.ow; ++j) {  // scatter: not vectorisable
          tmp[cols.i0[j]] += (1.0f - cols.w1[j]) * g[j];
          tmp[cols.i1[j]] += cols.w1[j] * g[j];
        }
        float* r0 = plane + rows.i0[i] * d.w;
        float* r1 = plane + rows.i1[i] * d.w;
        const float b = rows.w1[i], a = 1.0f - b;
        // r0 and r1 may be the same row: two passes keep both contributions.
#pragma omp simd
        for (int64_t k = 0; k < d.w; ++k) r0[k] += a * tmp[k];
#pragma omp simd
        for (int64_t k = 0; k < d.w; ++k) r1[k] += b * tmp[k];
      }
    }
  });
}

void nearest_forward_f32(const Dims& d, const float* x, ResizeCorners corners, float* y) {
  const std::vector<int32_t> rows = nearest_table(d.h, d.oh, corners);
  const std::vector<int32_t> cols = nearest_table(d.w, d.ow, corners);
  const int32_t* ci = cols.data();
  // NOTE [Serial fast path]: the (plane, output row) pairs, one range on this thread below the
  // grain.
  const auto rows_of = [&](int64_t begin, int64_t end) {
    for (int64_t pi = begin, p = begin / d.oh, i = begin % d.oh; pi < end; ++pi) {
      const float* in = x + (p * d.h + rows[i]) * d.w;
      float* out = y + (p * d.oh + i) * d.ow;
#pragma omp simd
      for (int64_t j = 0; j < d.ow; ++j) out[j] = in[ci[j]];
      if (++i == d.oh) i = 0, ++p;
    }
  };
  range_for(d.planes * d.oh, d.planes * d.oh * d.ow > kParallelGrain, rows_of);
}

void nearest_backward_f32(const Dims& d, const float* dy, ResizeCorners corners, float* dx) {
  const std::vector<int32_t> rows = nearest_table(d.h, d.oh, corners);
  const std::vector<int32_t> cols = nearest_table(d.w, d.ow, corners);
  parallel_for(d.planes, d.planes * d.oh * d.ow > kParallelGrain, [&](int64_t p) {
    float* plane = dx + p * d.h * d.w;
    std::fill(plane, plane + d.h * d.w, 0.0f);
    for (int64_t i = 0; i < d.oh; ++i) {
      const float* g = dy + (p * d.oh + i) * d.ow;
      float* r = plane + rows[i] * d.w;
      for (int64_t j = 0; j < d.ow; ++j) r[cols[j]] += g[j];
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Float64: reference loops, one output element at a time, taps computed in place.
// ---------------------------------------------------------------------------------------------

void bilinear_forward_ref(const Dims& d, const double* x, ResizeCorners corners, double* y) {
  parallel_for(d.planes, d.planes * d.oh * d.ow > kParallelGrain, [&](int64_t p) {
    const double* plane = x + p * d.h * d.w;
    for (int64_t i = 0; i < d.oh; ++i) {
      const LinearTap r = linear_tap(i, d.h, d.oh, corners);
      for (int64_t j = 0; j < d.ow; ++j) {
        const LinearTap c = linear_tap(j, d.w, d.ow, corners);
        const double top = (1 - c.w1) * plane[r.i0 * d.w + c.i0] + c.w1 * plane[r.i0 * d.w + c.i1];
        const double bot = (1 - c.w1) * plane[r.i1 * d.w + c.i0] + c.w1 * plane[r.i1 * d.w + c.i1];
        y[(p * d.oh + i) * d.ow + j] = (1 - r.w1) * top + r.w1 * bot;
      }
    }
  });
}

void bilinear_backward_ref(const Dims& d, const double* dy, ResizeCorners corners, double* dx) {
  parallel_for(d.planes, d.planes * d.oh * d.ow > kParallelGrain, [&](int64_t p) {
    double* plane = dx + p * d.h * d.w;
    std::fill(plane, plane + d.h * d.w, 0.0);
    for (int64_t i = 0; i < d.oh; ++i) {
      const LinearTap r = linear_tap(i, d.h, d.oh, corners);
      for (int64_t j = 0; j < d.ow; ++j) {
        const LinearTap c = linear_tap(j, d.w, d.ow, corners);
        const double g = dy[(p * d.oh + i) * d.ow + j];
        plane[r.i0 * d.w + c.i0] += (1 - r.w1) * (1 - c.w1) * g;
        plane[r.i0 * d.w + c.i1] += (1 - r.w1) * c.w1 * g;
        plane[r.i1 * d.w + c.i0] += r.w1 * (1 - c.w1) * g;
        plane[r.i1 * d.w + c.i1] += r.w1 * c.w1 * g;
      }
    }
  });
}

void nearest_forward_ref(const Dims& d, const double* x, ResizeCorners corners, double* y) {
  parallel_for(d.planes, d.planes * d.oh * d.ow > kParallelGrain, [&](int64_t p) {
    for (int64_t i = 0; i < d.oh; ++i) {
      const int64_t r = nearest_tap(i, d.h, d.oh, corners);
      for (int64_t j = 0; j < d.ow; ++j) {
        const int64_t c = nearest_tap(j, d.w, d.ow, corners);
        y[(p * d.oh + i) * d.ow + j] = x[(p * d.h + r) * d.w + c];
      }
    }
  });
}

void nearest_backward_ref(const Dims& d, const double* dy, ResizeCorners corners, double* dx) {
  parallel_for(d.planes, d.planes * d.oh * d.ow > kParallelGrain, [&](int64_t p) {
    double* plane = dx + p * d.h * d.w;
    std::fill(plane, plane + d.h * d.w, 0.0);
    for (int64_t i = 0; i < d.oh; ++i) {
      const int64_t r = nearest_tap(i, d.h, d.oh, corners);
      for (int64_t j = 0; j < d.ow; ++j) {
        plane[r * d.w + nearest_tap(j, d.w, d.ow, corners)] += dy[(p * d.oh + i) * d.ow + j];
      }
    }
  });
}

// Reads `from` into `to` with `f32` on Float32 tensors and `ref` on Float64 ones; `image` and
// `resized` are the input and output images of the forward resize (dims_of).
template <typename F32, typename Ref>
void run_resize(const Tensor& image, const Tensor& resized, const Tensor& from, const Tensor& to,
                ResizeCorners corners, F32 f32, Ref ref) {
  if (to.numel() == 0) return;
  const Dims d = dims_of(image, resized);
  if (from.dtype() == DType::kFloat32) {
    return f32(d, from.data<float>(), corners, to.data<float>());
  }
  ref(d, from.data<double>(), corners, to.data<double>());
}

}  // namespace

void resize_bilinear_forward(const Tensor& x, ResizeCorners corners, const Tensor& y) {
  run_resize(x, y, x, y, corners, bilinear_forward_f32, bilinear_forward_ref);
}

void resize_bilinear_backward(const Tensor& dy, ResizeCorners corners, const Tensor& dx) {
  run_resize(dx, dy, dy, dx, corners, bilinear_backward_f32, bilinear_backward_ref);
}

void resize_nearest_forward(const Tensor& x, ResizeCorners corners, const Tensor& y) {
  run_resize(x, y, x, y, corners, nearest_forward_f32, nearest_forward_ref);
}

void resize_nearest_backward(const Tensor& dy, ResizeCorners corners, const Tensor& dx) {
  run_resize(dx, dy, dy, dx, corners, nearest_backward_f32, nearest_backward_ref);
}

}  // namespace cleave::kernels::cpu
