// Primitives that move, copy or select elements without arithmetic.
#pragma once

#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::ops {

// `shape` may hold one -1, inferred from the element count.
Tensor reshape(const Tensor& x, const Shape& shape);
// Output dim i is input dim perm[i] (negative entries count from the end). Copies.
Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm);
// Inserts a size-1 axis at `axis` (in [-rank-1, rank]). expand_dims, squeeze and flatten return
// views sharing x's storage, like reshape.
Tensor expand_dims(const Tensor& x, int64_t axis);
// Removes the given size-1 axes; all size-1 axes when `axes` is empty.
Tensor squeeze(const Tensor& x, const std::vector<int64_t>& axes = {});
// Keeps dim 0, merges the rest: (N, ...) -> (N, prod(...)).
Tensor flatten(const Tensor& x);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis = 0);
// `output_num` equal parts along `axis` (the size must divide).
std::vector<Tensor> split(const Tensor& x, int64_t axis, int64_t output_num);
// Parts of the sizes `size_splits` along `axis` (they must add up to its size): MindSpore's SplitV.
std::vector<Tensor> split(const Tensor& x, int64_t axis, const std::vector<int64_t>& size_splits);
// x[begin[i] : begin[i] + size[i]] per axis; size -1 means "to the end".
Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const std::vector<int64_t>& size);

// Python slicing x[b0:e0:s0, b1:e1:s1, ...]: negative begin/end count from the end and are
// clamped into range, strides may be negative but not 0, dims past begin.size() are taken whole.
struct StridedSliceOptions {
  std::vector<int64_t> begin, end, strides;
  // Bit i set: ignore begin[i] / end[i] (take the whole range in the stride's direction);
  // shrink_axis_mask bit i: take the single element begin[i] and drop the axis.
  int64_t begin_mask = 0, end_mask = 0, shrink_axis_mask = 0;
};
Tensor strided_slice(const Tensor& x, const StridedSliceOptions& options);
Tensor tile(const Tensor& x, const std::vector<int64_t>& multiples);
Tensor broadcast_to(const Tensor& x, const Shape& shape);

struct OneHotOptions {
  int64_t depth = 0;
  double on_value = 1.0;
  double off_value = 0.0;
  int64_t axis = -1;
  DType dtype = DType::kFloat32;
};
// Integer indices -> one-hot tensor with a new axis of size depth at `axis` (-1: last). An
// index outside [0, depth) gives a line of off_value. Not differentiable.
Tensor one_hot(const Tensor& indices, const OneHotOptions& options);
// Takes slices of `params` along `axis` at integer `indices`: out shape is
// params.shape[:axis] + indices.shape + params.shape[axis+1:]. Indices (Int32/Int64) must lie in
// [0, params.shape[axis]); the first one outside throws Error naming its value.
Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis = 0);
// Scatter-add along the leading dims: x has shape segment_ids.shape + rest, the output
// (num_segments,) + rest with out[s] = sum of x[i] over every i with segment_ids[i] == s (zeros
// for a segment no id names). Ids must be in [0, num_segments). The gradient of gather.
Tensor unsorted_segment_sum(const Tensor& x, const Tensor& segment_ids, int64_t num_segments);

}  // namespace cleave::ops
