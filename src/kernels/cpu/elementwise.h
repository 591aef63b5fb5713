// CPU kernels of the elementwise primitives: unary math and its backward, broadcasting binary
// arithmetic, fill. (Comparisons, logic and select: compare.h.)
//
// Every function fills a preallocated contiguous `out` whose shape is the NumPy broadcast of the
// inputs' shapes; the caller (the op's infer) has checked shapes and dtypes, so a mismatch here is
// a broken invariant, not bad input.
//
// NOTE [Float32 transcendental kernels]
// GCC does not vectorise calls to expf/sqrtf/tanhf/... without -ffast-math (errno handling), so
// Float32 tensors of at least kOneDnnMinElements elements run Exp, Sqrt, Rsqrt, Sigmoid, Tanh
// and GELU (forward and backward) through oneDNN's JIT eltwise primitives, cached per size (NOTE
// [oneDNN primitive cache]); smaller Float32 tensors and all Float64 tensors use the C++ library
// functions, so two sizes may differ in the last bits. Log and Erf use the vectorised functions
// of math_f32.h at every Float32 size: oneDNN's log is off by up to 4e-6 near 1, and oneDNN has
// no erf.
#pragma once

#include <cstdint>

#include "cleave/core/tensor.h"

namespace cleave::kernels::cpu {

// At and above this many Float32 elements a transcendental op runs through oneDNN.
constexpr int64_t kOneDnnMinElements = 1 << 12;

enum class UnaryOp {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kAbs,
  kSquare,
  kRelu,
  kGelu,  // exact: x * 0.5 * (1 + erf(x / sqrt(2)))
  kSigmoid,
  kTanh,
  kErf,
};

// out = op(x), same shape and dtype. Neg, Abs and Square take Int32/Int64 too; the others take
// floating dtypes.
void unary(UnaryOp op, const Tensor& x, const Tensor& out);

// Backward of a unary op: dx = dy * op'(.), computed from `saved`, which is the forward input x
// or the forward output y as the name says. Floating dtypes; dy, saved and dx share one shape.
enum class UnaryGradOp {
  kReluFromX,     // dy where x > 0, else 0
  kAbsFromX,      // dy * sign(x), 0 at x == 0
  kGeluFromX,     // dy * (Phi(x) + x * phi(x))
  kErfFromX,      // dy * 2 / sqrt(pi) * exp(-x^2)
  kSigmoidFromY,  // dy * y * (1 - y)
  kTanhFromY,     // dy * (1 - y^2)
  kSqrtFromY,     // dy * 0.5 / y
  kRsqrtFromY,    // dy * -0.5 * y^3
};
void unary_grad(UnaryGradOp op, const Tensor& dy, const Tensor& saved, const Tensor& dx);

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum };

// out = op(a, b) with broadcasting; a, b and out share one numeric dtype. Integer Div truncates
// toward zero and throws Error when b holds a zero; integer Pow with a negative exponent gives
// the truncated result (0 unless |a| == 1).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);

// Gradient of Maximum (op == kMaximum) or Minimum (kMinimum) at the broadcast shape of dy: dy goes
// to the input holding the larger (smaller) value; on a tie each input gets dy / 2. da and db
// have dy's shape (the caller sums them to the input shapes).
void extremum_grad(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& dy,
                   const Tensor& da, const Tensor& db);

// Sets every element of `out` to `value` converted to its dtype (nonzero -> true for Bool).
void fill(const Tensor& out, double value);

}  // namespace cleave::kernels::cpu
