#include "index.h"

#include <algorithm>
#include <cstring>

#include "loops.h"
#include "parallel.h"

namespace cleave::kernels::cpu {

template <typename Index>
void gather_rows(const void* params, int64_t outer, int64_t rows, size_t row_bytes,
                 const Index* indices, int64_t num_indices, void* out) {
  const int64_t total = outer * num_indices;
  const auto* src = static_cast<const std::byte*>(params);
  auto* dst = static_cast<std::byte*>(out);
  const bool parallel = total * static_cast<int64_t>(row_bytes) > kParallelBytes;
  auto copy_rows = [&]<typename W>() {
    // Rows of one element: a typed loop instead of a memcpy call per element.
    const W* s = reinterpret_cast<const W*>(src);
    W* o = reinterpret_cast<W*>(dst);
    parallel_for(total, parallel, [&](int64_t t) {
      o[t] = s[t / num_indices * rows + static_cast<int64_t>(indices[t % num_indices])];
    });
  };
  if (row_bytes == 4) return copy_rows.template operator()<uint32_t>();
  if (row_bytes == 8) return copy_rows.template operator()<uint64_t>();
  parallel_for(total, parallel, [&](int64_t t) {
    const int64_t o = t / num_indices;
    const int64_t row = o * rows + static_cast<int64_t>(indices[t % num_indices]);
    std::memcpy(dst + static_cast<size_t>(t) * row_bytes,
                src + static_cast<size_t>(row) * row_bytes, row_bytes);
  });
}

template <typename T, typename Index>
void segment_sum(const T* x, int64_t n, int64_t inner, const Index* ids, T* out) {
  // Each thread owns a block of columns and walks every row in order: no two threads write the
  // same element and the summation order is fixed.
  constexpr int64_t kCols = 256;
  const int64_t blocks = (inner + kCols - 1) / kCols;
  parallel_for(blocks, blocks > 1 && n * inner > kParallelGrain, [&](int64_t b) {
    const int64_t c0 = b * kCols, c1 = std::min(inner, c0 + kCols);
    for (int64_t i = 0; i < n; ++i) {
      T* po = out + static_cast<int64_t>(ids[i]) * inner;
      const T* px = x + i * inner;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) po[c] += px[c];
    }
  });
}

template <typename T, typename Index>
void one_hot(const Index* indices, int64_t outer, int64_t inner, int64_t depth, T on, T off,
             T* out) {
  const int64_t total = outer * depth * inner;
  simd_for(total, total > kParallelGrain, [&](int64_t i) { out[i] = off; });
  parallel_for(outer, total > kParallelGrain, [&](int64_t o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t v = static_cast<int64_t>(indices[o * inner + i]);
      if (v >= 0 && v < depth) out[(o * depth + v) * inner + i] = on;
    }
  });
}

template void gather_rows<int32_t>(const void*, int64_t, int64_t, size_t, const int32_t*, int64_t,
                                   void*);
template void gather_rows<int64_t>(const void*, int64_t, int64_t, size_t, const int64_t*, int64_t,
                                   void*);

#define CLEAVE_INSTANTIATE_SEGMENT_SUM(T)                                                \
  template void segment_sum<T, int32_t>(const T*, int64_t, int64_t, const int32_t*, T*); \
  template void segment_sum<T, int64_t>(const T*, int64_t, int64_t, const int64_t*, T*);
CLEAVE_INSTANTIATE_SEGMENT_SUM(float)
CLEAVE_INSTANTIATE_SEGMENT_SUM(double)
CLEAVE_INSTANTIATE_SEGMENT_SUM(int32_t)
CLEAVE_INSTANTIATE_SEGMENT_SUM(int64_t)
#undef CLEAVE_INSTANTIATE_SEGMENT_SUM

#define CLEAVE_INSTANTIATE_ONE_HOT(T)                                                     \
  template void one_hot<T, int32_t>(const int32_t*, int64_t, int64_t, int64_t, T, T, T*); \
  template void one_hot<T, int64_t>(const int64_t*, int64_t, int64_t, int64_t, T, T, T*);
CLEAVE_INSTANTIATE_ONE_HOT(float)
CLEAVE_INSTANTIATE_ONE_HOT(double)
CLEAVE_INSTANTIATE_ONE_HOT(int32_t)
CLEAVE_INSTANTIATE_ONE_HOT(int64_t)
CLEAVE_INSTANTIATE_ONE_HOT(bool)
#undef CLEAVE_INSTANTIATE_ONE_HOT

}  // namespace cleave::kernels::cpu
