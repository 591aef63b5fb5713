// Pieces shared by the sliding-window op families (conv.cc, pool.cc): their (height, width)
// attributes, their pad modes, and the shape attributes their backward primitives take in place
// of a tensor.
//
// NOTE [Conv and pool pad modes]
// Each spatial dim of size `in` with kernel k, dilation d (dilated extent dk = (k − 1)·d + 1) and
// stride s gets an output size and explicit paddings (before, after) from pad_mode:
//   "valid": no padding; out = floor((in − dk)/s) + 1, and dk must not exceed in;
//   "same":  out = ceil(in/s); the total padding max(0, (out − 1)·s + dk − in) is split with the
//            odd cell after (bottom/right), as TensorFlow and MindSpore do;
//   "pad":   (Conv2D only) the given pad = (top, bottom, left, right);
//            out = floor((in + before + after − dk)/s) + 1, and dk must not exceed the padded size.
// pad_mode is matched case-insensitively ("SAME" is MindSpore's spelling for pools).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "cleave/ir/op_def.h"

namespace cleave::ir {

// `name` if present (with a type check), else `fallback`: attributes a call may leave out.
template <typename T>
T attr_or(const Attrs& attrs, std::string_view name, T fallback, const std::string& op) {
  return attrs.has(name) ? attrs.get<T>(name, op) : fallback;
}

// A (height, width) attribute whose values must be >= 1 (default (1, 1)); throws Error naming
// the op and the attribute otherwise.
std::pair<int64_t, int64_t> positive_pair(const Attrs& attrs, std::string_view name,
                                          const std::string& op);

enum class PadMode { kValid, kSame, kPad };

// The attribute pad_mode as given (default "valid").
std::string pad_mode_name(const Attrs& attrs, const std::string& op);
// The attribute pad_mode, matched case-insensitively; "pad" is accepted only with `allow_pad`.
// Throws Error listing the accepted modes otherwise.
PadMode pad_mode(const Attrs& attrs, const std::string& op, bool allow_pad);

// One spatial dim of NOTE [Conv and pool pad modes]: fills before/after/out.
struct DimPlan {
  int64_t before = 0, after = 0, out = 0;
};

// The plan of a dim of size `in` for a (dilated) kernel extent `dk` and `stride`; `before` and
// `after` are the explicit paddings of pad_mode "pad" (0 otherwise).
DimPlan plan_dim(PadMode mode, int64_t in, int64_t dk, int64_t stride, int64_t before,
                 int64_t after);

// A shape given as an attribute (the backward primitives' stand-in for a tensor).
Shape shape_attr(const Attrs& attrs, std::string_view name, const std::string& op);

// Checks that input `input` (a gradient) has shape `expected`, `what` naming that shape.
void expect_grad_shape(const InferContext& ctx, int input, const Shape& expected, const char* what);

// `attrs` with the shape attribute `name` set to `shape` (what a gradient rule passes to its
// backward primitive).
Attrs with_shape(const Attrs& attrs, const char* name, const Shape& shape);

}  // namespace cleave::ir
