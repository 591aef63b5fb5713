// Strategy search (AUTO_PARALLEL, search_mode "dynamic_programming" or "recursive_programming"):
// a strategy for every operator of the traced forward graph, chosen by the cost model.
//
// NOTE [Cost graph]
// The search sees the traced forward graph (global shapes) as a *cost graph*:
//   - one *operator node* per op, whose *candidates* are its rule's valid strategies on
//     device_num devices (ShardingRule::shardings), or only the given one for an op configured
//     with shard() or a strategy file, or only the default one for an op writing into its inputs
//     (left to the rewrite, as propagation leaves it). A candidate's own cost is
//       compute_s * c + beta * comm_s * m
//     (CostModel::op_cost), plus beta * m times the redistribution of every input read from a
//     graph input (laid out by the dataset strategy) or a constant (replicated) into the layout
//     the candidate needs; its memory is op_cost's memory_bytes (the slices it reads and writes,
//     which a training step keeps for the backward);
//   - one *parameter node* per parameter read by ops, whose candidates are the layouts its
//     users' candidates read it in; a training step pays, per candidate, beta times the
//     AllReduce of the gradient over the ranks holding the same slice (the mirror operator),
//     and the optimizer's update of the slice (NOTE [Optimizer updates in the cost] in
//     src/parallel/search/candidates.h), for a parameter with a gradient (not BatchNorm's moving
//     statistics);
//   - one *edge* per tensor between two operators, with the matrix of beta * m times the
//     redistribution (CostModel::redistribution_s of redistribution_cost, plan_redistribution's
//     plan) from the producer's completed output layout to the consumer's input layout, for every
//     pair of candidates; and one edge from a parameter node to each user, 0 where the user reads
//     the parameter in the parameter node's layout and forbidden (+inf) elsewhere: one layout per
//     parameter.
// A training step (SearchOptions::training) has m = 2 and, per op, c of NOTE [Backward of an op]
// (src/parallel/search/candidates.h): 1 plus its backward, 3 for a product whose input and weight
// both need a gradient, 2 for one whose input is the data, 1 for an op of the data alone; and
// every forward collective or redistribution has a backward one moving as many bytes (AllGather
// <-> ReduceScatter or a local slice, AllReduce of a partial output <-> AllReduce of the gradient
// of the replicated input); an evaluation step has c = m = 1 and no gradient reduction. beta
// weighs communication against computation (1: both are seconds of the step, nothing
// overlapped). A *plan* picks one candidate per node; its cost is the sum of its candidates'
// costs and of its edges' entries, its memory the sum of its candidates' memory; the search
// minimises the cost over the plans whose memory is at most memory_capacity_bytes (0: no limit).
//
// NOTE [Dynamic programming search]
// The cost graph is reduced by eliminations, MindSpore's, each exact: every (cost, memory) pair
// of a plan of the eliminated part stays representable. A node's or edge's table holds, per
// candidate (pair of candidates), a *front*: the (cost, memory) pairs no other pair beats on
// both (Pareto pruning; with no memory limit, only the cheapest). Edges are undirected for the
// eliminations (the producer is still told apart, for merge and contract):
//   edge       two edges joining the same two nodes become one: their fronts summed pairwise;
//   operator   a node v with two edges, to u and w: an edge u-w whose front for (s_u, s_w) is
//              the union over s_v of edge(u, v) + v + edge(v, w);
//   triangle   the same where u and w are joined already: the new edge then meets the old one
//              (an edge elimination follows);
//   merge      a node v with one edge, to u, that v produces (or v is a parameter): folded into
//              u, whose front for s_u gains the union over s_v of edge(u, v) + v;
//   contract   the same where v consumes u's output;
//   star       when nothing else applies: a node of three edges or more is merged with the
//              neighbour it shares an edge with into one node whose candidates are the pairs
//              (bounded: SearchOptions::max_star_candidates), its edges re-pointed;
// and a node with no edge left is a finished component, its front summed into the result.
// Every pair remembers how it was made (a decision), so the choice of the last nodes is replayed
// back through the eliminations to give every node its candidate. Where nodes remain that no
// elimination reduces, their candidates are enumerated exactly (branch and bound on the cost),
// or an Error names their operators when their combinations exceed max_exact_combinations.
// docs/design/search.md works a small example through.
//
// NOTE [Algorithm parameters]
// MindSpore's set_algo_parameters, honoured by both searches where they choose candidates
// (build_cost_graph for the dynamic programming, each level of the recursive programming):
//   fully_use_devices               an op's candidates are only its strategies using every
//                                   device (the product of the splits is device_num); an op
//                                   with none (its dimensions too small or indivisible) keeps
//                                   those using the most devices it can, and the users of a
//                                   parameter whose kept candidates read it in no common layout
//                                   get all theirs back, where MindSpore fails;
//   elementwise_op_strategy_follow  an elementwise op (its rule's summary starts "elementwise")
//                                   reading another op's output takes only strategies reading it
//                                   in the layout it is produced in (no redistribution): it
//                                   follows its producer;
//   enable_algo_approxi             an op's candidates are thinned: sorted by cost, one is
//                                   dropped when a kept one costs at most (1 + algo_approxi_
//                                   epsilon) times as much and needs at most as much memory
//                                   (MindSpore's approximation of the strategy lists);
//   tensor_slice_align_enable       a MatMul's or BatchMatMul's candidate is dropped when one of
//                                   its inputs' last two dimensions is split into slices whose
//                                   size is not a multiple of tensor_slice_align_size (a dimension
//                                   left whole is never the reason).
// The configured ops (shard(), strategy files) keep their strategy whatever the parameters say.
//
// NOTE [Recursive programming search]
// search_mode "recursive_programming", MindSpore's SAPP: a fast heuristic instead of the optimum.
// The device count D is factored into primes p_1 <= p_2 <= ... (8 = 2*2*2, 12 = 2*2*3, 3 = 3);
// a *level* l cuts every op's work into p_l more slices, so after level l the ops use
// d_l = p_1 * ... * p_l devices. Every strategy is one of ShardingRule::shardings on all D devices
// (those using fewer repeat the computation), so layouts and costs are those the rewrite sees. An
// op's *partial strategy* after level l uses d_l devices; its *options* at level l+1 are the
// strategies *refining* it by p_{l+1} (every split a multiple of the old one: one loop cut
// p_{l+1} times more, for a reduction loop every operand indexing it), and, where
// fully_use_devices is off or none refines it, the partial strategy itself. At each level:
//   1. the ops decide one by one, each taking the option of least *local cost*: its own cost
//      (compute * c + beta * comm * m as in NOTE [Cost graph]), plus the redistribution (beta * m
//      times redistribution_s) from each decided producer, graph input or constant and to each
//      decided consumer, plus its share of the gradient AllReduce of each parameter it reads; an
//      op reading a parameter another op has already laid out at this level only takes options
//      reading it in that layout (one layout per parameter), unless it has none;
//   2. a second sweep in the same order re-decides every op against all its neighbours;
//   3. the users of each shared parameter may move together to another layout they can all read
//      it in, when that lowers the sum of their local costs (one at a time they never could);
// and this runs for three orders of the ops (by their cost under the partial strategy, largest
// first, as MindSpore's SortByWeight; producers first; consumers first), keeping the outcome of
// least total cost. After the last level, a parameter whose users' options never met (seed 001's
// BatchNorm moving statistics at 1024 devices) is *repaired*: its users take candidates using as
// many devices, or failing that any, that read it alike, the cheapest such. The configured ops
// keep their strategy throughout. Candidates and own costs are computed once per op signature
// (primitive, attributes, types) and redistribution costs cached per pair of layouts, so a level
// is linear in the ops: the 1000-op chain at 8 devices takes ~15 ms (bench/README.md). The plan
// is not optimal (tests/parallel/search_recursive_test.cc bounds it against the dynamic
// programming's optimum); it does not search under memory_capacity_bytes, it checks its plan
// against it. docs/design/search.md, section 6.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cleave/ir/graph.h"
#include "cleave/parallel/cost_model.h"
#include "cleave/parallel/step_parallel.h"

namespace cleave::parallel {

// NOTE [Search objectives]
// What the dynamic programming minimises, MindSpore's `level` of shard():
//   kSpeed (level 2, the default): the step's time, compute + beta * communication (NOTE [Cost
//     graph]);
//   kMemory (level 1): the bytes a rank holds first: the slices every op reads and writes, plus
//     each parameter's slice with its gradient and one slice of optimizer state for a trainable
//     one; the step's time breaks ties (a second counts as a byte, so a byte saved always wins);
//   kComputationOverCommunication (level 0): communication first, weighed 1000 times the
//     computation, so the plan that moves the fewest bytes per computation wins, the time of the
//     computation breaking ties.
// The recursive programming honours kComputationOverCommunication and kSpeed, and for kMemory
// counts the ops' slices only.
enum class SearchObjective { kComputationOverCommunication = 0, kMemory = 1, kSpeed = 2 };

struct SearchOptions {
  StepParallelOptions step_parallel;      // device_num and the dataset strategy
  const CostModel* cost_model = nullptr;  // null: default_cost_model()
  double beta = 1.0;                      // weight of communication (NOTE [Cost graph])
  double memory_capacity_bytes = 0;       // per rank; 0: no limit
  bool training = true;                   // a training step (c per op, m = 2) or a forward only
  double max_exact_combinations = 1e7;    // what the exact solver may enumerate
  int64_t max_star_candidates = 4096;     // candidates of a node a star elimination makes
  // MindSpore's set_algo_parameters (NOTE [Algorithm parameters]), with its defaults.
  bool fully_use_devices = true;
  bool elementwise_op_strategy_follow = false;
  bool enable_algo_approxi = false;
  double algo_approxi_epsilon = 0.1;
  bool tensor_slice_align_enable = false;
  int64_t tensor_slice_align_size = 16;
  SearchObjective objective = SearchObjective::kSpeed;  // NOTE [Search objectives]
};

struct CostNode {
  enum class Kind { kOperator, kParameter };
  Kind kind = Kind::kOperator;
  int graph_node = -1;  // its node in the traced graph (-1: made by hand, in tests)
  std::string name;     // "MatMul 'fc1.matmul' (scope ...)" or "parameter 'fc1.weight'"
  // Per candidate: its own cost and memory (NOTE [Cost graph]) and how reports print it.
  std::vector<double> cost;
  std::vector<double> memory_bytes;
  std::vector<std::string> labels;
  std::vector<ir::Strategy> strategies;  // operator nodes of a traced graph: per candidate
  int64_t num_candidates() const { return static_cast<int64_t>(cost.size()); }
};

struct CostEdge {
  int from = 0, to = 0;  // nodes: the producer (or parameter) and the consumer
  // Row-major [candidate of from][candidate of to]; +inf: a pair no plan may use.
  std::vector<double> cost;
};

struct CostGraph {
  std::vector<CostNode> nodes;
  std::vector<CostEdge> edges;
  double memory_capacity_bytes = 0;  // 0: no limit

  // The cost and the memory of the plan that picks candidate choice[i] for node i (+inf cost
  // for a forbidden pair). Requires one valid index per node.
  double cost(std::span<const int> choice) const;
  double memory(std::span<const int> choice) const;
  // Throws Error when an edge names a missing node or its matrix has the wrong size, or a node
  // has no candidate or mismatched per-candidate vectors (hand-made graphs in tests and tools).
  void check() const;
};

// The cost graph of `global`, the forward traced with global shapes (NOTE [Cost graph]). Throws
// Error naming the op for an op without a sharding rule, and the rewrite's error for an invalid
// configured strategy.
CostGraph build_cost_graph(const ir::Graph& global, const SearchOptions& options);

// NOTE [Measured op slices]
// A flops curve prices two products of the same flops alike, yet oneDNN ran (64, 256) x (256,
// 512) at 64 GFLOP/s and (64, 512) x (512, 256) at 88 on the machine cleave is developed on, and
// LeNet's 5x5 convolution of 6 channels at 56 GFLOP/s where the curve (fitted to 3x3
// convolutions of 8 to 64 channels) gave 84, its two gradients at 2.4 times its forward where
// the model counted 2 (bench/README.md, "search", run J). So, as FlexFlow does, a model's op
// slices can be timed on the machine that will run it:
//   which   every op whose compute class is a product or a convolution, in every slice it
//           computes under any strategy its rule offers on the device count (its inputs' slice
//           shapes: op_slices), or under its given strategy;
//   what    the slice's forward and, in a training step, the gradients of the inputs that need
//           one (NOTE [Backward of an op]), run eagerly by cleave's kernels on random data;
//   where   the machine profile's table of the thread count it was timed with ("ops"), under
//           op_slice_key: the primitive, its attributes, the slices' dtypes and shapes, and which
//           inputs get gradients (cleave-plan --time-ops writes them).
// Where the cost model holds a slice's time, the slice costs that time in a step, with c = 1 (its
// backward is in it), in place of c times the flops curve's forward; every other op keeps the
// curve. Every rank reads the same profile file, so the ranks still reach the same plan, and
// compiling stays pure: the timing is a tool's, done before the job. Memory-bound ops stay on
// the curve: they are many and small, and an eager call's dispatch overstates them.

// The key of op `op` with `attrs` computing on input slices `slices`, bit k of `grads` set when
// input k gets a gradient (0: forward only): "MatMul{transpose_a: false, transpose_b: false}
// (Float32(64, 784), Float32(784, 512)) grads 01".
std::string op_slice_key(const ir::OpDef& op, const ir::Attrs& attrs,
                         std::span<const ir::TensorMeta> slices, uint64_t grads);

// One op slice the search may cost (NOTE [Measured op slices]).
struct OpSlice {
  std::string key;                     // op_slice_key
  const ir::OpDef* op = nullptr;       // the primitive
  ir::Attrs attrs;                     // as the graph gives them
  std::vector<ir::TensorMeta> inputs;  // the slices: dtype and slice shape of every input
  uint64_t grads = 0;                  // bit k: input k gets a gradient
  std::string example;                 // one op computing it: "fc1.matmul ((1, 2), (2, 1))"
};

// Every different slice of a product or convolution of `global` under any strategy its rule
// offers on options' device count, and under given strategies, with the gradients of
// options.training (NOTE [Measured op slices]); in graph order, each key once. Throws Error
// naming the op for an op without a sharding rule, and the rewrite's error for an invalid given
// strategy.
std::vector<OpSlice> op_slices(const ir::Graph& global, const SearchOptions& options);

struct EliminationCounts {
  int op = 0, edge = 0, merge = 0, contract = 0, triangle = 0, star = 0;
  int total() const { return op + edge + merge + contract + triangle + star; }
};

struct SearchResult {
  std::vector<int> choice;  // per node of the cost graph: the chosen candidate
  double cost = 0;          // the plan's cost (CostGraph::cost of choice)
  double memory_bytes = 0;  // and its memory
  EliminationCounts eliminations;
  int components = 0;             // connected parts of the cost graph
  int exact_nodes = 0;            // nodes left to the exact solver
  double exact_combinations = 0;  // their candidates' product
};

// The optimal plan of `graph` under its memory capacity (NOTE [Dynamic programming search]).
// Throws Error naming the smallest memory any plan needs when none fits the capacity, naming the
// operators left when the exact solver would enumerate more than options.max_exact_combinations,
// and when every plan uses a forbidden pair (the configured strategies lay a parameter out in
// two ways).
SearchResult solve_dynamic_programming(const CostGraph& graph, const SearchOptions& options = {});

// The optimal plan by enumerating every combination of candidates: the reference the tests hold
// the dynamic programming to. Throws Error when there are more than max_combinations, and as
// solve_dynamic_programming when no plan is feasible.
SearchResult solve_exhaustive(const CostGraph& graph, double max_combinations = 1e7);

struct SearchReport {
  int ops = 0;             // operator nodes
  int parameters = 0;      // parameter nodes
  int64_t candidates = 0;  // over all nodes
  SearchResult result;
  // "dynamic programming: 53 ops, 412 candidates, 61 eliminations (...), predicted step cost
  // 1.23 ms (memory 4.5 MB per rank)"
  std::string summary() const;
};

// The dynamic-programming search on `global` (NOTE [Cost graph], [Dynamic programming search]):
// sets Node::strategy, with strategy_derived, of every op it decides (all but the configured ones
// and the ops writing into their inputs). Errors: those of build_cost_graph and
// solve_dynamic_programming.
SearchReport search_strategies(ir::Graph& global, const SearchOptions& options);

// The recursive-programming search on `global` (NOTE [Recursive programming search]): a strategy
// per node of `global` (empty for the nodes that are not ops), the configured ones as given.
// Errors: those of build_cost_graph (an op without a rule, an invalid given strategy).
std::vector<ir::Strategy> recursive_programming(const ir::Graph& global,
                                                const SearchOptions& options);

struct RecursivePlan {
  std::vector<ir::Strategy> strategies;  // per node of the graph (empty: not an op)
  int ops = 0;                           // ops searched (not configured)
  std::vector<int64_t> levels;           // the prime factors of device_num, one per level
  // The plan's cost and memory as the cost graph of the same options counts them (NOTE [Cost
  // graph]; CostGraph::cost of the plan's candidates, computed without building it).
  double cost = 0;
  double memory_bytes = 0;
  // "recursive programming: 53 ops, 3 levels (2 x 2 x 2), predicted step cost 1.23 ms, memory
  // 4.5 MiB per rank"
  std::string summary() const;
};

// The same search, with the plan's cost and levels.
RecursivePlan recursive_programming_plan(const ir::Graph& global, const SearchOptions& options);

// The recursive-programming search applied to `global` as search_strategies does (Node::strategy
// with strategy_derived for every op not configured). Throws, besides the errors above, Error
// when options.memory_capacity_bytes is set and the plan needs more, naming the least memory any
// plan needs (at least the sum of every op's least, NOTE [Recursive programming search]).
RecursivePlan search_strategies_recursive(ir::Graph& global, const SearchOptions& options);

// The cost of a plan given as one strategy per graph node (as recursive_programming returns) in
// the cost graph `graph` of `global` built with the same options: the candidate of each operator
// node is the one with that strategy, each parameter's the layout its first user reads. Throws
// Error naming the op whose strategy is not among its candidates.
SearchResult cost_of_strategies(const CostGraph& graph, const ir::Graph& global,
                                const std::vector<ir::Strategy>& strategies);

}  // namespace cleave::parallel
