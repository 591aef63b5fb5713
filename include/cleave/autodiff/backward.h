// Reverse-mode differentiation of eagerly computed tensors (PyNative mode).
#pragma once

#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::autodiff {

// Propagates d(output)/d(.) back through the recorded ops and ADDS the result into .grad of every
// leaf that requires a gradient (so repeated calls accumulate, as in gradient accumulation).
// `output` must require a gradient. Without `grad_output`, output must have exactly one element;
// otherwise grad_output must match output's shape and dtype. Throws Error on violations, and
// when a gradient must flow through an op that has no gradient rule (naming the op).
void backward(const Tensor& output, const Tensor& grad_output = {});

// Returns d(output)/d(inputs[i]) for each input without touching any .grad; an input that output
// does not depend on gets zeros. Same requirements as backward.
std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                         const Tensor& grad_output = {});

}  // namespace cleave::autodiff
