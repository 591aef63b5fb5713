// CPU kernels of the index primitives: row gathers (Gather), scatter-adds (UnsortedSegmentSum)
// and one-hot encoding (OneHot) of dense row-major buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cleave::kernels::cpu {

// Row gather: `params` is viewed as (outer, rows, row_bytes) and `out` as
// (outer, num_indices, row_bytes); out[o, k] = params[o, indices[k]]. Indices must be in
// [0, rows) (the caller checks).
template <typename Index>
void gather_rows(const void* params, int64_t outer, int64_t rows, size_t row_bytes,
                 const Index* indices, int64_t num_indices, void* out);

// Scatter-add: `x` is viewed as (n, inner) and `out` as (num_segments, inner);
// out[ids[i]] += x[i] for every i, in order of i (so the result does not depend on the thread
// count). `out` must be initialised by the caller; ids must be in [0, num_segments).
template <typename T, typename Index>
void segment_sum(const T* x, int64_t n, int64_t inner, const Index* ids, T* out);

// out (viewed as (outer, depth, inner)) = on where indices[o, i] == k else off; `indices` is
// viewed as (outer, inner). An index outside [0, depth) gives an all-`off` line.
template <typename T, typename Index>
void one_hot(const Index* indices, int64_t outer, int64_t inner, int64_t depth, T on, T off,
             T* out);

}  // namespace cleave::kernels::cpu
