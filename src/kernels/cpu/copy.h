// Data-movement kernels: permuted, boxed, tiled and gathered copies of dense row-major buffers.
//
// Every kernel here moves whole elements and never looks at their values, so it takes raw bytes
// and an element size (1, 4 or 8 bytes: Bool, Int32/Float32, Int64/Float64) and serves every
// dtype with one code path. The scatter-add kernel is the exception: it adds, so it is typed.
//
// NOTE [Coalesced copies]
// A copy between a dense tensor and some strided pattern over another one is planned first: dims
// of size 1 are dropped and neighbouring dims that are contiguous with each other on both sides
// are merged. What is left is usually a few dims whose innermost one is a contiguous run, copied
// with memcpy; e.g. Concat of (8, 3, 64) pieces along axis 1 becomes 8 runs of 3 * 64 elements
// per piece, and Slice of whole trailing dims becomes one run per leading index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cleave/core/shape.h"

namespace cleave::kernels::cpu {

// out = in with its dims permuted: output dim i is input dim perm[i]. Both buffers dense;
// `perm` is a permutation of [0, in_shape.rank()). The 2-D (and batched 2-D, e.g. NCHW <-> NHWC)
// cases run as a cache-blocked transpose, with an AVX2 8x8 micro-kernel for 4-byte elements.
void transpose(const void* in, const Shape& in_shape, const std::vector<int64_t>& perm, void* out,
               size_t elem_size);

// A strided box inside a dense tensor of shape `full`: box element i (a multi-index over `dims`)
// is element begin[d] + i[d] * strides[d] (per dim d) of the tensor. Strides may be negative;
// every addressed element must lie inside `full` (the caller checks).
struct Box {
  std::vector<int64_t> begin, strides, dims;
};

// out (dense, shape box.dims) = the box of `in` (dense, shape `full`).
void gather_box(const void* in, const Shape& full, const Box& box, void* out, size_t elem_size);
// The box of `out` (dense, shape `full`) = in (dense, shape box.dims); other elements of `out`
// are left as they are.
void scatter_box(const void* in, const Box& box, void* out, const Shape& full, size_t elem_size);

// out = in repeated multiples[d] times along each dim d (NumPy tile); multiples.size() ==
// in_shape.rank(), every multiple >= 0. Output dim d is in_shape[d] * multiples[d].
void tile(const void* in, const Shape& in_shape, const std::vector<int64_t>& multiples, void* out,
          size_t elem_size);

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
