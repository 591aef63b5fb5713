// Elementwise primitives: unary math, binary arithmetic with NumPy broadcasting, comparisons,
// logic, select, cast and fills. Every function runs eagerly on concrete tensors and is recorded
// for autograd; the same calls trace into a graph in graph mode.
#pragma once

#include "cleave/core/tensor.h"

namespace cleave::ops {

// ---- unary (floating inputs; Neg, Abs, Square also take integers) ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor relu(const Tensor& x);
// Exact GELU: x·Φ(x) with the Gaussian CDF via erf.
Tensor gelu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);

// ---- binary, NumPy broadcasting; both inputs of one dtype ----
// Integer div truncates toward zero (a zero divisor is an Error); integer pow with a negative
// exponent truncates too. maximum/minimum propagate NaN; their gradient splits ties evenly
// between a and b. The gradient of pow with respect to b is taken as 0 where a == 0.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// With a scalar of a's dtype.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double b);

// ---- comparisons: Bool outputs, broadcasting ----
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);

// ---- logic on Bool tensors ----
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);

// Elementwise `condition ? a : b` with broadcasting of all three; condition is Bool.
Tensor select(const Tensor& condition, const Tensor& a, const Tensor& b);

// Converts the dtype (float->int truncates toward zero; nonzero -> true for Bool).
Tensor cast(const Tensor& x, DType dtype);
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
// A tensor of `shape` filled with `value`.
Tensor fill(DType dtype, const Shape& shape, double value);

}  // namespace cleave::ops

namespace cleave {

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
// The scalar on the left: a + b, a - b, a / b with `a` as a scalar of b's dtype.
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

}  // namespace cleave
