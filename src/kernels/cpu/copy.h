// Strided copies of dense row-major buffers, permuted, boxed and tiled: a helper shared by the op
// families that move data (like loops.h), not one family's kernels. The shape family
// (src/ir/ops/shape.cc: Transpose, Tile, ...) and the slice family (src/ir/ops/slice.cc: Concat,
// Split, Slice, StridedSlice and their gradients) run on them; the index family's gathers and
// scatters are its own kernels (index.h).
//
// Every kernel here moves whole elements and never looks at their values, so it takes raw bytes
// and an element size (1, 4 or 8 bytes: Bool, Int32/Float32, Int64/Float64) and serves every
// dtype with one code path.
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

}  // namespace cleave::kernels::cpu
