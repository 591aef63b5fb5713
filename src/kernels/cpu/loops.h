// Vectorisable elementwise loops with NumPy broadcasting, parallelised with OpenMP (the one
// threading layer of cleave: oneDNN runs on the same OpenMP runtime).
//
// NOTE [Broadcast loops]
// An output of shape `out` is produced from inputs whose shapes broadcast to it. Each input is
// described by its broadcast strides: the row-major stride of a dim, or 0 where the input has
// size 1 (or lacks the dim). The output is walked as `outer` rows of `inner` contiguous elements,
// where `inner` is the last output dim; inside a row each input advances by its last-dim stride
// (1 or 0), which the compiler vectorises. Same-shape and scalar operands take a flat fast path.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "cleave/core/shape.h"
#include "parallel.h"

namespace cleave::kernels::cpu {

// Below this many elements a loop runs on one thread: spawning costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 15;
// Below this many bytes a copy runs on one thread.
constexpr int64_t kParallelBytes = kParallelGrain * 8;

// Row-major strides of `in` broadcast to `out` (0 on broadcast dims), length out.rank().
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// out[i] = f(a[i]).
template <typename In, typename Out, typename F>
void unary_loop(const In* a, Out* out, int64_t n, F f) {
  simd_for(n, n > kParallelGrain, [&](int64_t i) { out[i] = f(a[i]); });
}

// out[i] = f(a[i], b[i]) with broadcasting of a and b to `out_shape`.
template <typename A, typename B, typename Out, typename F>
void binary_loop(const A* a, const Shape& a_shape, const B* b, const Shape& b_shape, Out* out,
                 const Shape& out_shape, F f) {
  const int64_t n = out_shape.numel();
  if (n == 0) return;
  const int64_t na = a_shape.numel();
  const int64_t nb = b_shape.numel();
  if (na == n && nb == n) {
    simd_for(n, n > kParallelGrain, [&](int64_t i) { out[i] = f(a[i], b[i]); });
    return;
  }
  if (na == n && nb == 1) {
    const B bv = b[0];
    simd_for(n, n > kParallelGrain, [&](int64_t i) { out[i] = f(a[i], bv); });
    return;
  }
  if (na == 1 && nb == n) {
    const A av = a[0];
    simd_for(n, n > kParallelGrain, [&](int64_t i) { out[i] = f(av, b[i]); });
    return;
  }
  const std::vector<int64_t> sa = broadcast_strides(a_shape, out_shape);
  const std::vector<int64_t> sb = broadcast_strides(b_shape, out_shape);
  const int64_t rank = out_shape.rank();
  const int64_t inner = out_shape[rank - 1];
  const int64_t outer = n / inner;
  const int64_t ia = sa[rank - 1];
  const int64_t ib = sb[rank - 1];
  parallel_for(outer, n > kParallelGrain, [&](int64_t row) {
    // Offsets of this row in a and b from the row's multi-index (dims 0..rank-2).
    int64_t oa = 0, ob = 0, rem = row;
    for (int64_t d = rank - 2; d >= 0; --d) {
      const int64_t idx = rem % out_shape[d];
      rem /= out_shape[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    const A* pa = a + oa;
    const B* pb = b + ob;
    Out* po = out + row * inner;
    if (ia == 1 && ib == 1) {
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) po[i] = f(pa[i], pb[i]);
    } else if (ia == 1) {
      const B bv = pb[0];
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) po[i] = f(pa[i], bv);
    } else if (ib == 1) {
      const A av = pa[0];
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) po[i] = f(av, pb[i]);
    } else {
      const A av = pa[0];
      const B bv = pb[0];
      for (int64_t i = 0; i < inner; ++i) po[i] = f(av, bv);
    }
  });
}

// NOTE [Broadcast rows]
// The n-ary generalisation of NOTE [Broadcast loops]: `out_shape` is walked as rows of its last
// dim; for each row, `row(out_offset, offsets, inner_strides, inner)` receives where the row
// starts in the output and in each input, and each input's stride along the row (1, or 0 where
// it is broadcast). When every input has the output's shape the whole tensor is handed out as
// flat chunks with strides 1, so the common case is one contiguous loop.
template <size_t N, typename Row>
void for_each_broadcast_row(const std::array<Shape, N>& in_shapes, const Shape& out_shape,
                            Row row) {
  const int64_t n = out_shape.numel();
  if (n == 0) return;
  bool all_full = true;
  for (const Shape& s : in_shapes) all_full = all_full && s.numel() == n;
  std::array<int64_t, N> strides{};
  if (all_full) {
    strides.fill(1);
    const int64_t chunks = (n + kParallelGrain - 1) / kParallelGrain;
    parallel_for(chunks, chunks > 1, [&](int64_t c) {
      const int64_t begin = c * kParallelGrain;
      std::array<int64_t, N> o;
      o.fill(begin);
      row(begin, o, strides, std::min(kParallelGrain, n - begin));
    });
    return;
  }
  const int64_t rank = out_shape.rank();
  std::array<std::vector<int64_t>, N> bstrides;
  for (size_t k = 0; k < N; ++k) {
    bstrides[k] = broadcast_strides(in_shapes[k], out_shape);
    strides[k] = bstrides[k][static_cast<size_t>(rank - 1)];
  }
  const int64_t inner = out_shape[rank - 1];
  const int64_t outer = n / inner;
  parallel_for(outer, n > kParallelGrain, [&](int64_t r) {
    std::array<int64_t, N> offsets{};
    int64_t rem = r;
    for (int64_t d = rank - 2; d >= 0; --d) {
      const int64_t idx = rem % out_shape[d];
      rem /= out_shape[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += idx * bstrides[k][static_cast<size_t>(d)];
    }
    row(r * inner, offsets, strides, inner);
  });
}

}  // namespace cleave::kernels::cpu
