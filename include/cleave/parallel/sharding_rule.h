// Sharding rules: for every primitive, which strategies are valid, the layouts of its inputs and
// outputs under a strategy, the local computation, and its cost.
//
// NOTE [Sharding rules]
// A strategy (Primitive::shard) gives, for each input of an op, how many slices each dimension is
// cut into. Most rules describe the op by its *iteration space*: named loops, each indexed by some
// input and output dimensions (MatMul: i, k, j). A loop is *parallel* (splitting it splits every
// operand indexing it), a *reduction* (operands indexing it are split, and outputs that do not
// index it become pending partial sums, or maxima, minima, over its device axis) or *fixed* (it
// cannot be split, for the reason the error gives). An input dimension indexing a loop carries
// that loop's split; one indexing no loop carries 1. The device matrix is the loops' splits in
// order, then, when their product is below the device count, a *repeat* axis on which every
// operand is replicated; a dimension indexing loop l is split over axis l when its split is > 1.
// Rules whose operands do not fit loops compute the layouts themselves (infer); rules whose local
// computation is not the same primitive on the slices build it (lower). An op nobody configured
// gets the default strategy: its batch loop (output 0's dimension 0, or input 0's for a scalar
// output) split over every device when that is valid, else all ones. Examples and reasons:
// docs/design/sharding.md, section 2.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/op_def.h"
#include "cleave/parallel/layout.h"

namespace cleave::parallel {

struct LoopDim {
  enum class Kind { kParallel, kReduce, kFixed };
  int64_t size = 1;
  Kind kind = Kind::kParallel;
  PartialOp reduce = PartialOp::kSum;  // kReduce: how outputs not indexing it combine
  // What the loop is, for errors: "the reduction dimension", "the softmax axis", ...
  std::string name;
};

struct IterationSpace {
  std::vector<LoopDim> loops;
  // For each input and each output, for each dimension: the loop it indexes, or -1 (never split).
  std::vector<std::vector<int>> inputs, outputs;
  // The loop the default strategy splits (-1: derived from output 0 / input 0, NOTE above).
  int batch_loop = -1;
};

// What a rule sees: the op as traced, with global shapes.
struct RuleContext {
  const ir::OpDef& op;
  const ir::Attrs& attrs;
  std::span<const ir::TensorMeta> inputs;
  std::span<const ir::TensorMeta> outputs;
  std::string_view name;   // instance name, for errors ("fc1.matmul")
  std::string_view scope;  // scope, for errors
  int64_t device_num = 1;
};

// The result of a valid strategy: what every rank holds and computes.
struct OpSharding {
  ir::Strategy strategy;
  IterationSpace space;              // empty loops for rules without one
  std::vector<int64_t> loop_splits;  // per loop
  DeviceMatrix device_matrix;        // loop splits, then the repeat axis if any
  std::vector<Layout> inputs;        // what each input must be on every rank
  std::vector<Layout> outputs;       // what the local computation produces (may be partial)
  // The rule's cost, per rank: floating-point operations of the local computation, and bytes
  // sent to complete the partial outputs (an AllReduce of each; 0 when none is partial), or,
  // with out_targets, to move the outputs to them (infer_node).
  double compute_flops = 0;
  double forward_comm_bytes = 0;
  // The device axes of each loop, major first, when they are not the default (loop l split over
  // axis l): a sharding from named layouts (infer_node). Empty: the default.
  std::vector<std::vector<int>> loop_axes;
  // The layouts the outputs must have once computed (the op's out_strategy, output_targets()),
  // one per output; empty: each output as computed, its pending reduction completed.
  std::vector<Layout> out_targets;
  // The device axes loop `loop` is split over (none when it is not split).
  std::vector<int> axes_of(int loop) const;
  // What output k holds once the op is done: its target, else its completed layout.
  Layout final_output(size_t k) const {
    return out_targets.empty() ? outputs[k].completed() : out_targets[k];
  }
  // The split of the loop named `loop` (1 when the rule has no such loop).
  int64_t split(int loop) const {
    return loop >= 0 && loop < static_cast<int>(loop_splits.size())
               ? loop_splits[static_cast<size_t>(loop)]
               : 1;
  }
};

// What lower() gets: the op, its sharding, this rank, and the local inputs (symbolic tensors of
// the graph being built, laid out as sharding.inputs).
struct LowerContext {
  const RuleContext& rule;
  const OpSharding& sharding;
  int64_t rank = 0;
  std::vector<Tensor> inputs;
  // Which slice of loop `loop` this rank computes (0 when the loop is not split).
  int64_t loop_index(int loop) const;
};

class ShardingRule {
 public:
  virtual ~ShardingRule() = default;

  // One line for docs and the coverage test: "elementwise with broadcasting", "batch only", ...
  virtual std::string summary() const = 0;
  // The iteration space (NOTE [Sharding rules]). Rules overriding infer() need not define it.
  virtual IterationSpace space(const RuleContext& ctx) const;
  // Checks `strategy` and returns the layouts it implies. Throws Error naming the op, its
  // instance name and scope, the strategy, the input shapes and what would be valid.
  virtual OpSharding infer(const RuleContext& ctx, const ir::Strategy& strategy) const;
  // The strategy of an op nobody configured (NOTE: data parallel when valid, else replicated).
  virtual ir::Strategy default_strategy(const RuleContext& ctx) const;
  // Every valid strategy on ctx.device_num devices with the layouts it implies (for the
  // propagation, the search and the tests), the replicated one first. Inferring is how a
  // strategy is found valid, so its result comes along rather than being computed again.
  virtual std::vector<OpSharding> shardings(const RuleContext& ctx) const;
  // The strategies of shardings(), in its order.
  std::vector<ir::Strategy> strategies(const RuleContext& ctx) const;
  // The attributes of the local op on `rank` (shape attributes made local); default unchanged.
  virtual ir::Attrs local_attrs(const LowerContext& ctx) const;
  // The local computation on `ctx.inputs`; default: the same primitive with local_attrs().
  // Returns one tensor per output, laid out as ctx.sharding.outputs.
  virtual std::vector<Tensor> lower(const LowerContext& ctx) const;
  // Floating-point operations of the whole (unsharded) op; default: the elements of its inputs
  // and outputs.
  virtual double flops(const RuleContext& ctx) const;
  // The work of one rank's slice under the loop splits `splits` (one per loop of space(ctx)), as
  // the cost model counts it: flops(ctx) over the devices the splits use. A rule whose kernels pad
  // a dimension of the slice counts the padded slice (a convolution: NOTE [Padded channels] in
  // src/parallel/rules/conv.cc).
  virtual double slice_flops(const RuleContext& ctx, const std::vector<int64_t>& splits) const;
  // What bounds the op's time, for the cost model (cleave/parallel/cost_model.h): its memory
  // traffic (the default), or the multiply-adds of a matrix product or a convolution.
  enum class ComputeClass { kMemory, kMatMul, kConvolution };
  virtual ComputeClass compute_class() const { return ComputeClass::kMemory; }
};

// The Layout a named layout describes (NOTE [Named layouts] in cleave/ir/graph.h): its device
// matrix, each dimension over the axes it names, in its order.
Layout layout_of(const ir::TensorLayout& named);

// The named layout of `layout` (axes named "a0", "a1", ...): what propagation writes on a node
// whose chosen layouts are not its strategy's default axes.
ir::TensorLayout named_of(const Layout& layout);

// The rule's sharding under the splits of `named` (one layout per input), moved onto the axes
// they name (the rule's own layouts when those put every slice on the same ranks). Throws as
// infer_node does.
OpSharding infer_with_layouts(const ShardingRule& rule, const RuleContext& ctx,
                              const std::vector<ir::TensorLayout>& named);

// The sharding of node `n` (its op's rule as `rule`, described by `ctx`) under `strategy`: the
// rule's inference, then, when the node has named layouts (Node::in_layouts), the device matrix
// and axes they name, and the output targets of its out_strategy or out_layouts. Throws Error
// naming the op for layouts the rule cannot take (two inputs naming different axes for one loop,
// another axis order on an op whose rule is not described by loops), a layout on another device
// count, and an out_strategy that does not fit its outputs.
OpSharding infer_node(const ShardingRule& rule, const RuleContext& ctx, const ir::Node& n,
                      const ir::Strategy& strategy);

// The rule of `op`, or null when it has none (tests/parallel/rule_coverage_test.cc requires one
// for every registered primitive).
const ShardingRule* find_rule(const ir::OpDef& op);
// The rule of `op`; throws Error naming the op when there is none.
const ShardingRule& rule_of(const ir::OpDef& op);
// Every op name with a rule, sorted.
std::vector<std::string> ops_with_rules();

// "MatMul 'fc1.matmul' (scope Default/network-WithLossCell/_backbone-Net)": how errors name an op.
std::string describe_op(const RuleContext& ctx);
// "MatMul 'matmul' (scope ...): strategy ((2, 4), (3, 1)) for inputs of shapes (16, 32) and
// (32, 16) is invalid: <why>" as an Error.
[[noreturn]] void invalid_strategy(const RuleContext& ctx, const ir::Strategy& strategy,
                                   const std::string& why);

}  // namespace cleave::parallel
