// CPU kernels of the comparison primitives: comparisons, logic and select, with NumPy
// broadcasting.
//
// Every function fills a preallocated contiguous `out` whose shape is the NumPy broadcast of the
// inputs' shapes; the caller (the op's infer) has checked shapes and dtypes, so a mismatch here is
// a broken invariant, not bad input.
#pragma once

#include "cleave/core/tensor.h"

namespace cleave::kernels::cpu {

enum class CompareOp { kEqual, kNotEqual, kGreater, kGreaterEqual, kLess, kLessEqual };

// Bool out = op(a, b) with broadcasting; a and b share one dtype.
void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out);

enum class LogicOp { kAnd, kOr };

// Bool out = op(a, b) with broadcasting of Bool inputs.
void logical(LogicOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void logical_not(const Tensor& x, const Tensor& out);

// out = condition ? a : b with broadcasting of all three; condition is Bool, a, b and out share
// one dtype.
void select(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace cleave::kernels::cpu
