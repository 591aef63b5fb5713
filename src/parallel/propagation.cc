// Sharding propagation (NOTE [Sharding propagation] in cleave/parallel/propagation.h).
#include "cleave/parallel/propagation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "cleave/core/error.h"
#include "cleave/parallel/redistribution.h"
#include "parallel/planned_dtype.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::ValueRef;

struct Candidate {
  ir::Strategy strategy;
  std::vector<Layout> inputs;
  std::vector<Layout> outputs;  // completed
  double flops = 0, comm = 0;
  DeviceMatrix dev;  // without axes of size 1
  // The inputs' named layouts when the candidate takes a neighbour's axis order (step 2's
  // adopted candidates); empty: the strategy's default axes.
  std::vector<ir::TensorLayout> named;
};

// One operator of the graph as propagation sees it.
struct OpNode {
  const ShardingRule* rule = nullptr;
  std::vector<ir::TensorMeta> metas;  // its inputs' (the RuleContext's span points here)
  std::vector<Candidate> candidates;  // filled when first needed
  bool enumerated = false;
  int chosen = -1;  // into candidates; -1 undecided
  bool configured = false;
  bool skip = false;  // writes into its inputs: left to the rewrite
  OpSharding sample;  // the rule's first sharding (its iteration space, when it has one)
};

DeviceMatrix squeezed(const DeviceMatrix& dev) {
  DeviceMatrix out;
  for (int64_t d : dev) {
    if (d > 1) out.push_back(d);
  }
  return out;
}

Candidate candidate_of(const OpSharding& s) {
  Candidate c{
      s.strategy, s.inputs, {}, s.compute_flops, s.forward_comm_bytes, squeezed(s.device_matrix)};
  for (size_t k = 0; k < s.outputs.size(); ++k) c.outputs.push_back(s.final_output(k));
  return c;
}

// "larger splits of earlier dimensions first": true when a should be preferred to b.
bool earlier_splits_first(const ir::Strategy& a, const ir::Strategy& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    for (size_t d = 0; d < a[i].size() && d < b[i].size(); ++d) {
      if (a[i][d] != b[i][d]) return a[i][d] > b[i][d];
    }
  }
  return false;
}

double moved_bytes(const Layout& from, const Layout& to, const ir::TensorMeta& meta) {
  if (from.same_distribution(to)) return 0;
  return plan_redistribution(from, to, meta.shape, planned_dtype(meta.dtype)).bytes;
}

class Propagation {
 public:
  Propagation(Graph& g, const StepParallelOptions& o) : g_(g), o_(o), ops_(g.nodes.size()) {
    const std::vector<Layout> inputs = dataset_layouts(g, o);
    fixed_.resize(g.nodes.size());
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      fixed_[static_cast<size_t>(g.inputs[k])] = inputs[k];
    }
    consumers_.resize(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (n.kind == NodeKind::kConstant) {
        fixed_[i] = Layout::replicated({o.device_num}, n.outputs[0].shape.rank());
      }
      if (!n.is_op()) continue;
      OpNode& op = ops_[i];
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const ValueRef v = n.inputs[k];
        op.metas.push_back(g.meta(v));
        consumers_[static_cast<size_t>(v.node)].push_back(
            {static_cast<int>(i), static_cast<int>(k)});
      }
      op.rule = find_rule(*n.op);
      CLEAVE_CHECK_ARG(op.rule != nullptr,
                       "{}: this primitive has no sharding rule, so it cannot be part of a "
                       "SEMI_AUTO_PARALLEL or AUTO_PARALLEL graph",
                       describe_op(context(i)));
      op.skip = n.op->mutates_inputs;
    }
  }

  PropagationReport run() {
    PropagationReport report;
    std::vector<int> frontier;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (!n.is_op() || n.strategy.empty()) continue;
      OpNode& op = ops_[i];
      // The rewrite's own check and error, before anything else.
      op.candidates.push_back(candidate_of(infer_node(*op.rule, context(i), n, n.strategy)));
      op.chosen = 0;
      op.configured = true;
      ++report.configured;
      frontier.push_back(static_cast<int>(i));
    }
    CLEAVE_CHECK_ARG(!frontier.empty(),
                     "graph '{}': parallel_mode AUTO_PARALLEL with search_mode "
                     "\"sharding_propagation\" needs at least one operator with a strategy to "
                     "start from; give the key operators (e.g. the large MatMuls) a strategy "
                     "with shard(), or load one with strategy_ckpt_load_file",
                     g_.name);
    while (!frontier.empty()) {
      std::vector<int> next;
      for (int i : frontier) {
        for (int j : neighbours(i)) {
          OpNode& op = ops_[static_cast<size_t>(j)];
          if (op.chosen < 0 && !op.skip) next.push_back(j);
        }
      }
      std::sort(next.begin(), next.end());
      next.erase(std::unique(next.begin(), next.end()), next.end());
      if (next.empty()) break;
      ++report.rounds;
      std::vector<int> choice(next.size());
      for (size_t k = 0; k < next.size(); ++k) choice[k] = choose(next[k]);
      for (size_t k = 0; k < next.size(); ++k) {
        OpNode& op = ops_[static_cast<size_t>(next[k])];
        // Only the chosen candidate is read from now on: keep that one (the heap stays small).
        Candidate kept = std::move(op.candidates[static_cast<size_t>(choice[k])]);
        op.candidates.clear();
        op.candidates.shrink_to_fit();
        op.candidates.push_back(std::move(kept));
        op.chosen = 0;
        Node& n = g_.nodes[static_cast<size_t>(next[k])];
        n.strategy = op.candidates[0].strategy;
        n.in_layouts = op.candidates[0].named;
        n.strategy_derived = true;
        ++report.derived;
      }
      frontier = std::move(next);
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (g_.nodes[i].is_op() && ops_[i].chosen < 0) ++report.unreached;
    }
    report.inconsistencies = inconsistencies();
    return report;
  }

 private:
  RuleContext context(size_t i) const {
    const Node& n = g_.nodes[i];
    return RuleContext{*n.op, n.attrs, ops_[i].metas, n.outputs, n.name, n.scope, o_.device_num};
  }

  const Candidate& decided(size_t i) const {
    return ops_[i].candidates[static_cast<size_t>(ops_[i].chosen)];
  }

  // The operators sharing an edge with operator i: producers, consumers, and the other users
  // of a parameter it reads.
  std::vector<int> neighbours(int i) const {
    std::vector<int> out;
    const Node& n = g_.nodes[static_cast<size_t>(i)];
    for (const ValueRef& v : n.inputs) {
      const Node& src = g_.nodes[static_cast<size_t>(v.node)];
      if (src.is_op()) out.push_back(v.node);
      if (src.kind == NodeKind::kParameter) {
        for (const auto& [user, k] : consumers_[static_cast<size_t>(v.node)]) {
          if (user != i) out.push_back(user);
        }
      }
    }
    for (const auto& [user, k] : consumers_[static_cast<size_t>(i)]) out.push_back(user);
    return out;
  }

  void enumerate(size_t i) {
    OpNode& op = ops_[i];
    if (op.enumerated) return;
    op.enumerated = true;
    const RuleContext ctx = context(i);
    std::vector<OpSharding> all = op.rule->shardings(ctx);
    if (!all.empty()) op.sample = all.front();
    for (const OpSharding& s : all) op.candidates.push_back(candidate_of(s));
    CLEAVE_ASSERT(!op.candidates.empty(), "{}: its rule offers no strategy on {} devices",
                  describe_op(ctx), o_.device_num);
  }

  // Adds to operator i's candidates those taking exactly the layout a decided neighbour gives a
  // tensor they share (NOTE, step 2): the rule's strategies put each loop on its own default
  // axis, so a tensor split over a neighbour's minor axis, or over two axes of one dimension,
  // matches none of them. Only rules described by loops can take another axis order.
  void adopt_neighbour_layouts(size_t i) {
    OpNode& op = ops_[i];
    const Node& n = g_.nodes[i];
    const RuleContext ctx = context(i);
    const IterationSpace& space = op.sample.space;
    if (space.loops.empty()) return;
    auto adopt = [&](const std::vector<int>& dims, const Layout& given) {
      if (given.is_partial() || given.num_devices() != o_.device_num) return;
      const DeviceMatrix& dev = given.device_matrix();
      std::vector<std::optional<Layout::DimAxes>> loop_axes(space.loops.size());
      for (size_t d = 0; d < dims.size(); ++d) {
        Layout::DimAxes axes;
        for (int a : given.tensor_map()[d]) {
          if (dev[static_cast<size_t>(a)] > 1) axes.push_back(a);
        }
        const int l = dims[d];
        if (l < 0) {
          if (!axes.empty()) return;  // split where the op cannot split
          continue;
        }
        std::optional<Layout::DimAxes>& have = loop_axes[static_cast<size_t>(l)];
        if (have && *have != axes) return;
        have = std::move(axes);
      }
      std::vector<ir::TensorLayout> named;
      for (const std::vector<int>& in_dims : space.inputs) {
        std::vector<Layout::DimAxes> map;
        for (int l : in_dims) {
          map.push_back(l >= 0 && loop_axes[static_cast<size_t>(l)]
                            ? *loop_axes[static_cast<size_t>(l)]
                            : Layout::DimAxes{});
        }
        named.push_back(named_of(Layout(dev, std::move(map))));
      }
      try {
        Candidate c = candidate_of(infer_with_layouts(*op.rule, ctx, named));
        c.named = std::move(named);
        op.candidates.push_back(std::move(c));
      } catch (const Error&) {
        // Not a valid strategy of this op (a fixed loop, an indivisible dimension): no candidate.
      }
    };
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const auto src = static_cast<size_t>(n.inputs[k].node);
      const std::vector<int>& dims = space.inputs[k];
      if (g_.nodes[src].is_op()) {
        if (ops_[src].chosen >= 0) {
          adopt(dims, decided(src).outputs[static_cast<size_t>(n.inputs[k].output)]);
        }
      } else if (g_.nodes[src].kind == NodeKind::kParameter) {
        for (const auto& [user, m] : consumers_[src]) {
          const auto u = static_cast<size_t>(user);
          if (u != i && ops_[u].chosen >= 0) adopt(dims, decided(u).inputs[static_cast<size_t>(m)]);
        }
      } else if (fixed_[src]) {
        adopt(dims, *fixed_[src]);
      }
    }
    for (const auto& [user, m] : consumers_[i]) {
      const auto u = static_cast<size_t>(user);
      if (ops_[u].chosen < 0) continue;
      const ValueRef v = g_.nodes[u].inputs[static_cast<size_t>(m)];
      adopt(space.outputs[static_cast<size_t>(v.output)],
            decided(u).inputs[static_cast<size_t>(m)]);
    }
  }

  // The index of operator i's best candidate given the operators decided so far (NOTE, step 2).
  int choose(int index) {
    const auto i = static_cast<size_t>(index);
    enumerate(i);
    adopt_neighbour_layouts(i);
    const Node& n = g_.nodes[i];
    OpNode& op = ops_[i];
    using Key = std::tuple<double, double, double, int>;
    std::optional<Key> best_key;
    int best = -1;
    for (size_t c = 0; c < op.candidates.size(); ++c) {
      const Candidate& cand = op.candidates[c];
      double bytes = 0;
      int mismatches = 0;
      auto neighbour = [&](size_t other) {
        if (squeezed(decided(other).dev) != cand.dev) ++mismatches;
      };
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const ValueRef v = n.inputs[k];
        const auto src = static_cast<size_t>(v.node);
        const ir::TensorMeta& meta = op.metas[k];
        if (g_.nodes[src].is_op()) {
          if (ops_[src].chosen < 0) continue;
          bytes += moved_bytes(decided(src).outputs[static_cast<size_t>(v.output)], cand.inputs[k],
                               meta);
          neighbour(src);
        } else if (g_.nodes[src].kind == NodeKind::kParameter) {
          for (const auto& [user, m] : consumers_[src]) {
            const auto u = static_cast<size_t>(user);
            if (u == i || ops_[u].chosen < 0) continue;
            bytes += moved_bytes(decided(u).inputs[static_cast<size_t>(m)], cand.inputs[k], meta);
            neighbour(u);
          }
        } else if (fixed_[src]) {
          bytes += moved_bytes(*fixed_[src], cand.inputs[k], meta);
        }
      }
      for (const auto& [user, m] : consumers_[i]) {
        const auto u = static_cast<size_t>(user);
        if (ops_[u].chosen < 0) continue;
        const ValueRef v = g_.nodes[u].inputs[static_cast<size_t>(m)];
        bytes += moved_bytes(cand.outputs[static_cast<size_t>(v.output)],
                             decided(u).inputs[static_cast<size_t>(m)],
                             ops_[u].metas[static_cast<size_t>(m)]);
        neighbour(u);
      }
      const Key key{bytes, cand.flops, cand.comm, mismatches};
      if (!best_key || key < *best_key ||
          (key == *best_key &&
           earlier_splits_first(cand.strategy,
                                op.candidates[static_cast<size_t>(best)].strategy))) {
        best_key = key;
        best = static_cast<int>(c);
      }
    }
    return best;
  }

  // The edges between decided operators whose layouts disagree (a graph input read in another
  // layout than the dataset's is the rewrite's ordinary business, not an inconsistency).
  std::vector<std::string> inconsistencies() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (!n.is_op() || ops_[i].chosen < 0) continue;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const ValueRef v = n.inputs[k];
        const auto src = static_cast<size_t>(v.node);
        const Node& from_node = g_.nodes[src];
        if (!from_node.is_op() || ops_[src].chosen < 0) continue;
        const Layout& from = decided(src).outputs[static_cast<size_t>(v.output)];
        const Layout& to = decided(i).inputs[k];
        if (moved_bytes(from, to, ops_[i].metas[k]) == 0) continue;
        out.push_back(fmt::format(
            "{} '{}' (scope {}) input {} from {} '{}'{}: {} -> {}", n.op->name, n.name, n.scope, k,
            from_node.op->name, from_node.name,
            ops_[src].configured && ops_[i].configured ? " (both strategies given)" : "",
            from.to_string(), to.to_string()));
      }
    }
    return out;
  }

  Graph& g_;
  const StepParallelOptions& o_;
  std::vector<OpNode> ops_;
  std::vector<std::optional<Layout>> fixed_;  // per node: a graph input's or constant's layout
  std::vector<std::vector<std::pair<int, int>>> consumers_;  // per node: (op, input index)
};

}  // namespace

PropagationReport propagate_strategies(Graph& global, const StepParallelOptions& options) {
  CLEAVE_CHECK_ARG(options.device_num >= 1, "device_num is {}; expected a positive device count",
                   options.device_num);
  return Propagation(global, options).run();
}

ir::NodeNotes redistribution_notes(const Graph& g, const ParallelPlan& plan) {
  ir::NodeNotes notes(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.is_op() || plan.ops[i].inputs.size() != n.inputs.size()) continue;
    std::vector<std::string> lines;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ValueRef v = n.inputs[k];
      const Layout& from = plan.layouts[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
      const Layout& to = plan.ops[i].inputs[k];
      if (from.same_distribution(to)) continue;
      const ir::TensorMeta meta = g.meta(v);
      const RedistributionPlan& moved =
          plan_redistribution(from, to, meta.shape, planned_dtype(meta.dtype));
      lines.push_back(fmt::format("redistribution of input {}: {} -> {}: {}", k, from.to_string(),
                                  to.to_string(), moved.to_string()));
    }
    if (!lines.empty()) notes[i] = fmt::format("{}", fmt::join(lines, "; "));
  }
  return notes;
}

}  // namespace cleave::parallel
