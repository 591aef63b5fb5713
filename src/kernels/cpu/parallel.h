// A parallel loop that costs nothing when it runs serially.
//
// NOTE [Serial fast path]
// `#pragma omp parallel for if (n > grain)` still enters the OpenMP runtime when the condition is
// false, which with libgomp costs more than the whole work of a small kernel (a 16x32x16 matmul,
// a softmax over 32x10). Kernels that run on small tensors therefore branch around the pragma
// with parallel_for. Measurements: bench/README.md, 'core'.
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

// Calls body(i) for every i in [0, n): split across the OpenMP team when `parallel`, else inline
// on the calling thread. body must be safe to run concurrently for distinct i.
template <typename F>
inline void parallel_for(int64_t n, bool parallel, F&& body) {
  if (parallel) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

// Like parallel_for, for a vectorisable body: a `simd` loop on the calling thread unless
// `parallel`, then `parallel for simd`.
template <typename F>
inline void simd_for(int64_t n, bool parallel, F&& body) {
  if (parallel) {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

}  // namespace cleave::kernels::cpu
