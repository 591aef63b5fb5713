// Float32 pooling, hand-written, for every geometry (NOTE [Pooling paths] in pool.cc); threaded
// over the n·c planes. The geometries without a fast path (pool_fast.cc) run here.
//
// The kernels work on one output row at a time through a padded row buffer `buf` of the plane's
// columns: buf[pad_left + c] holds column c, so window j covers buf[j·stride_w, j·stride_w + kw)
// with no bounds checks, and the padding cells hold the identity of the reduction (−inf for max, 0
// for sums) or are never read back (backward).
#include <limits>
#include <vector>

#include "kernels/cpu/pool_paths.h"

namespace cleave::kernels::cpu::pool_paths {
namespace {

// Length of the padded row buffer: every window j reads buf[j·stride_w, j·stride_w + kw).
int64_t row_buffer_size(const Pool2DGeometry& g) {
  return std::max(g.pad_left + g.w + g.pad_right, (g.ow - 1) * g.stride_w + g.kw);
}

// Per-thread scratch of at least `size` floats (contents unspecified).
float* scratch(int64_t size) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(size);
  return buffer.data();
}

// 1 / the number of real columns of each window j.
std::vector<float> inverse_column_counts(const Pool2DGeometry& g) {
  std::vector<float> inv(g.ow);
  for (int64_t j = 0; j < g.ow; ++j) {
    const Window win = window(g, 0, j);
    inv[j] = 1.0f / static_cast<float>(win.c1 - win.c0);
  }
  return inv;
}

// Output row i of one plane: buf[pad_left + c] = reduce of column c over the window's rows,
// then out[j] = reduce of buf over window j; `pad` fills the padding cells of buf.
template <typename Reduce>
void reduce_output_row(const Pool2DGeometry& g, const float* plane, int64_t i, float* buf,
                       float pad, Reduce reduce, float* out) {
  const Window rows = window(g, i, 0);
  std::fill(buf, buf + g.pad_left, pad);
  std::fill(buf + g.pad_left + g.w, buf + row_buffer_size(g), pad);
  float* inner = buf + g.pad_left;
  std::copy(plane + rows.r0 * g.w, plane + (rows.r0 + 1) * g.w, inner);
  for (int64_t r = rows.r0 + 1; r < rows.r1; ++r) {
    const float* row = plane + r * g.w;
#pragma omp simd
    for (int64_t c = 0; c < g.w; ++c) inner[c] = reduce(inner[c], row[c]);
  }
  const int64_t s = g.stride_w;
#pragma omp simd
  for (int64_t j = 0; j < g.ow; ++j) out[j] = buf[j * s];
  for (int64_t t = 1; t < g.kw; ++t) {
#pragma omp simd
    for (int64_t j = 0; j < g.ow; ++j) out[j] = reduce(out[j], buf[j * s + t]);
  }
}

}  // namespace

void native_max_forward(const Pool2DGeometry& g, const float* x, float* y) {
  const float kMinusInf = -std::numeric_limits<float>::infinity();
  for_each_plane(g, [&](int64_t p) {
    float* buf = scratch(row_buffer_size(g));
    for (int64_t i = 0; i < g.oh; ++i) {
      reduce_output_row(g, x + p * g.h * g.w, i, buf, kMinusInf, keep_first_max<float>,
                        y + (p * g.oh + i) * g.ow);
    }
  });
}

void native_avg_forward(const Pool2DGeometry& g, const float* x, float* y) {
  const std::vector<float> inv_cols = inverse_column_counts(g);
  for_each_plane(g, [&](int64_t p) {
    float* buf = scratch(row_buffer_size(g));
    for (int64_t i = 0; i < g.oh; ++i) {
      float* out = y + (p * g.oh + i) * g.ow;
      reduce_output_row(
          g, x + p * g.h * g.w, i, buf, 0.0f, [](float a, float b) { return a + b; }, out);
      const Window rows = window(g, i, 0);
      const float inv_rows = 1.0f / static_cast<float>(rows.r1 - rows.r0);
#pragma omp simd
      for (int64_t j = 0; j < g.ow; ++j) out[j] *= inv_rows * inv_cols[j];
    }
  });
}

// Scans each window in row-major order for its first maximum (NOTE [Max pooling ties]) and adds
// the output's gradient there.
void native_max_backward(const Pool2DGeometry& g, const float* x, const float* dy, float* dx) {
  std::vector<Window> cols(g.ow);
  for (int64_t j = 0; j < g.ow; ++j) cols[j] = window(g, 0, j);
  for_each_plane(g, [&](int64_t p) {
    const float* plane = x + p * g.h * g.w;
    float* dplane = dx + p * g.h * g.w;
    std::fill(dplane, dplane + g.h * g.w, 0.0f);
    for (int64_t i = 0; i < g.oh; ++i) {
      const Window rows = window(g, i, 0);
      const float* grad = dy + (p * g.oh + i) * g.ow;
      for (int64_t j = 0; j < g.ow; ++j) {
        int64_t best = rows.r0 * g.w + cols[j].c0;
        float best_value = plane[best];
        for (int64_t r = rows.r0; r < rows.r1; ++r) {
          for (int64_t c = cols[j].c0; c < cols[j].c1; ++c) {
            const float v = plane[r * g.w + c];
            if (v > best_value) best_value = v, best = r * g.w + c;
          }
        }
        dplane[best] += grad[j];
      }
    }
  });
}

// Per output row: each output's share of its gradient is spread over its window's columns in
// buf (for a fixed kernel column t the windows touch distinct cells, so that loop vectorises),
// then buf's real columns are added to each of the window's rows.
void native_avg_backward(const Pool2DGeometry& g, const float* dy, float* dx) {
  const std::vector<float> inv_cols = inverse_column_counts(g);
  const int64_t size = row_buffer_size(g);
  const int64_t s = g.stride_w;
  for_each_plane(g, [&](int64_t p) {
    float* buf = scratch(size + g.ow);
    float* share = buf + size;
    float* dplane = dx + p * g.h * g.w;
    std::fill(dplane, dplane + g.h * g.w, 0.0f);
    for (int64_t i = 0; i < g.oh; ++i) {
      const Window rows = window(g, i, 0);
      const float inv_rows = 1.0f / static_cast<float>(rows.r1 - rows.r0);
      const float* grad = dy + (p * g.oh + i) * g.ow;
#pragma omp simd
      for (int64_t j = 0; j < g.ow; ++j) share[j] = grad[j] * (inv_rows * inv_cols[j]);
      std::fill(buf, buf + size, 0.0f);
      for (int64_t t = 0; t < g.kw; ++t) {
#pragma omp simd
        for (int64_t j = 0; j < g.ow; ++j) buf[j * s + t] += share[j];
      }
      const float* inner = buf + g.pad_left;
      for (int64_t r = rows.r0; r < rows.r1; ++r) {
        float* drow = dplane + r * g.w;
#pragma omp simd
        for (int64_t c = 0; c < g.w; ++c) drow[c] += inner[c];
      }
    }
  });
}

}  // namespace cleave::kernels::cpu::pool_paths
