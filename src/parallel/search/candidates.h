// What both searches share (cleave/parallel/search.h): an op's candidates under the algorithm
// parameters (NOTE [Algorithm parameters]) and the cost factors of NOTE [Cost graph].
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "cleave/parallel/cost_model.h"
#include "cleave/parallel/search.h"
#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel::search_detail {

// The factors of NOTE [Cost graph]: communication m and beta (computation's c is per op:
// op_backwards). The weights of a candidate's cost under the options' objective (NOTE [Cost
// graph], NOTE [Search objectives]).
struct Factors {
  double comm = 1, beta = 1;
  double memory = 0;  // per byte held (kMemory)
  explicit Factors(const SearchOptions& o)
      : comm(o.training ? 2.0 : 1.0),
        beta(o.beta *
             (o.objective == SearchObjective::kComputationOverCommunication ? 1000.0 : 1.0)),
        memory(o.objective == SearchObjective::kMemory ? 1.0 : 0.0) {}
  // compute * c + beta * comm * m (+ the bytes held, for kMemory), for an op of factor `compute`.
  double own(const OpCost& c, double compute) const {
    return compute * c.compute_s + beta * comm * c.comm_s + memory * c.memory_bytes;
  }
};

// NOTE [Backward of an op]
// In a training step an op computes its forward slice once and, in the backward, the gradient of
// each input that needs one. An input needs a gradient when it is a trainable parameter, or the
// output of an op that has a gradient rule (OpDef::grad) and an input needing one; the step's
// data and constants need none. The factor c of an op's computation is therefore
//   an op without a gradient rule, or
//   with no input needing a gradient:  1 (no backward);
//   a matrix product or a convolution: 1 + the number of its two operands needing a gradient
//                                      (each gradient is one product of the forward's size);
//   any other op:                      3;
// and 1 everywhere in an evaluation step. So the first product of a network, whose input is the
// data, costs 2 times its forward, not 3, and an op reading only the data (a Cast of the images)
// has no backward. The memory-bound ops keep 3: their backward passes measured 1.4x (ReLU) to
// 2.3x (max pooling) the forward on LeNet (bench/graph_bench profile), around the 2 the old
// uniform c = 3 gave them. An op slice the cost model has timed costs its timing with c = 1
// instead (NOTE [Measured op slices] in cleave/parallel/search.h).
struct OpBackward {
  double factor = 1;   // c
  uint64_t grads = 0;  // bit k: input k gets a gradient (0 without backward)
};
// Per node of g (factor 1, no gradients, for nodes that are not ops).
std::vector<OpBackward> op_backwards(const ir::Graph& g, bool training);

// What op `ctx` costs a rank in a step under `s`: model.op_cost(ctx, s), and the factor its
// compute_s counts `b.factor` times; or, where the model has the slice timed, compute_s that
// timing with factor 1 (`measured`).
// What each input of op `ctx` is on a rank under `s`: its dtype and slice shape.
std::vector<ir::TensorMeta> input_slices(const RuleContext& ctx, const OpSharding& s);

struct StepOpCost {
  OpCost cost;
  double factor = 1;
  bool measured = false;
};
StepOpCost step_op_cost(const CostModel& model, const RuleContext& ctx, const OpSharding& s,
                        const OpBackward& b);

// The devices a sharding uses: the product of its loop splits, or for a rule without loops the
// most slices (times pending-sum groups) any of its operands has.
int64_t devices_used(const OpSharding& s);

// Whether every split of `fine` is a multiple of the same split of `coarse` (same structure).
bool refines(const ir::Strategy& fine, const ir::Strategy& coarse);

// Whether the sharding passes tensor_slice_align (always true when it is off).
bool slice_aligned(const RuleContext& ctx, const OpSharding& s, const SearchOptions& o);

// The candidates of an op nobody configured, in the order of `shardings`: those passing
// tensor_slice_align; with `full_use`, only those using the most devices any of them uses
// (NOTE [Algorithm parameters]); with enable_algo_approxi, thinned by cost (`costs`, one per
// sharding, and `memory`). Returns indices into `shardings`; never empty when `shardings` is not.
std::vector<size_t> filter_candidates(const RuleContext& ctx,
                                      const std::vector<OpSharding>& shardings,
                                      const std::vector<double>& costs,
                                      const std::vector<double>& memory, const SearchOptions& o,
                                      bool full_use);

// Throws Error for an algorithm parameter out of range, naming it and the accepted values.
void check_search_options(const SearchOptions& o);

// The sharding rule of op `ctx` for the searches. Throws Error naming the op, and why it has no
// rule where its registry entry says, when it has none.
const ShardingRule& searched_rule(const RuleContext& ctx);

// Whether the op's rule is elementwise (elementwise_op_strategy_follow).
bool is_elementwise(const ir::OpDef& op);

// What a training step pays for a parameter of `meta` read in layout `l` besides its ops (NOTE
// [Cost graph]): the AllReduce of its gradient over the slice's replicas, and the optimizer's
// update of the slice (update_s). 0 for an evaluation step or a parameter without gradient
// (BatchNorm's moving statistics).
double mirror_cost(const CostModel& model, const SearchOptions& o, const ir::TensorMeta& meta,
                   const Layout& l, bool trainable = true);

// NOTE [Optimizer updates in the cost]
// Each rank updates its slice of each trainable parameter once a step, after the backward. The
// update is memory-bound: Momentum reads the slice, its gradient and its state, and writes the
// slice and the state, 5 slices of traffic (kUpdateTraffic). Plans that keep whole weights on
// every rank pay it in full on every rank. Plans that split the weights pay a share. Without it,
// the model ranked data-parallel plans too cheap where ranks share cores: the MLP's
// data-parallel step on 8 ranks of 2 cores was predicted at 7.97 ms and measured at 12.97 ms
// (bench/README.md, "search", run F). The search does not know the optimizer; it costs
// Momentum's traffic, as its memory objective counts one slice of state.
inline constexpr double kUpdateTraffic = 5;
// The update of a slice of `slice_bytes`, in seconds of memory-bound computation.
double update_s(const CostModel& model, double slice_bytes);

// Whether parameter node `n` has a gradient: its bound tensor requires one (a parsed graph binds
// trainable tensors: NOTE [IR text]).
bool trainable(const ir::Node& n);

// The dynamic programming's plan of `graph` (which must pass CostGraph::check) without candidate
// `candidate` of node `node` (which has another): what solve_dynamic_programming returns for the
// graph with that candidate removed (its edges' rows or columns with it), but without copying
// the graph, and with the plan's choices indexing `graph`'s candidates. Throws Error as
// solve_dynamic_programming does (no feasible plan, too many combinations left).
SearchResult solve_without_candidate(const CostGraph& graph, int node, int candidate,
                                     const SearchOptions& options);

// Runs body(0), ..., body(count - 1), on up to `threads` threads (this one among them; at most
// std::thread::hardware_concurrency()), each index once, in chunks of `chunk` indices taken in
// order. Blocks until all are done. When some throw, rethrows the exception of the lowest index
// that threw, as a plain loop would have (the others ran or not: `body` must have no effect that
// matters then). `body` must be safe to call from several threads at once for different indices.
void parallel_for(size_t count, size_t threads, size_t chunk,
                  const std::function<void(size_t)>& body);

}  // namespace cleave::parallel::search_detail
