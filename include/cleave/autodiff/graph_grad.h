// Graph-mode autodiff: appends the backward of a traced loss to the graph being traced.
#pragma once

#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::autodiff {

// NOTE [Graph autodiff]
// A graph-to-graph pass with the eager engine's rules: it walks the traced graph in reverse
// (nodes are in topological order, so from the loss's node down to node 0), and for each op
// that an output gradient reaches and that has an input depending on one of `wrt`, calls the
// op's `grad` rule with symbolic tensors. The rules are written with cleave::ops calls, so their
// ops are traced into the same graph: the backward is ordinary graph nodes after the forward
// ones. Gradients reaching one value from several uses are summed with ops::add in the order the
// eager engine sums them, so both modes compute the same numbers.
//
// Requires an active ir::Tracer and a one-element symbolic `loss`, seeded with `seed` (1, as
// autodiff::backward does; a parallel step seeds its replicated loss with 1 / device_num, NOTE
// [Step-parallel rewrite]). Returns one symbolic gradient per tensor of `wrt` (parameters bound
// in the trace, or symbolic values); an undefined Tensor where the loss does not depend on it.
std::vector<Tensor> graph_grad(const Tensor& loss, const std::vector<Tensor>& wrt,
                               double seed = 1.0);

}  // namespace cleave::autodiff
