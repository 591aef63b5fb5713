// What a parallel plan is predicted to cost, op by op, and the plans the search came close to
// choosing: the explanation `cleave-plan` prints (NOTE [Plan estimate]).
//
// NOTE [Plan estimate]
// estimate_plan() takes a forward graph traced with global shapes whose ops carry strategies
// (given, searched or propagated; an op without one gets its default, as the rewrite gives it),
// plans it as the step-parallel rewrite does (plan_step_parallel: the same layouts the ranks will
// run), and costs every part with the search's cost model and factors (NOTE [Cost graph]):
//   - per op, the rank's slice of its computation (compute_s) and the AllReduce completing a
//     partial output (comm_s), and the redistribution of each input from its producer's layout
//     (a graph input's dataset layout, a constant's replicated one, a parameter's layout) into
//     the layout the op reads it in;
//   - per parameter, the AllReduce of its gradient over the ranks holding the same slice (the
//     mirror operator), in a training step.
// The step's compute is c times the ops' compute; its communication m times the ops' and
// redistributions' plus the gradient reductions, and `cost` is compute + beta * communication:
// for the plan the dynamic programming chose, exactly the cost it minimised (a test holds it to
// that). Exposed communication is the part no computation hides. The forward collectives and
// redistributions, and their backward mirrors, block the op that reads them; the gradient
// reductions run while the rest of the backward computes (hoist_collectives moves each right
// after its gradient, in DATA_PARALLEL and in sharded steps alike), exposed only by what the
// backward computation cannot hide: at most min(gradient reductions, backward computation) is
// hidden, an optimistic bound (the reduction of the first layer's gradient, the last computed,
// has nothing after it to hide behind). `overlap_gradients` false counts them all as exposed.
// Memory per rank: the parameters' slices, as many bytes of gradients, the optimizer state
// (optimizer_state_per_parameter slices per parameter: 1 for Momentum, 2 for Adam), and the
// activations, the slices every op reads and writes (kept for the backward; an upper bound: the
// executor reuses buffers). Traffic: the bytes each rank sends in a step.
#pragma once

#include <string>
#include <vector>

#include "cleave/ir/graph.h"
#include "cleave/parallel/search.h"

namespace cleave::parallel {

struct OpEstimate {
  int node = -1;         // in the global graph
  std::string name;      // path_name: "_backbone.fc1.matmul"
  std::string op;        // "MatMul"
  std::string strategy;  // "((1, 2), (2, 4))"
  bool given = false;    // configured with shard() or a strategy file (else derived)
  // The rank's slice of the forward computation; for a measured op, of its forward and backward
  // (NOTE [Measured op slices] in cleave/parallel/search.h).
  double compute_s = 0;
  double comm_s = 0;            // the forward collective of a partial output
  double redistribution_s = 0;  // its inputs into the layouts it reads them in
  double comm_bytes = 0;        // sent per rank by both (forward only)
  double memory_bytes = 0;      // the slices it reads and writes
  // c of NOTE [Backward of an op] (src/parallel/search/candidates.h): its computation in a step
  // is c times compute_s (3 for a product of two operands needing gradients, 1 with no backward).
  double compute_factor = 1;
  bool measured = false;  // compute_s is the slice's timing on the machine (compute_factor 1)
  // Its share of the step's cost: c * compute_s + beta * m * (comm_s + redistribution_s).
  double cost = 0;
};

struct ParameterEstimate {
  int node = -1;
  std::string name;
  std::string layout;
  double slice_bytes = 0;     // what one rank holds
  int64_t replicas = 1;       // ranks holding the same slice
  bool trainable = true;      // it has a gradient (not BatchNorm's moving statistics)
  double gradient_s = 0;      // the AllReduce of its gradient over them (training)
  double gradient_bytes = 0;  // sent per rank by it
  double update_s = 0;        // the optimizer's update of its slice (training; NOTE [Optimizer
                              // updates in the cost] in src/parallel/search/candidates.h)
};

struct PlanEstimate {
  std::vector<OpEstimate> ops;                // graph order
  std::vector<ParameterEstimate> parameters;  // graph order
  bool training = true;
  double comm_factor = 2, beta = 1;  // m, beta of NOTE [Cost graph]
  // The step, per rank (NOTE [Plan estimate]).
  double compute_s = 0;        // the ops' computation, each times its compute_factor, and updates
  double communication_s = 0;  // forward and backward collectives, redistributions, gradients
  double gradient_s = 0;       // of which the gradient reductions
  double exposed_communication_s = 0;
  double cost = 0;  // compute_s + beta * communication_s
  double parameter_bytes = 0, gradient_bytes = 0, optimizer_state_bytes = 0, activation_bytes = 0;
  double traffic_bytes = 0;  // sent per rank in a step
  double memory_bytes() const {
    return parameter_bytes + gradient_bytes + optimizer_state_bytes + activation_bytes;
  }
  // The search's objective (the memory the search bounds is activation_bytes).
  double predicted_step_s() const { return compute_s + exposed_communication_s; }
};

// An op's name with the cells around it, unique in a traced step: "_backbone.layer1.0.conv2.conv2d"
// for the node "conv2.conv2d" in scope ".../_backbone-ResNet/layer1-SequentialCell/
// 0-ResidualBlock/conv2-Conv2d"; a parameter's name as it is (already a path).
std::string path_name(const ir::Node& node);

struct EstimateOptions {
  SearchOptions search;           // device count, dataset strategy, cost model, beta, training
  bool overlap_gradients = true;  // the schedule hides gradient reductions behind the backward
  double optimizer_state_per_parameter = 1;  // slices of state per parameter (Momentum: 1)
};

// The estimate of `global`'s plan (NOTE [Plan estimate]). Throws the rewrite's Error for an
// invalid strategy and an Error naming the op for one without a sharding rule.
PlanEstimate estimate_plan(const ir::Graph& global, const EstimateOptions& options);

// Sets every op node of `global` to the strategy of `choice` over `graph` (build_cost_graph of
// it), marked derived where the op had none; what search_strategies does with its result.
void apply_choice(ir::Graph& global, const CostGraph& graph, std::span<const int> choice);

struct RunnerUp {
  SearchResult result;
  // The operator it gives another strategy (its cost node), the best plan's and this one's.
  int changed_node = -1;
  std::string from, to;  // its candidates' labels: the best plan's and this one's
};

// Plans the dynamic programming comes close to choosing: for each of the `tries` operator nodes
// with the most costly chosen candidate (the ones with a choice to make), the best plan that
// gives it another candidate; the `count` cheapest of those that differ from `best` and from each
// other, cheapest first. Each is optimal under its constraint, and the second-best plan of all
// is among them whenever it differs from `best` in one of those nodes (it differs in some node;
// with tries at least the nodes with a choice, it is always found).
std::vector<RunnerUp> runner_up_plans(const CostGraph& graph, const SearchResult& best,
                                      const SearchOptions& options, int count = 3, int tries = 12);

}  // namespace cleave::parallel
