// A parallel loop that costs nothing when it runs serially.
//
// NOTE [Serial fast path]
// `#pragma omp parallel for if (n > grain)` still enters the OpenMP runtime when the condition is
// false, which with libgomp costs more than the whole work of a small kernel (a 16x32x16 matmul,
// a softmax over 32x10). Worse, the loop it then runs can be slower than the same loop outside
// the pragma: `omp parallel for simd if (n > grain)` ran ApplyMomentum on 24000 elements in 23.7
// us where a plain `omp simd` loop takes 3.7 (update_bench). Kernels that run on small tensors
// therefore branch around the pragma with parallel_for, simd_for or range_for. Measurements:
// bench/README.md, 'core' and 'search'.
#pragma once

#include <omp.h>

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

// Calls body(begin, end) on contiguous ranges covering [0, n): one range per thread of the
// OpenMP team when `parallel`, else body(0, n) on the calling thread. For a loop written once in a
// function whose pointer parameters are __restrict (an optimizer update): the compiler vectorises
// it as it stands, where a lambda called per element inside `omp parallel for simd` reloads what
// it captured (ApplyMomentum on 262144 elements: 68 us against 58 on one thread; update_bench).
template <typename F>
inline void range_for(int64_t n, bool parallel, F&& body) {
  if (!parallel) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    body(n * t / count, n * (t + 1) / count);
  }
}

}  // namespace cleave::kernels::cpu
