#include "dropout.h"

#include <algorithm>
#include <cmath>

#include "loops.h"
#include "parallel.h"

namespace cleave::kernels::cpu {

template <typename T>
void dropout(const T* x, T* y, T* mask, int64_t n, double keep_prob, uint64_t seed) {
  // keep iff (bits >> 11) < keep_prob · 2^53; exact for keep_prob = 1.
  const uint64_t threshold = static_cast<uint64_t>(std::ldexp(keep_prob, 53));
  const T scale = static_cast<T>(1.0 / keep_prob);
  auto draw = [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      uint64_t z = seed + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const T m = (z >> 11) < threshold ? scale : T(0);
      mask[i] = m;
      y[i] = x[i] * m;
    }
  };
  // Blocks of kParallelGrain elements (NOTE [Serial fast path]).
  const int64_t blocks = (n + kParallelGrain - 1) / kParallelGrain;
  parallel_for(blocks, blocks > 1, [&](int64_t block) {
    draw(block * kParallelGrain, std::min(n, (block + 1) * kParallelGrain));
  });
}

template void dropout<float>(const float*, float*, float*, int64_t, double, uint64_t);
template void dropout<double>(const double*, double*, double*, int64_t, double, uint64_t);

}  // namespace cleave::kernels::cpu
