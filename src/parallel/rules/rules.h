// The sharding rules of the built-in primitives, one file per op family (NOTE [Sharding rules] in
// cleave/parallel/sharding_rule.h), and the helpers they share. Internal to parallel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel::rules {

// The rules of the built-in primitives, one function per op family, each defined in
// src/parallel/rules/<family>.cc (the family of NOTE [One primitive, one registry entry] in
// cleave/ir/op_def.h); each attaches its rules to the registry's entries
// (ir::Registry::attach_sharding_rule). src/parallel/rules/registrations.cc runs them while the
// program starts, each through register_family.
void register_elementwise();  // unary, binary, Cast, Fill, ... and their backward primitives
void register_compare();      // comparisons, logic, Select
void register_matmul();       // MatMul, BatchMatMul, BiasAdd
void register_softmax();      // Softmax, LogSoftmax and their backward primitives
void register_dropout();      // Dropout
void register_reduce();       // Reduce*, ArgMax, ArgMin
void register_shape();        // Reshape & co., Transpose, Tile, ...
void register_slice();        // Concat, Split, Slice, StridedSlice
void register_index();        // Gather, OneHot, UnsortedSegmentSum
void register_loss();         // cross entropies, MSE
void register_conv();         // Conv2D and its backward primitives
void register_pool();         // MaxPool2D, AvgPool2D and their backward primitives
void register_norm();         // BatchNorm, LayerNorm
void register_resize();       // ResizeBilinear, ResizeNearest and their backward primitives
void register_optim();        // optimizer updates
void register_comm();         // the communication primitives

// Runs `register_rules`, the registration of `family`'s file, checking that every op it
// attaches a rule to is of that family (OpDef::family): a rule in another family's file is a
// broken invariant that aborts the program at start-up, naming the op and both files.
void register_family(const char* family, void (*register_rules)());

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

// The rule of elementwise ops with NumPy broadcasting (broadcast_space): any split, a size-1
// dimension broadcast against a larger one is not split. One instance, shared by the families
// whose ops are elementwise (elementwise, compare, loss's MSE).
std::shared_ptr<const ShardingRule> broadcast_rule();

// Why a spatial dimension of a convolution or a pooling is not split.
inline constexpr const char* kHaloReason =
    "a spatial dimension (a split would need a halo exchange)";

// Pooling and resizing: every operand is an image (N, C, H, W) (x, y, dy, dx alike); the batch
// and the channels split, the spatial dimensions do not (`why`). The backward primitives that
// take the input's shape as an attribute (`shape_attr`: AvgPoolGrad, Resize*Grad) get the local
// one.
class ImageRule : public ShardingRule {
 public:
  ImageRule(std::string why, std::string shape_attr = "")
      : why_(std::move(why)), shape_attr_(std::move(shape_attr)) {}
  std::string summary() const override;
  IterationSpace space(const RuleContext& ctx) const override;
  ir::Attrs local_attrs(const LowerContext& ctx) const override;

 private:
  std::string why_;
  std::string shape_attr_;
};

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
