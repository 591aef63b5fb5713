#include "window_helpers.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "cleave/core/error.h"

namespace cleave::ir {

std::pair<int64_t, int64_t> positive_pair(const Attrs& attrs, std::string_view name,
                                          const std::string& op) {
  const auto v = attr_or<std::vector<int64_t>>(attrs, name, {1, 1}, op);
  CLEAVE_CHECK_ARG(v.size() == 2 && v[0] >= 1 && v[1] >= 1,
                   "{}: attribute {} is ({}); expected 2 values (height, width), each >= 1", op,
                   name, fmt::join(v, ", "));
  return {v[0], v[1]};
}

std::string pad_mode_name(const Attrs& attrs, const std::string& op) {
  return attr_or<std::string>(attrs, "pad_mode", "valid", op);
}

PadMode pad_mode(const Attrs& attrs, const std::string& op, bool allow_pad) {
  std::string mode = pad_mode_name(attrs, op);
  std::transform(mode.begin(), mode.end(), mode.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (mode == "valid") return PadMode::kValid;
  if (mode == "same") return PadMode::kSame;
  if (mode == "pad" && allow_pad) return PadMode::kPad;
  CLEAVE_FAIL("{}: pad_mode '{}' is not supported; expected one of {}", op,
              pad_mode_name(attrs, op),
              allow_pad ? "\"valid\", \"same\", \"pad\"" : "\"valid\", \"same\"");
}

DimPlan plan_dim(PadMode mode, int64_t in, int64_t dk, int64_t stride, int64_t before,
                 int64_t after) {
  DimPlan p{before, after, 0};
  if (mode == PadMode::kSame) {
    p.out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>(0, (p.out - 1) * stride + dk - in);
    p.before = total / 2;
    p.after = total - p.before;
  } else {
    p.out = (in + before + after - dk) / stride + 1;
  }
  return p;
}

Shape shape_attr(const Attrs& attrs, std::string_view name, const std::string& op) {
  const auto& v = attrs.get<std::vector<int64_t>>(name, op);
  CLEAVE_CHECK_ARG(std::all_of(v.begin(), v.end(), [](int64_t d) { return d >= 0; }),
                   "{}: attribute {} is ({}); expected sizes >= 0", op, name, fmt::join(v, ", "));
  return Shape(v);
}

void expect_grad_shape(const InferContext& ctx, int input, const Shape& expected,
                       const char* what) {
  const Shape& got = ctx.inputs[input].shape;
  CLEAVE_CHECK_ARG(got == expected, "{}: input {} has shape {}; expected {} ({})", ctx.op.name,
                   input, got.to_string(), expected.to_string(), what);
}

Attrs with_shape(const Attrs& attrs, const char* name, const Shape& shape) {
  Attrs a = attrs;
  a.set(name, shape.dims());
  return a;
}

}  // namespace cleave::ir
