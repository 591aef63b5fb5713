// Dropout: zero elements at random and scale the kept ones.
#pragma once

#include <cstdint>
#include <vector>

namespace cleave::kernels::cpu {

// NOTE [Dropout stream]
// Element i is kept when u_i < keep_prob, where u_i in [0, 1) is the top 53 bits of
// splitmix64(seed + (i + 1)·φ) (φ = 2^64 / golden ratio): a counter-based stream, so the mask
// depends only on (seed, i), not on the thread count or the order elements are visited, and the
// loop parallelises freely. keep_prob = 1 keeps every element.
//
// mask[i] = keep ? 1 / keep_prob : 0 and y[i] = x[i] · mask[i]; keep_prob must be in (0, 1].
template <typename T>
void dropout(const T* x, T* y, T* mask, int64_t n, double keep_prob, uint64_t seed);

// The same on a slice of a larger tensor (a sharded Dropout): x, y and mask have shape `local`,
// which starts at `offset` inside a tensor of shape `global`, and element i of the slice draws
// with the counter of its element in `global`, so every rank's mask is its slice of the mask one
// device would draw.
template <typename T>
void dropout_slice(const T* x, T* y, T* mask, const std::vector<int64_t>& local,
                   const std::vector<int64_t>& global, const std::vector<int64_t>& offset,
                   double keep_prob, uint64_t seed);

}  // namespace cleave::kernels::cpu
