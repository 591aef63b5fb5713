// The autograd record left on a tensor by the op that produced it (PyNative mode).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/attrs.h"
#include "cleave/ir/op_def.h"

namespace cleave {

// Where the gradient of one input of a recorded op goes: into another recorded op's output
// (`node`, `output_index`), into a leaf tensor's .grad (`leaf`), or nowhere (both null).
struct GradEdge {
  std::shared_ptr<GradNode> node;
  int output_index = 0;
  std::shared_ptr<TensorImpl> leaf;
};

struct GradNode {
  const ir::OpDef* op = nullptr;
  ir::Attrs attrs;
  std::vector<Tensor> inputs;   // detached views of the inputs
  std::vector<Tensor> outputs;  // detached views of the outputs
  std::vector<GradEdge> next;   // one per input
  // Creation order: a node's inputs come from nodes created before it, so processing nodes in
  // decreasing sequence is a valid reverse topological order.
  uint64_t sequence = 0;
};

}  // namespace cleave
