// Calling a primitive: infer, allocate, run the kernel, record for autograd.
#pragma once

#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/attrs.h"
#include "cleave/ir/op_def.h"

namespace cleave::ir {

// Runs `op` on `inputs` and returns its outputs. Checks the arity, device and (through the op's
// infer) shapes, dtypes and attributes, throwing Error on bad input. When grad mode is on and an
// input requires a gradient, the call is recorded on the outputs' grad_fn for backward.
std::vector<Tensor> call(const OpDef& op, std::vector<Tensor> inputs, const Attrs& attrs = {});
// For single-output ops.
Tensor call1(const OpDef& op, std::vector<Tensor> inputs, const Attrs& attrs = {});
// By registry name.
std::vector<Tensor> call(std::string_view name, std::vector<Tensor> inputs,
                         const Attrs& attrs = {});

// Output metas of `op` for given inputs, without running it.
std::vector<TensorMeta> infer(const OpDef& op, const std::vector<TensorMeta>& inputs,
                              const Attrs& attrs);

}  // namespace cleave::ir
