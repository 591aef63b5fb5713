// The cost graph of a traced forward graph (NOTE [Cost graph] in cleave/parallel/search.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "cleave/core/error.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/search.h"
#include "parallel/search/candidates.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::ValueRef;

constexpr double kForbidden = std::numeric_limits<double>::infinity();

DType planned_dtype(DType d) { return d == DType::kBool ? DType::kInt32 : d; }

using search_detail::check_search_options;
using search_detail::Factors;

class Builder {
 public:
  Builder(const Graph& g, const SearchOptions& o)
      : g_(g),
        o_(o),
        model_(o.cost_model != nullptr ? *o.cost_model : default_cost_model()),
        f_(o),
        index_(g.nodes.size(), -1),
        shardings_(g.nodes.size()),
        unfiltered_(g.nodes.size()),
        metas_(g.nodes.size()),
        fixed_(g.nodes.size()),
        users_(g.nodes.size()) {}

  CostGraph build() {
    CLEAVE_CHECK_ARG(o_.step_parallel.device_num >= 1,
                     "device_num is {}; expected a positive device count",
                     o_.step_parallel.device_num);
    CLEAVE_CHECK_ARG(std::isfinite(o_.beta) && o_.beta >= 0,
                     "search: beta is {}; expected a finite weight >= 0", o_.beta);
    CLEAVE_CHECK_ARG(o_.memory_capacity_bytes >= 0,
                     "search: memory_capacity_bytes is {}; expected >= 0 (0: no limit)",
                     o_.memory_capacity_bytes);
    check_search_options(o_);
    const std::vector<Layout> inputs = dataset_layouts(g_, o_.step_parallel);
    for (size_t k = 0; k < g_.inputs.size(); ++k) {
      fixed_[static_cast<size_t>(g_.inputs[k])] = inputs[k];
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (n.kind == NodeKind::kConstant) {
        fixed_[i] = Layout::replicated({o_.step_parallel.device_num}, n.outputs[0].shape.rank());
      }
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (g_.nodes[i].is_op()) choose_shardings(i);
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (g_.nodes[i].kind == NodeKind::kParameter) widen_for_parameter(i);
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (g_.nodes[i].is_op()) add_operator(i);
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (g_.nodes[i].kind == NodeKind::kParameter) add_parameter(i);
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (g_.nodes[i].is_op()) add_edges(i);
    }
    out_.memory_capacity_bytes = o_.memory_capacity_bytes;
    return std::move(out_);
  }

 private:
  RuleContext context(size_t i) const {
    const Node& n = g_.nodes[i];
    return RuleContext{
        *n.op, n.attrs, metas_[i], n.outputs, n.name, n.scope, o_.step_parallel.device_num};
  }

  double redistribution_s(const Layout& from, const Layout& to, const ir::TensorMeta& meta) const {
    if (from.same_distribution(to)) return 0;
    return model_.redistribution_s(
        plan_redistribution(from, to, meta.shape, planned_dtype(meta.dtype)));
  }

  // The candidates of op i (NOTE [Algorithm parameters]); those fully_use_devices dropped are
  // kept aside for widen_for_parameter.
  void choose_shardings(size_t i) {
    const Node& n = g_.nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      metas_[i].push_back(g_.meta(n.inputs[k]));
      users_[static_cast<size_t>(n.inputs[k].node)].emplace_back(i, k);
    }
    const RuleContext ctx = context(i);
    const ShardingRule* rule = find_rule(*n.op);
    CLEAVE_CHECK_ARG(rule != nullptr,
                     "{}: this primitive has no sharding rule{}, so the strategy search cannot "
                     "cost it in an AUTO_PARALLEL graph; give it a rule (docs/design/"
                     "adding_an_operator.md) or run it outside the parallel step",
                     describe_op(ctx),
                     n.op->no_sharding_rule.empty() ? "" : " (" + n.op->no_sharding_rule + ")");
    std::vector<OpSharding>& shardings = shardings_[i];
    if (!n.strategy.empty()) {
      shardings.push_back(rule->infer(ctx, n.strategy));  // the rewrite's check and error
    } else {
      // NOTE [Algorithm parameters]: the rule's strategies, filtered.
      std::vector<OpSharding> all = rule->shardings(ctx);
      std::vector<double> costs, memory;
      if (o_.enable_algo_approxi) {
        for (const OpSharding& s : all) {
          const OpCost c = model_.op_cost(ctx, s);
          costs.push_back(f_.own(c));
          memory.push_back(c.memory_bytes);
        }
      }
      const std::vector<size_t> keep =
          search_detail::filter_candidates(ctx, all, costs, memory, o_, o_.fully_use_devices);
      const bool reads_parameter = std::any_of(n.inputs.begin(), n.inputs.end(), [&](ValueRef v) {
        return g_.nodes[static_cast<size_t>(v.node)].kind == NodeKind::kParameter;
      });
      if (o_.fully_use_devices && reads_parameter) {
        for (size_t c :
             search_detail::filter_candidates(ctx, all, costs, memory, o_, /*full_use=*/false)) {
          unfiltered_[i].push_back(all[c]);
        }
        if (unfiltered_[i].size() == keep.size()) unfiltered_[i].clear();
      }
      for (size_t c : keep) shardings.push_back(std::move(all[c]));
    }
    CLEAVE_ASSERT(!shardings.empty(), "{}: its rule offers no strategy on {} devices",
                  describe_op(ctx), o_.step_parallel.device_num);
  }

  // A parameter read by several ops whose candidates under fully_use_devices read it in no
  // common layout (seed 001's BatchNorm moving statistics, read by the BatchNorm and by the
  // update's Mul of a vector, on 1024 devices): its users get back the candidates using fewer
  // devices, so that a plan exists (MindSpore fails there, NOTE [Algorithm parameters]).
  void widen_for_parameter(size_t p) {
    const std::vector<std::pair<size_t, size_t>>& users = users_[p];
    if (users.size() < 2) return;
    std::set<std::string> common;
    for (size_t u = 0; u < users.size(); ++u) {
      std::set<std::string> mine;
      for (const OpSharding& s : shardings_[users[u].first]) {
        mine.insert(s.inputs[users[u].second].normalized().to_string());
      }
      if (u == 0) {
        common = std::move(mine);
      } else {
        std::erase_if(common, [&](const std::string& l) { return mine.count(l) == 0; });
      }
    }
    if (!common.empty()) return;
    for (const auto& [i, k] : users) {
      if (!unfiltered_[i].empty()) shardings_[i] = unfiltered_[i];
    }
  }

  void add_operator(size_t i) {
    const Node& n = g_.nodes[i];
    const RuleContext ctx = context(i);
    const std::vector<OpSharding>& shardings = shardings_[i];
    CostNode node;
    node.graph_node = static_cast<int>(i);
    node.name = describe_op(ctx);
    for (const OpSharding& s : shardings) {
      const OpCost c = model_.op_cost(ctx, s);
      double cost = f_.own(c);
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const std::optional<Layout>& fixed = fixed_[static_cast<size_t>(n.inputs[k].node)];
        if (fixed) cost += f_.beta * f_.comm * redistribution_s(*fixed, s.inputs[k], metas_[i][k]);
      }
      node.cost.push_back(cost);
      node.memory_bytes.push_back(c.memory_bytes);
      node.labels.push_back(ir::strategy_to_string(s.strategy));
      node.strategies.push_back(s.strategy);
    }
    index_[i] = static_cast<int>(out_.nodes.size());
    out_.nodes.push_back(std::move(node));
  }

  // A parameter's candidates: the layouts its users' candidates read it in, one per distinct
  // distribution, in the order first met.
  void add_parameter(size_t p) {
    const Node& param = g_.nodes[p];
    const ir::TensorMeta& meta = param.outputs[0];
    CostNode node;
    node.kind = CostNode::Kind::kParameter;
    node.graph_node = static_cast<int>(p);
    node.name = fmt::format("parameter '{}'", param.name);
    // BatchNorm's moving statistics have no gradient to reduce (a parsed graph binds no tensor:
    // every parameter counts as trainable there).
    const bool trainable = search_detail::trainable(param);
    std::set<std::string> seen;
    for (const auto& [i, k] : users_[p]) {
      for (const OpSharding& s : shardings_[i]) {
        const Layout& l = s.inputs[k];
        if (!seen.insert(l.normalized().to_string()).second) continue;
        // kMemory: the slice, its gradient and one slice of optimizer state (NOTE [Search
        // objectives]).
        const double held = f_.memory * static_cast<double>(l.slice_shape(meta.shape).numel()) *
                            static_cast<double>(dtype_size(planned_dtype(meta.dtype))) *
                            (trainable && o_.training ? 3.0 : 1.0);
        node.cost.push_back(search_detail::mirror_cost(model_, o_, meta, l, trainable) + held);
        node.memory_bytes.push_back(0);
        node.labels.push_back(l.to_string());
        layouts_.emplace(std::make_pair(p, node.cost.size() - 1), l);
      }
    }
    if (node.cost.empty()) return;  // read by no op
    index_[p] = static_cast<int>(out_.nodes.size());
    out_.nodes.push_back(std::move(node));
  }

  // The first input of op i that another op produces (SIZE_MAX: none).
  size_t first_op_input(size_t i) const {
    const Node& n = g_.nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (g_.nodes[static_cast<size_t>(n.inputs[k].node)].is_op()) return k;
    }
    return SIZE_MAX;
  }

  void add_edges(size_t i) {
    const Node& n = g_.nodes[i];
    const int to = index_[i];
    const std::vector<OpSharding>& mine = shardings_[i];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ValueRef v = n.inputs[k];
      const auto src = static_cast<size_t>(v.node);
      const Node& from_node = g_.nodes[src];
      if (from_node.is_op()) {
        const std::vector<OpSharding>& theirs = shardings_[src];
        CostEdge e{index_[src], to, {}};
        e.cost.reserve(theirs.size() * mine.size());
        // elementwise_op_strategy_follow: an elementwise op reads its first producer's output as
        // produced, where one of its candidates can (NOTE [Algorithm parameters]).
        const bool follow = o_.elementwise_op_strategy_follow && n.strategy.empty() &&
                            k == first_op_input(i) && search_detail::is_elementwise(*n.op);
        for (const OpSharding& a : theirs) {
          const Layout from = a.outputs[static_cast<size_t>(v.output)].completed();
          const size_t row = e.cost.size();
          bool matched = false;
          for (const OpSharding& b : mine) {
            e.cost.push_back(f_.beta * f_.comm * redistribution_s(from, b.inputs[k], metas_[i][k]));
            matched = matched || from.same_distribution(b.inputs[k]);
          }
          if (!follow || !matched) continue;
          for (size_t c = 0; c < mine.size(); ++c) {
            if (!from.same_distribution(mine[c].inputs[k])) e.cost[row + c] = kForbidden;
          }
        }
        out_.edges.push_back(std::move(e));
      } else if (from_node.kind == NodeKind::kParameter) {
        const int from = index_[src];
        const int64_t count = out_.nodes[static_cast<size_t>(from)].num_candidates();
        CostEdge e{from, to, {}};
        e.cost.reserve(static_cast<size_t>(count) * mine.size());
        for (int64_t c = 0; c < count; ++c) {
          const Layout& l = layouts_.at({src, static_cast<size_t>(c)});
          for (const OpSharding& b : mine) {
            e.cost.push_back(l.same_distribution(b.inputs[k]) ? 0.0 : kForbidden);
          }
        }
        out_.edges.push_back(std::move(e));
      }
    }
  }

  const Graph& g_;
  const SearchOptions& o_;
  const CostModel& model_;
  Factors f_;
  std::vector<int> index_;  // per graph node: its cost node, -1 for none
  std::vector<std::vector<OpSharding>> shardings_;
  std::vector<std::vector<OpSharding>> unfiltered_;  // fully_use_devices: before it filtered
  std::vector<std::vector<ir::TensorMeta>> metas_;
  std::vector<std::optional<Layout>> fixed_;                   // graph inputs and constants
  std::map<std::pair<size_t, size_t>, Layout> layouts_;        // (parameter, candidate) -> layout
  std::vector<std::vector<std::pair<size_t, size_t>>> users_;  // per node: (op, input index)
  CostGraph out_;
};

}  // namespace

CostGraph build_cost_graph(const Graph& global, const SearchOptions& options) {
  return Builder(global, options).build();
}

double CostGraph::cost(std::span<const int> choice) const {
  CLEAVE_ASSERT(choice.size() == nodes.size(), "a plan of {} choices for {} nodes", choice.size(),
                nodes.size());
  double total = 0;
  for (size_t i = 0; i < nodes.size(); ++i) total += nodes[i].cost[static_cast<size_t>(choice[i])];
  for (const CostEdge& e : edges) {
    const int64_t cols = nodes[static_cast<size_t>(e.to)].num_candidates();
    total += e.cost[static_cast<size_t>(choice[static_cast<size_t>(e.from)] * cols +
                                        choice[static_cast<size_t>(e.to)])];
  }
  return total;
}

double CostGraph::memory(std::span<const int> choice) const {
  CLEAVE_ASSERT(choice.size() == nodes.size(), "a plan of {} choices for {} nodes", choice.size(),
                nodes.size());
  double total = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    total += nodes[i].memory_bytes[static_cast<size_t>(choice[i])];
  }
  return total;
}

void CostGraph::check() const {
  CLEAVE_CHECK_ARG(memory_capacity_bytes >= 0,
                   "cost graph: memory_capacity_bytes is {}; expected >= 0 (0: no limit)",
                   memory_capacity_bytes);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const CostNode& n = nodes[i];
    CLEAVE_CHECK_ARG(!n.cost.empty(), "cost graph: node {} ({}) has no candidate", i, n.name);
    CLEAVE_CHECK_ARG(n.memory_bytes.size() == n.cost.size(),
                     "cost graph: node {} ({}) has {} costs but {} memory sizes; expected one "
                     "of each per candidate",
                     i, n.name, n.cost.size(), n.memory_bytes.size());
    for (size_t c = 0; c < n.cost.size(); ++c) {
      CLEAVE_CHECK_ARG(n.cost[c] >= 0 && n.memory_bytes[c] >= 0 && std::isfinite(n.cost[c]),
                       "cost graph: node {} ({}) candidate {} has cost {} and memory {}; expected "
                       "finite values >= 0",
                       i, n.name, c, n.cost[c], n.memory_bytes[c]);
    }
  }
  const auto size = static_cast<int>(nodes.size());
  for (size_t k = 0; k < edges.size(); ++k) {
    const CostEdge& e = edges[k];
    CLEAVE_CHECK_ARG(e.from >= 0 && e.from < size && e.to >= 0 && e.to < size && e.from != e.to,
                     "cost graph: edge {} joins nodes {} and {}; expected two different nodes "
                     "in [0, {})",
                     k, e.from, e.to, size);
    const int64_t cells = nodes[static_cast<size_t>(e.from)].num_candidates() *
                          nodes[static_cast<size_t>(e.to)].num_candidates();
    CLEAVE_CHECK_ARG(static_cast<int64_t>(e.cost.size()) == cells,
                     "cost graph: edge {} ({} -> {}) has {} costs; expected {} (one per pair of "
                     "candidates)",
                     k, e.from, e.to, e.cost.size(), cells);
    for (double c : e.cost) {
      CLEAVE_CHECK_ARG(c >= 0 && !std::isnan(c),
                       "cost graph: edge {} has cost {}; expected >= 0 (+inf: forbidden)", k, c);
    }
  }
}

}  // namespace cleave::parallel
