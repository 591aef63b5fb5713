// Float32 pooling, hand-written fast paths (NOTE [Pooling paths] in pool.cc): 2x2 windows of
// stride 2 without padding, and global pooling; threaded over the n·c planes.
//
// NOTE [2x2 pooling fast path]
// Windows of 2x2 with stride 2 and no padding (pad_mode "valid", or "same" on even sizes) tile
// the input: output (i, j) reads input rows 2i and 2i+1, columns 2j and 2j+1, and no cell is read
// by two windows. A step makes kLanes (8) outputs of one row from 16 consecutive floats of each
// of the two input rows: the even lanes of the 16 are the windows' left cells, the odd lanes
// their right cells (simd deinterleave). The backward pass computes the four gradients of each
// window and interleaves them back, so every covered cell of dx is written exactly once, by
// assignment. That makes a step idempotent, which gives the tail for free: a row of at least 8
// outputs ends with one step at ow − 8 that overlaps the previous one; a shorter row runs the
// same code on scalars. The last row and column of an odd-sized input belong to no window
// (forward ignores them; backward writes them 0).
//
// A window that covers its whole plane (global pooling: one output per plane) is a
// reduction over h·w contiguous floats.
#include <limits>

#include "kernels/cpu/pool_paths.h"
#include "kernels/cpu/simd.h"

namespace cleave::kernels::cpu::pool_paths {
namespace {

using simd::f32x8;
using simd::i32x8;
using simd::kLanes;

// The even and odd lanes of the 16 floats lo:hi, and the inverse: interleave a and b.
inline f32x8 even_lanes(f32x8 lo, f32x8 hi) {
  return __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
}
inline f32x8 odd_lanes(f32x8 lo, f32x8 hi) {
  return __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15);
}
inline f32x8 interleave_lo(f32x8 a, f32x8 b) {
  return __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11);
}
inline f32x8 interleave_hi(f32x8 a, f32x8 b) {
  return __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15);
}

// The cells a b / c d of a 2x2 window (V = float), or of kLanes windows (V = f32x8).
template <typename V>
struct Cells2x2 {
  V a, b, c, d;
};

// The gradients of the cells x of windows whose output gradient is `grad`: all of it to the first
// maximum in the order a, b, c, d, 0 to the others.
template <typename V>
inline Cells2x2<V> max_grad_2x2(const Cells2x2<V>& x, V grad) {
  // The winner is the last cell that beat the running maximum.
  const auto b_wins = x.b > x.a;
  V best = b_wins ? x.b : x.a;
  const auto c_wins = x.c > best;
  best = c_wins ? x.c : best;
  const auto d_wins = x.d > best;
  const V zero{};
  Cells2x2<V> g;
  g.d = d_wins ? grad : zero;
  grad = d_wins ? zero : grad;
  g.c = c_wins ? grad : zero;
  grad = c_wins ? zero : grad;
  g.b = b_wins ? grad : zero;
  g.a = b_wins ? zero : grad;
  return g;
}

// Calls step(j) for j = 0, kLanes, 2·kLanes, ... and last j = n − kLanes, which may overlap the
// step before it (NOTE [2x2 pooling fast path]); scalar(j) for every j instead when n < kLanes.
template <typename Step, typename Scalar>
inline void for_each_output(int64_t n, Step&& step, Scalar&& scalar) {
  if (n < kLanes) {
    for (int64_t j = 0; j < n; ++j) scalar(j);
    return;
  }
  int64_t j = 0;
  for (; j + kLanes < n; j += kLanes) step(j);
  step(n - kLanes);
}

// ---- 2x2 stride 2 ----

// The backward fast path leaves the odd last row and column of a dx plane out: zero them.
void zero_uncovered_2x2(const Pool2DGeometry& g, float* dplane) {
  if (g.w > 2 * g.ow) {
    for (int64_t r = 0; r < 2 * g.oh; ++r) dplane[r * g.w + g.w - 1] = 0;
  }
  if (g.h > 2 * g.oh) std::fill(dplane + 2 * g.oh * g.w, dplane + g.h * g.w, 0.0f);
}

// Loads the windows of outputs j .. j + kLanes of a row pair (NOTE [2x2 pooling fast path]).
inline Cells2x2<f32x8> load_2x2(const float* top, const float* bottom, int64_t j) {
  const f32x8 t0 = simd::load(top + 2 * j), t1 = simd::load(top + 2 * j + kLanes);
  const f32x8 b0 = simd::load(bottom + 2 * j), b1 = simd::load(bottom + 2 * j + kLanes);
  return {even_lanes(t0, t1), odd_lanes(t0, t1), even_lanes(b0, b1), odd_lanes(b0, b1)};
}
inline Cells2x2<float> load_2x2_scalar(const float* top, const float* bottom, int64_t j) {
  return {top[2 * j], top[2 * j + 1], bottom[2 * j], bottom[2 * j + 1]};
}
inline void store_2x2(const Cells2x2<f32x8>& v, float* top, float* bottom, int64_t j) {
  simd::store(top + 2 * j, interleave_lo(v.a, v.b));
  simd::store(top + 2 * j + kLanes, interleave_hi(v.a, v.b));
  simd::store(bottom + 2 * j, interleave_lo(v.c, v.d));
  simd::store(bottom + 2 * j + kLanes, interleave_hi(v.c, v.d));
}
inline void store_2x2_scalar(const Cells2x2<float>& v, float* top, float* bottom, int64_t j) {
  top[2 * j] = v.a, top[2 * j + 1] = v.b, bottom[2 * j] = v.c, bottom[2 * j + 1] = v.d;
}

// Calls out_row(top, bottom, out) for each output row i of each plane: `top` and `bottom` are
// input rows 2i and 2i+1 of x, `out` is output row i of y.
template <typename F>
void for_each_row_pair(const Pool2DGeometry& g, const float* x, float* y, F&& out_row) {
  for_each_plane(g, [&](int64_t p) {
    for (int64_t i = 0; i < g.oh; ++i) {
      const float* top = x + (p * g.h + 2 * i) * g.w;
      out_row(top, top + g.w, y + (p * g.oh + i) * g.ow);
    }
  });
}

// ---- global pooling ----

// f(lane 0, ..., lane 7) for an associative and commutative f, as a tree of three steps.
template <typename V, typename F>
inline auto reduce_lanes(V v, F f) {
  v = f(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3));
  v = f(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5));
  v = f(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6));
  return v[0];
}

float plane_max(const float* v, int64_t n) {
  if (n < kLanes) {
    float m = v[0];
    for (int64_t i = 1; i < n; ++i) m = keep_first_max(m, v[i]);
    return m;
  }
  f32x8 acc = simd::load(v);
  int64_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes) acc = keep_first_max(acc, simd::load(v + i));
  if (i < n) acc = keep_first_max(acc, simd::load(v + n - kLanes));  // overlap: harmless for max
  return reduce_lanes(acc, keep_first_max<f32x8>);
}

float plane_sum(const float* v, int64_t n) {
  f32x8 acc{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += simd::load(v + i);
  float sum = simd::reduce_add(acc);
  for (; i < n; ++i) sum += v[i];
  return sum;
}

// Index of the first maximum of v[0, n) (NOTE [Max pooling ties]): the first cell equal to the
// maximum, found branch-free as the smallest index (int32: planes are far smaller) of a match in
// any lane. No cell matches only when the maximum is NaN; cell 0 then takes the gradient.
int64_t first_argmax(const float* v, int64_t n) {
  if (n < kLanes) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i) best = v[i] > v[best] ? i : best;
    return best;
  }
  const f32x8 m = simd::broadcast(plane_max(v, n));
  const i32x8 none = i32x8{} + std::numeric_limits<int32_t>::max();
  i32x8 first = none;
  auto match = [&](int64_t i) {
    const i32x8 index = i32x8{0, 1, 2, 3, 4, 5, 6, 7} + static_cast<int32_t>(i);
    const i32x8 candidate = simd::load(v + i) == m ? index : none;
    first = candidate < first ? candidate : first;
  };
  for (int64_t i = 0; i + kLanes <= n; i += kLanes) match(i);
  if (n % kLanes != 0) match(n - kLanes);  // overlaps the last full vector: harmless for a min
  const int32_t best = reduce_lanes(first, [](i32x8 a, i32x8 b) -> i32x8 { return a < b ? a : b; });
  return best == none[0] ? 0 : best;
}

}  // namespace

// ---- 2x2 stride 2 ----

void native_max_forward_2x2(const Pool2DGeometry& g, const float* x, float* y) {
  for_each_row_pair(g, x, y, [&](const float* top, const float* bottom, float* out) {
    for_each_output(
        g.ow,
        [&](int64_t j) {
          // Max down the columns first: only the value matters here, not which cell holds it.
          const f32x8 lo = keep_first_max(simd::load(top + 2 * j), simd::load(bottom + 2 * j));
          const f32x8 hi =
              keep_first_max(simd::load(top + 2 * j + kLanes), simd::load(bottom + 2 * j + kLanes));
          simd::store(out + j, keep_first_max(even_lanes(lo, hi), odd_lanes(lo, hi)));
        },
        [&](int64_t j) {
          const Cells2x2<float> v = load_2x2_scalar(top, bottom, j);
          out[j] = keep_first_max(keep_first_max(keep_first_max(v.a, v.b), v.c), v.d);
        });
  });
}

void native_avg_forward_2x2(const Pool2DGeometry& g, const float* x, float* y) {
  for_each_row_pair(g, x, y, [&](const float* top, const float* bottom, float* out) {
    for_each_output(
        g.ow,
        [&](int64_t j) {
          const f32x8 lo = simd::load(top + 2 * j) + simd::load(bottom + 2 * j);
          const f32x8 hi = simd::load(top + 2 * j + kLanes) + simd::load(bottom + 2 * j + kLanes);
          simd::store(out + j, (even_lanes(lo, hi) + odd_lanes(lo, hi)) * 0.25f);
        },
        [&](int64_t j) {
          const Cells2x2<float> v = load_2x2_scalar(top, bottom, j);
          out[j] = ((v.a + v.c) + (v.b + v.d)) * 0.25f;
        });
  });
}

void native_max_backward_2x2(const Pool2DGeometry& g, const float* x, const float* dy, float* dx) {
  for_each_plane(g, [&](int64_t p) {
    for (int64_t i = 0; i < g.oh; ++i) {
      const float* top = x + (p * g.h + 2 * i) * g.w;
      const float* bottom = top + g.w;
      float* dtop = dx + (p * g.h + 2 * i) * g.w;
      float* dbottom = dtop + g.w;
      const float* grad = dy + (p * g.oh + i) * g.ow;
      for_each_output(
          g.ow,
          [&](int64_t j) {
            store_2x2(max_grad_2x2(load_2x2(top, bottom, j), simd::load(grad + j)), dtop, dbottom,
                      j);
          },
          [&](int64_t j) {
            store_2x2_scalar(max_grad_2x2(load_2x2_scalar(top, bottom, j), grad[j]), dtop, dbottom,
                             j);
          });
    }
    zero_uncovered_2x2(g, dx + p * g.h * g.w);
  });
}

void native_avg_backward_2x2(const Pool2DGeometry& g, const float* dy, float* dx) {
  for_each_plane(g, [&](int64_t p) {
    for (int64_t i = 0; i < g.oh; ++i) {
      float* dtop = dx + (p * g.h + 2 * i) * g.w;
      float* dbottom = dtop + g.w;
      const float* grad = dy + (p * g.oh + i) * g.ow;
      for_each_output(
          g.ow,
          [&](int64_t j) {
            const f32x8 share = simd::load(grad + j) * 0.25f;
            store_2x2(Cells2x2<f32x8>{share, share, share, share}, dtop, dbottom, j);
          },
          [&](int64_t j) {
            const float share = grad[j] * 0.25f;
            store_2x2_scalar(Cells2x2<float>{share, share, share, share}, dtop, dbottom, j);
          });
    }
    zero_uncovered_2x2(g, dx + p * g.h * g.w);
  });
}

// ---- global pooling ----

void native_global_forward(const Pool2DGeometry& g, bool max, const float* x, float* y) {
  const int64_t n = g.h * g.w;
  for_each_plane(g, [&](int64_t p) {
    y[p] = max ? plane_max(x + p * n, n) : plane_sum(x + p * n, n) / static_cast<float>(n);
  });
}

void native_global_max_backward(const Pool2DGeometry& g, const float* x, const float* dy,
                                float* dx) {
  const int64_t n = g.h * g.w;
  for_each_plane(g, [&](int64_t p) {
    float* dplane = dx + p * n;
    std::fill(dplane, dplane + n, 0.0f);
    dplane[first_argmax(x + p * n, n)] = dy[p];
  });
}

void native_global_avg_backward(const Pool2DGeometry& g, const float* dy, float* dx) {
  const int64_t n = g.h * g.w;
  for_each_plane(g, [&](int64_t p) {
    std::fill(dx + p * n, dx + (p + 1) * n, dy[p] / static_cast<float>(n));
  });
}

}  // namespace cleave::kernels::cpu::pool_paths
