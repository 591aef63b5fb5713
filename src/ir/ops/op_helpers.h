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

// Output = input 0's meta (unary elementwise ops).
std::vector<TensorMeta> infer_same_as_input0(const InferContext& ctx);
// Broadcast of inputs 0 and 1 with input 0's dtype; requires equal dtypes.
std::vector<TensorMeta> infer_broadcast_binary(const InferContext& ctx);

}  // namespace cleave::ir
