// Small pieces shared by the data-movement op families (shape.cc, slice.cc, index.cc).
#pragma once

#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/op_def.h"
#include "cleave/ops/shape.h"

namespace cleave::ir {

// `axis` resolved against `rank` valid positions (an axis in [-rank, rank)); throws Error naming
// the op, the attribute, the input shape and the accepted range.
inline int64_t checked_axis(const InferContext& ctx, int64_t axis, int64_t rank,
                            const char* attr = "axis", int input = 0) {
  CLEAVE_CHECK_ARG(axis >= -rank && axis < rank,
                   "{}: {} {} is out of range for input {} of shape {}; expected an axis in "
                   "[{}, {}]",
                   ctx.op.name, attr, axis, input, ctx.inputs[input].shape.to_string(), -rank,
                   rank - 1);
  return axis < 0 ? axis + rank : axis;
}

// "(1, 2, 3)" for an attribute vector.
inline std::string dims_string(const std::vector<int64_t>& v) { return Shape(v).to_string(); }

// Zeros of `shape` written with primitives (a broadcast scalar), for use inside grad rules.
inline Tensor zeros_for_grad(const Shape& shape, DType dtype) {
  return ops::broadcast_to(Tensor::zeros(Shape{}, dtype), shape);
}

}  // namespace cleave::ir
