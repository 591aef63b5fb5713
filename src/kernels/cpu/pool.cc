#include "kernels/cpu/pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/onednn_layout.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace cleave::kernels::cpu {

std::string Pool2DGeometry::key() const {
  return fmt::format("x{},{},{},{} k{},{} s{},{} p{},{},{},{} y{},{}", n, c, h, w, kh, kw, stride_h,
                     stride_w, pad_top, pad_bottom, pad_left, pad_right, oh, ow);
}

namespace {

// NOTE [Pooling paths]
// Float32 pooling runs on the hand-written kernels below: a fast path for 2x2 windows of stride
// 2 without padding (NOTE [2x2 pooling fast path]), one for global pooling, and general kernels
// for every other geometry, all on cleave's plain nchw tensors. oneDNN 2.6 is slower on every
// shape measured: on AVX2 it pools plain nchw memory with scalar C++ (simple_nchw) and runs its
// JIT code only on channel-blocked nChw8c memory, which costs a reorder of every input and output,
// and its max pooling backward first reruns the forward pass to get a workspace. It stays as a
// comparison path (PoolPath::kOneDnn: tests check that it agrees, bench/pool_bench re-measures
// this table; re-measure when oneDNN is upgraded).
//
// Per call, us, median of bench/pool_bench, 1 thread, 2-core AVX2 development host (AMD EPYC,
// -O3 -march=x86-64-v3); "ours" is PoolPath::kAuto, oneDNN as the op used it before (nChw8c with
// reorders; plain nchw for max backward when C is not a multiple of 8):
//
//                                  max fwd         max bwd          avg fwd        avg bwd
//   x (N, C, H, W), window         ours  oneDNN    ours  oneDNN     ours oneDNN    ours oneDNN
//   32x6x28x28, 2x2 s2 (LeNet)       17     326      42    2604       18    171      18    297
//   32x16x10x10, 2x2 s2 (LeNet)      15      66      32     298       16     66      16     70
//   32x8x28x28, 2x2 s2               22     230      56    1001       23    125      24    184
//   32x64x56x56, 2x2 s2            1346    9501    2799   36626     1373   7548    1438   8738
//   32x16x28x28, 3x3 s2 "same"      258     464     729    2301      319    359     315    487
//   32x64x32x32, 3x3 s1 "same"     2448    9017   14264   43267     2841   5536    4088   5728
//   32x64x112x112, 3x3 s2 "same"  11762  104912   54276  277994    11124  91421   18790  94409
//   32x256x7x7, 7x7 (global)         36     129     115     866       46    275      33    295
//
// With 2 threads the LeNet shapes take 9 / 21 / 10 / 10 us (32x6x28x28) and 8 / 16 / 8 / 9 us
// (32x16x10x10) against oneDNN's 176 / 1347 / 96 / 157 and 38 / 161 / 39 / 40. The general
// kernels alone, on the 2x2 shapes, take 2-5x the fast path (32x6x28x28: 78 / 164 / 95 / 96)
// and on global pooling 3-14x the global path. The weakest kernel is the general max backward,
// a scalar scan of every window (5x its forward on 3x3 windows), still 3-5x faster than oneDNN.
// Large shapes vary by up to ±40% between runs on this shared host.
//
// NOTE [Max pooling backward recomputes]
// MaxPoolGrad takes x and dy and finds each window's first maximum again from x, rather than
// reading a record of the maxima saved by the forward pass: such a record (oneDNN's workspace)
// has a size and meaning private to the implementation that wrote it, the Float64 path has no
// such thing, and an extra output of MaxPool2D would be visible to graph passes and sharding
// rules. The hand-written kernels compare the window's cells again, which costs about one more
// pass over x; the oneDNN comparison path reruns its forward pass in forward_training mode to
// get the workspace, then runs its backward.

// ---------------------------------------------------------------------------------------------
// Float32: hand-written kernels, threaded over the n·c planes (NOTE [Pooling paths]).
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
//
// Other geometries take the general kernels, which work on one output row at a time through a
// padded row buffer `buf` of the plane's columns: buf[pad_left + c] holds column c, so window j
// covers buf[j·stride_w, j·stride_w + kw) with no bounds checks, and the padding cells hold the
// identity of the reduction (−inf for max, 0 for sums) or are never read back (backward).
// ---------------------------------------------------------------------------------------------

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

// `candidate` replaces `best` only when strictly greater, so the first maximum stays (NOTE [Max
// pooling ties]). For floats and f32x8 alike.
template <typename V>
inline V keep_first_max(V best, V candidate) {
  return candidate > best ? candidate : best;
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

bool is_2x2_stride_2(const Pool2DGeometry& g) {
  return g.kh == 2 && g.kw == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_top == 0 &&
         g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0;
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

// One output per plane, whose window holds every cell of the plane.
bool is_global(const Pool2DGeometry& g) {
  const Window win = window(g, 0, 0);
  return g.oh == 1 && g.ow == 1 && win.r0 == 0 && win.r1 == g.h && win.c0 == 0 && win.c1 == g.w;
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

// Runs plane(p) for each of the n·c planes, threaded when the tensor is large.
template <typename F>
void for_each_plane(const Pool2DGeometry& g, F&& plane) {
  parallel_for(g.n * g.c, g.n * g.c * g.h * g.w > kParallelGrain, plane);
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

void native_global_forward(const Pool2DGeometry& g, bool max, const float* x, float* y) {
  const int64_t n = g.h * g.w;
  for_each_plane(g, [&](int64_t p) {
    y[p] = max ? plane_max(x + p * n, n) : plane_sum(x + p * n, n) / static_cast<float>(n);
  });
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

// ---- general geometry ----

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

// ---------------------------------------------------------------------------------------------
// Float32: oneDNN, for comparison only (PoolPath::kOneDnn; NOTE [Pooling paths]). Pools nChw8c
// memory with reorders, except max pooling backward when C is not a multiple of 8, which is
// slower blocked than on plain nchw. Its max backward reruns forward_training for the workspace
// (NOTE [Max pooling backward recomputes]).
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

// The specialised hand-written kernels apply (NOTE [2x2 pooling fast path]).
bool fast_2x2(const Pool2DGeometry& g, PoolPath path) {
  return path == PoolPath::kAuto && is_2x2_stride_2(g);
}
bool fast_global(const Pool2DGeometry& g, PoolPath path) {
  return path == PoolPath::kAuto && is_global(g);
}

}  // namespace

void max_pool2d_forward(const Pool2DGeometry& g, const Tensor& x, const Tensor& y, PoolPath path) {
  if (y.numel() == 0) return;
  if (x.dtype() == DType::kFloat64)
    return reference_max_forward(g, x.data<double>(), y.data<double>());
  if (path == PoolPath::kOneDnn) return onednn_forward(g, dnnl::algorithm::pooling_max, x, y);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  if (fast_2x2(g, path)) return native_max_forward_2x2(g, xp, yp);
  if (fast_global(g, path)) return native_global_forward(g, /*max=*/true, xp, yp);
  native_max_forward(g, xp, yp);
}

void max_pool2d_backward(const Pool2DGeometry& g, const Tensor& x, const Tensor& dy,
                         const Tensor& dx, PoolPath path) {
  if (dx.numel() == 0) return;
  if (x.dtype() == DType::kFloat64) {
    return reference_max_backward(g, x.data<double>(), dy.data<double>(), dx.data<double>());
  }
  if (path == PoolPath::kOneDnn) return onednn_max_backward(g, x, dy, dx);
  const float* xp = x.data<float>();
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  if (fast_2x2(g, path)) return native_max_backward_2x2(g, xp, dyp, dxp);
  if (fast_global(g, path)) return native_global_max_backward(g, xp, dyp, dxp);
  native_max_backward(g, xp, dyp, dxp);
}

void avg_pool2d_forward(const Pool2DGeometry& g, const Tensor& x, const Tensor& y, PoolPath path) {
  if (y.numel() == 0) return;
  if (x.dtype() == DType::kFloat64)
    return reference_avg_forward(g, x.data<double>(), y.data<double>());
  if (path == PoolPath::kOneDnn) {
    return onednn_forward(g, dnnl::algorithm::pooling_avg_exclude_padding, x, y);
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  if (fast_2x2(g, path)) return native_avg_forward_2x2(g, xp, yp);
  if (fast_global(g, path)) return native_global_forward(g, /*max=*/false, xp, yp);
  native_avg_forward(g, xp, yp);
}

void avg_pool2d_backward(const Pool2DGeometry& g, const Tensor& dy, const Tensor& dx,
                         PoolPath path) {
  if (dx.numel() == 0) return;
  if (dy.dtype() == DType::kFloat64) {
    return reference_avg_backward(g, dy.data<double>(), dx.data<double>());
  }
  if (path == PoolPath::kOneDnn) return onednn_avg_backward(g, dy, dx);
  const float* dyp = dy.data<float>();
  float* dxp = dx.data<float>();
  if (fast_2x2(g, path)) return native_avg_backward_2x2(g, dyp, dxp);
  if (fast_global(g, path)) return native_global_avg_backward(g, dyp, dxp);
  native_avg_backward(g, dyp, dxp);
}

}  // namespace cleave::kernels::cpu
