#include "dropout.h"

#include <algorithm>
#include <cmath>

#include "loops.h"
#include "parallel.h"

namespace cleave::kernels::cpu {

namespace {

// Elements [begin, end) whose counters start at `counter` for element `begin`.
template <typename T>
void draw(const T* x, T* y, T* mask, int64_t begin, int64_t end, uint64_t counter,
          uint64_t threshold, T scale, uint64_t seed) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    uint64_t z = seed + (counter + static_cast<uint64_t>(i - begin) + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const T m = (z >> 11) < threshold ? scale : T(0);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

}  // namespace

template <typename T>
void dropout_slice(const T* x, T* y, T* mask, const std::vector<int64_t>& local,
                   const std::vector<int64_t>& global, const std::vector<int64_t>& offset,
                   double keep_prob, uint64_t seed) {
  const uint64_t threshold = static_cast<uint64_t>(std::ldexp(keep_prob, 53));
  const T scale = static_cast<T>(1.0 / keep_prob);
  const size_t rank = local.size();
  if (rank == 0) {
    draw(x, y, mask, 0, 1, 0, threshold, scale, seed);
    return;
  }
  const int64_t row = local[rank - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= local[d];
  if (row == 0) return;
  parallel_for(rows, rows * row > kParallelGrain, [&](int64_t r) {
    // The global linear index of the row's first element.
    int64_t rest = r, index = 0, stride = 1;
    std::vector<int64_t> coordinate(rank, 0);
    for (size_t d = rank - 1; d-- > 0;) {
      coordinate[d] = rest % local[d];
      rest /= local[d];
    }
    for (size_t d = rank; d-- > 0;) {
      index += (coordinate[d] + offset[d]) * stride;
      stride *= global[d];
    }
    draw(x, y, mask, r * row, (r + 1) * row, static_cast<uint64_t>(index), threshold, scale, seed);
  });
}

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
template void dropout_slice<float>(const float*, float*, float*, const std::vector<int64_t>&,
                                   const std::vector<int64_t>&, const std::vector<int64_t>&, double,
                                   uint64_t);
template void dropout_slice<double>(const double*, double*, double*, const std::vector<int64_t>&,
                                    const std::vector<int64_t>&, const std::vector<int64_t>&,
                                    double, uint64_t);

}  // namespace cleave::kernels::cpu
