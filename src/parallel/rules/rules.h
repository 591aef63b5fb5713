// The sharding rules of the built-in primitives, one file per op family (NOTE [Sharding rules] in
// cleave/parallel/sharding_rule.h), and the helpers they share. Internal to parallel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel::rules {

// The rules of the built-in primitives, one function per op family (one file each); each
// attaches its rules to the registry's entries (ir::Registry::attach_sharding_rule).
// src/parallel/rules/registrations.cc runs them while the program starts.
void register_elementwise();  // elementwise.cc: unary, binary, compare, Dropout, ...
void register_matmul();       // matmul.cc: MatMul, BatchMatMul, BiasAdd
void register_reduce();       // reduce.cc: Reduce*, Arg*, Softmax, LogSoftmax
void register_shape();        // shape.cc: Reshape & co., Transpose, Tile, ...
void register_slice();        // slice.cc: Concat, Split, Slice, StridedSlice
void register_index();        // index.cc: Gather, OneHot, UnsortedSegmentSum
void register_loss();         // loss.cc: cross entropies
void register_conv();         // conv.cc: convolution, pooling, resizing
void register_norm();         // norm.cc: BatchNorm, LayerNorm
void register_optim();        // optim.cc: optimizer updates
void register_comm();         // comm.cc: the communication primitives

// Attaches `rule` to each op in `ops` (a broken invariant, at start-up, when one is not
// registered or has a rule already).
void add(std::initializer_list<const char*> ops, const std::shared_ptr<const ShardingRule>& rule);

// A rule given by a function building its iteration space.
class SpaceRule : public ShardingRule {
 public:
  using SpaceFn = std::function<IterationSpace(const RuleContext&)>;
  SpaceRule(std::string summary, SpaceFn space) : summary_(std::move(summary)), space_(space) {}
  std::string summary() const override { return summary_; }
  IterationSpace space(const RuleContext& ctx) const override { return space_(ctx); }

 private:
  std::string summary_;
  SpaceFn space_;
};

std::shared_ptr<const ShardingRule> space_rule(std::string summary, SpaceRule::SpaceFn space);

// ---- building iteration spaces ----

// One loop per dimension of `shape` (parallel), named "dim <d>".
std::vector<LoopDim> loops_of(const Shape& shape);
// The dimensions of `shape` aligned right against loops of `out` (NumPy broadcasting): the loop of
// the matching output dimension, or -1 where `shape` has size 1 against a larger dimension.
std::vector<int> broadcast_dims(const Shape& shape, const Shape& out);
// Loops 0..rank-1 in order.
std::vector<int> identity_dims(int64_t rank);
// Every dimension -1: an operand every rank holds whole.
std::vector<int> whole_dims(int64_t rank);

// Elementwise with NumPy broadcasting: one loop per dimension of output 0; every input and output
// is broadcast against it. With `reduce_broadcast`, loops become reductions (sum): an output that
// does not index a loop (a gradient of a broadcast operand) is a pending sum over it.
IterationSpace broadcast_space(const RuleContext& ctx, bool reduce_broadcast = false);

// Marks loop `l` fixed with `why` ("the softmax axis").
void fix(IterationSpace& space, int l, std::string why);

// The local shape of output/operand `layout` of `global` on every rank (all ranks hold the same).
Shape local_shape(const Shape& global, const Layout& layout);

}  // namespace cleave::parallel::rules
