// A primitive as an object with its own settings (MindSpore's `ops.MatMul().shard(...)`).
#pragma once

#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/attrs.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/op_def.h"

namespace cleave::ir {

// Calls the registered op `op_name` with fixed attributes. Its strategy (shard) and placement
// (place) are recorded on every node it adds while a graph is traced, taking precedence over the
// placement of the Cell it is called in; eagerly (and in a standalone process) they have no
// effect. Cheap to copy.
class Primitive {
 public:
  // Throws Error listing the known ops when `op_name` is not registered.
  explicit Primitive(const std::string& op_name, Attrs attrs = {});

  // One entry per input, one split count (>= 1) per dimension of that input; checked against the
  // op's arity here and against the inputs' ranks at each call. Returns *this.
  Primitive& shard(Strategy in_strategy);
  // With out_strategy: one entry per output, the splits it must have, on the device matrix of
  // in_strategy (MindSpore's out_strategy). The rewrite inserts the communication from what the
  // op computes: a partial sum whose out_strategy splits a dimension over the reduction's
  // devices becomes a ReduceScatter. Checked against the outputs' ranks when traced.
  Primitive& shard(Strategy in_strategy, Strategy out_strategy);
  // Named layouts (NOTE [Named layouts] in cleave/ir/graph.h): one per input, and optionally
  // one per output; all on one device matrix. Returns *this.
  Primitive& shard(std::vector<TensorLayout> in_layouts,
                   std::vector<TensorLayout> out_layouts = {});
  // Returns *this. rank_id must be >= 0.
  Primitive& place(const std::string& role, int64_t rank_id);
  // The instance name of the nodes it adds ("matmul2", as MindSpore names a primitive after the
  // attribute holding it) instead of its op's ("matmul"), prefixed by the calling cell as usual;
  // in dumps, errors and strategy files. Must be a non-empty identifier. Returns *this.
  Primitive& set_name(std::string name);
  const std::string& name() const { return name_; }

  std::vector<Tensor> operator()(std::vector<Tensor> inputs) const;
  // For single-output ops.
  Tensor call1(std::vector<Tensor> inputs) const;

  const OpDef& op() const { return *op_; }
  const Strategy& strategy() const { return strategy_; }
  const Placement& placement() const { return placement_; }

 private:
  const OpDef* op_;
  Attrs attrs_;
  Strategy strategy_;
  Strategy out_strategy_;
  std::vector<TensorLayout> in_layouts_, out_layouts_;
  Placement placement_;
  std::string name_;
};

}  // namespace cleave::ir
