// Reductions over axes. An empty `axes` reduces over every axis (MindSpore's default).
#pragma once

#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::ops {

struct ReduceOptions {
  std::vector<int64_t> axes;  // negative counts from the end; empty = all axes
  bool keep_dims = false;
};

Tensor reduce_sum(const Tensor& x, const ReduceOptions& options = {});
Tensor reduce_mean(const Tensor& x, const ReduceOptions& options = {});
Tensor reduce_max(const Tensor& x, const ReduceOptions& options = {});
Tensor reduce_min(const Tensor& x, const ReduceOptions& options = {});
Tensor reduce_prod(const Tensor& x, const ReduceOptions& options = {});
// Index of the max/min along `axis` (Int32 output, the axis removed). Ties pick the first.
Tensor argmax(const Tensor& x, int64_t axis = -1);
Tensor argmin(const Tensor& x, int64_t axis = -1);

// Sums `x` down to `shape` (the inverse of broadcasting `shape` to x.shape()): the gradient
// helper for every broadcasting op. Returns x itself when the shapes are equal.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace cleave::ops
