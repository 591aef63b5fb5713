// Shared pieces for defining primitives: lookup of an op's registry entry from its functional
// wrapper, and infer functions common to many ops.
#pragma once

#include <string_view>

#include "cleave/ir/dispatch.h"
#include "cleave/ir/registry.h"

namespace cleave::ir {

// The registry entry `name`, looked up once per call site:
//   static const OpDef& op = op_def("Add");
inline const OpDef& op_def(std::string_view name) { return Registry::global().get(name); }

// Why an entry has no gradient, for the reasons many entries share (NOTE [Parts absent on
// purpose] in cleave/ir/op_def.h).
inline constexpr const char* kNoGradBackward =
    "none, because it is a backward primitive: gradients of gradients (second order) are not "
    "supported";
inline constexpr const char* kNoGradBoolean =
    "none, because its output is boolean: no gradient flows through a comparison";
inline constexpr const char* kNoGradIndex =
    "none, because its output is an integer index, piecewise constant in the input";
inline constexpr const char* kNoGradInPlace =
    "none, because it is an in-place update with no output, traced after the backward pass";

// Checks that inputs 0 and 1 are floating and of one dtype.
void expect_float_pair(const InferContext& ctx);
// Output = input 0's meta (unary elementwise ops).
std::vector<TensorMeta> infer_same_as_input0(const InferContext& ctx);
// Broadcast of inputs 0 and 1 with input 0's dtype; requires equal dtypes.
std::vector<TensorMeta> infer_broadcast_binary(const InferContext& ctx);

}  // namespace cleave::ir
