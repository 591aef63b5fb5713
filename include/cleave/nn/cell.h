// Cell: the unit of a model (MindSpore's nn.Cell), with named parameters and child cells.
//
// A Cell owns its parameters (Tensors with requires_grad set for trainable ones) and its
// children (shared_ptr<Cell>), both registered under names, so that parameters_and_names() yields
// dotted paths in registration order: "conv1.weight", "fc1.weight", "fc1.bias", ...
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/primitive.h"
#include "cleave/runtime/shard.h"

namespace cleave::nn {

// Traces `fn` (one primitive call) with the strategy and placement given to `op`: how a layer's
// inner operators are sharded or placed by name, as in MindSpore (net.fc1.matmul.shard(...)).
// The layers hold such handles (Dense::matmul, Conv2d::conv2d, ReLU::relu, ...); eagerly and
// without a strategy it just calls fn.
template <typename F>
auto with_annotations(const ir::Primitive& op, F&& fn) {
  ir::AnnotationGuard guard(op.placement(), op.strategy(), op.name());
  return fn();
}

class Cell {
 public:
  // `cls_name` is the class name shown in scopes and errors ("Dense", "LeNet").
  explicit Cell(std::string cls_name);
  virtual ~Cell() = default;
  Cell(const Cell&) = delete;
  Cell& operator=(const Cell&) = delete;

  // The computation of a one-input cell. The default throws Error saying the cell takes
  // a different number of inputs.
  virtual Tensor construct(const Tensor& x);
  // The computation of a two-input cell (losses: logits and labels; WithLossCell: data and
  // label). The default throws Error.
  virtual Tensor construct(const Tensor& a, const Tensor& b);
  // Calling a cell runs construct. While a graph is traced (GRAPH_MODE), it also opens this
  // cell's scope ("<name>-<cls_name>", the name under which the calling cell registered it) and
  // applies its placement to the ops traced inside; call child cells this way (not through
  // construct) so that their ops get scopes and instance names like "fc1.matmul".
  Tensor operator()(const Tensor& x);
  Tensor operator()(const Tensor& a, const Tensor& b);

  // Places every op traced inside this cell on (role, rank_id) (MindSpore's Cell.place); an
  // inner cell's or op's own placement takes precedence. Recorded on graph nodes and printed in
  // IR dumps; execution on this process ignores it for now. Returns *this.
  Cell& place(const std::string& role, int64_t rank_id);
  const std::string& placement_role() const { return place_role_; }
  int64_t placement_rank() const { return place_rank_; }

  // Registers a child under `name` (unique among this cell's children and parameters) and
  // returns it.
  template <typename C>
  std::shared_ptr<C> register_module(const std::string& name, std::shared_ptr<C> cell) {
    add_child(name, cell);
    return cell;
  }
  // Registers a parameter under `name` and returns it (the same storage). Floating tensors only.
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);

  // Every parameter of this cell and its descendants, depth first in registration order, named
  // by dotted path.
  std::vector<std::pair<std::string, Tensor>> parameters_and_names() const;
  // Parameters with requires_grad (the ones an optimizer updates).
  std::vector<Tensor> trainable_params() const;
  // Every parameter.
  std::vector<Tensor> get_parameters() const;
  // Direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Cell>>>& children() const {
    return children_;
  }

  // Training mode for this cell and its descendants (Dropout, BatchNorm); returns *this.
  Cell& set_train(bool mode = true);
  bool training() const { return training_; }

  const std::string& cls_name() const { return cls_name_; }

  // MindSpore's Cell.shard (PYNATIVE_MODE): from now on, calling this cell runs its construct as
  // a compiled, sharded block (NOTE [Sharded blocks in PyNative] in cleave/runtime/shard.h), one
  // in_strategy entry per input of construct (one or two). parameter_plan names the cell's
  // parameters by its own paths ("dense2.weight") or from the cell that registered it
  // ("block1.dense2.weight", "self.block1.dense2.weight"). Calling shard again replaces the
  // block. Throws Error as runtime::ShardedBlock's constructor does. Returns *this.
  Cell& shard(runtime::InStrategy in_strategy, runtime::ShardOptions options = {});
  // The block a sharded cell runs (null before shard()).
  runtime::ShardedBlock* sharded_block() const { return shard_block_.get(); }
  // The name under which this cell was first registered as a child ("" for a root).
  const std::string& registered_name() const { return registered_name_; }

 private:
  void add_child(const std::string& name, std::shared_ptr<Cell> cell);
  void check_new_name(const std::string& name) const;

  // Name of this cell in the innermost cell being called on this thread ("network" at the root).
  std::string scope_name() const;

  std::string cls_name_;
  bool training_ = false;
  std::string place_role_;
  int64_t place_rank_ = -1;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, std::shared_ptr<Cell>>> children_;
  std::string registered_name_;
  std::shared_ptr<runtime::ShardedBlock> shard_block_;
};

using CellPtr = std::shared_ptr<Cell>;

}  // namespace cleave::nn

namespace cleave {

// MindSpore's ms.shard on a Cell: a sharded function running `cell` (whose construct takes one or
// two inputs: one in_strategy entry each); the cell itself stays eager when called directly.
// Shares ownership of the cell. parameter_plan names its parameters as Cell::shard does. Throws
// Error for a null cell, and as runtime::ShardedBlock's constructor does.
ShardedFunction shard(const nn::CellPtr& cell, InStrategy in_strategy, ShardOptions options = {});

}  // namespace cleave
