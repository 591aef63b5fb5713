// The cost graph of a traced forward graph (NOTE [Cost graph] in cleave/parallel/search.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "cleave/core/error.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/search.h"
#include "parallel/planned_dtype.h"
#include "parallel/search/candidates.h"

namespace cleave::parallel {
namespace {

// NOTE [Edge costs]
// An op-to-op edge holds, for every pair (producer candidate, consumer candidate), beta * m times
// the redistribution from the producer's completed output layout to the layout the consumer's
// candidate reads. At 1024 devices a convolution has hundreds of candidates and seed 001's
// ResNet-50 has 1.7 million such cells, of which some 300 thousand differ (the blocks of a
// stage repeat their edges); each different one is a shortest-path search in
// plan_redistribution, which dominated the search (30 s of its 32 s). So the builder:
//   1. interns the layouts the cells name by their normalized forms (Layout::normalized: axes
//      of size 1 dropped) and the tensor types, so that a cell is three small integers: two
//      layouts that distribute a tensor alike get one id, and plan_redistribution plans from
//      and to the normalized forms, as it does inside for any layouts (its plan is a function
//      of the normalized forms, and its checks accept a layout's normalized form whenever they
//      accept the layout);
//   2. makes one *job* per different cell (first met first), and computes the jobs' plans on
//      several threads (redistribution_cost, the plans without their layouts, is thread-safe
//      and a pure function of its arguments), then their costs in job order on this thread (a
//      CostModel need not be thread-safe);
//   3. fills every matrix from its cells' jobs.
// Each cell gets exactly the value the plain loop computed, by the same expression from the same
// plan: the cost graph, and so every plan searched on it, is unchanged bit for bit. An
// Error a plan raises is rethrown for the first job (in cell order) that raised one, as the
// loop would have raised it.

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::ValueRef;

constexpr double kForbidden = std::numeric_limits<double>::infinity();

using search_detail::check_search_options;
using search_detail::Factors;

class Builder {
 public:
  Builder(const Graph& g, const SearchOptions& o)
      : g_(g),
        o_(o),
        model_(o.cost_model != nullptr ? *o.cost_model : default_cost_model()),
        f_(o),
        backward_(search_detail::op_backwards(g, o.training)),
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
    cost_edges();
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
        redistribution_cost(from, to, meta.shape, planned_dtype(meta.dtype)));
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
    const ShardingRule* rule = &search_detail::searched_rule(ctx);
    std::vector<OpSharding>& shardings = shardings_[i];
    if (!n.strategy.empty()) {
      shardings.push_back(infer_node(*rule, ctx, n, n.strategy));  // the rewrite's check and error
    } else {
      // NOTE [Algorithm parameters]: the rule's strategies, filtered.
      std::vector<OpSharding> all = rule->shardings(ctx);
      std::vector<double> costs, memory;
      if (o_.enable_algo_approxi) {
        for (const OpSharding& s : all) {
          const search_detail::StepOpCost c =
              search_detail::step_op_cost(model_, ctx, s, backward_[i]);
          costs.push_back(f_.own(c.cost, c.factor));
          memory.push_back(c.cost.memory_bytes);
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
      const search_detail::StepOpCost step =
          search_detail::step_op_cost(model_, ctx, s, backward_[i]);
      const OpCost& c = step.cost;
      double cost = f_.own(c, step.factor);
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
        layouts_of_.emplace(std::make_pair(p, node.cost.size() - 1), l);
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

  // Interned values (NOTE [Edge costs]): an id per distinct value, by exact equality.
  template <typename T>
  struct Interned {
    std::unordered_map<std::string, int> ids;
    std::vector<T> values;
    int id(const std::string& key, const T& value) {
      auto [it, fresh] = ids.try_emplace(key, static_cast<int>(values.size()));
      if (fresh) values.push_back(value);
      return it->second;
    }
  };

  static void put(std::string& key, int64_t v) {
    key.append(reinterpret_cast<const char*>(&v), sizeof v);
  }

  static std::string key_of(const Layout& l) {
    std::string key;
    put(key, static_cast<int64_t>(l.device_matrix().size()));
    for (int64_t d : l.device_matrix()) put(key, d);
    put(key, l.tensor_rank());
    for (const Layout::DimAxes& axes : l.tensor_map()) {
      put(key, static_cast<int64_t>(axes.size()));
      for (int a : axes) put(key, a);
    }
    put(key, static_cast<int64_t>(l.partial().size()));
    for (int a : l.partial()) put(key, a);
    put(key, static_cast<int64_t>(l.partial_op()));
    return key;
  }

  // The id of l's normalized form (NOTE [Edge costs]); normalized() runs once per distinct l.
  int layout_id(const Layout& l) {
    const int raw = raw_layouts_.id(key_of(l), l);
    if (static_cast<size_t>(raw) == normal_of_.size()) {
      const Layout n = l.normalized();
      normal_of_.push_back(layouts_.id(key_of(n), n));
    }
    return normal_of_[static_cast<size_t>(raw)];
  }

  int meta_id(const ir::TensorMeta& meta) {
    std::string key;
    put(key, static_cast<int64_t>(planned_dtype(meta.dtype)));
    put(key, meta.shape.rank());
    for (int64_t d : meta.shape.dims()) put(key, d);
    return tensor_types_.id(key, meta);
  }

  // The job of the cell from layout `from` to layout `to` of a tensor `meta` (all ids).
  int32_t job(int from, int to, int meta) {
    // Ids below 2^21 each: the key is one number (asserted where made).
    const uint64_t key = (static_cast<uint64_t>(from) << 42) | (static_cast<uint64_t>(to) << 21) |
                         static_cast<uint64_t>(meta);
    auto [it, fresh] = job_of_.try_emplace(key, static_cast<int32_t>(jobs_.size()));
    if (fresh) jobs_.push_back({from, to, meta});
    return it->second;
  }

  // An op-to-op edge waiting for its costs: its cells' jobs, row-major.
  struct PendingEdge {
    size_t edge = 0;  // index in out_.edges
    std::vector<int32_t> cells;
    std::vector<int> rows, cols;  // layout ids of the producer's rows, the consumer's columns
    bool follow = false;          // elementwise_op_strategy_follow applies
  };

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
        PendingEdge p;
        p.edge = out_.edges.size();
        // elementwise_op_strategy_follow: an elementwise op reads its first producer's output as
        // produced, where one of its candidates can (NOTE [Algorithm parameters]).
        p.follow = o_.elementwise_op_strategy_follow && n.strategy.empty() &&
                   k == first_op_input(i) && search_detail::is_elementwise(*n.op);
        const int meta = meta_id(metas_[i][k]);
        for (const OpSharding& a : theirs) {
          p.rows.push_back(layout_id(a.final_output(static_cast<size_t>(v.output))));
        }
        for (const OpSharding& b : mine) p.cols.push_back(layout_id(b.inputs[k]));
        CLEAVE_ASSERT(layouts_.values.size() < (size_t{1} << 21) &&
                          tensor_types_.values.size() < (size_t{1} << 21),
                      "cost graph: {} layouts and {} tensor types exceed the cell keys",
                      layouts_.values.size(), tensor_types_.values.size());
        p.cells.reserve(p.rows.size() * p.cols.size());
        for (int r : p.rows) {
          for (int c : p.cols) p.cells.push_back(job(r, c, meta));
        }
        out_.edges.push_back(CostEdge{index_[src], to, {}});
        pending_.push_back(std::move(p));
      } else if (from_node.kind == NodeKind::kParameter) {
        const int from = index_[src];
        const int64_t count = out_.nodes[static_cast<size_t>(from)].num_candidates();
        CostEdge e{from, to, {}};
        e.cost.reserve(static_cast<size_t>(count) * mine.size());
        for (int64_t c = 0; c < count; ++c) {
          const Layout& l = layouts_of_.at({src, static_cast<size_t>(c)});
          for (const OpSharding& b : mine) {
            e.cost.push_back(l.same_distribution(b.inputs[k]) ? 0.0 : kForbidden);
          }
        }
        out_.edges.push_back(std::move(e));
      }
    }
  }

  // The costs of the jobs (NOTE [Edge costs]), then the matrices of the pending edges.
  void cost_edges() {
    const size_t count = jobs_.size();
    std::vector<char> same(count);
    std::vector<const RedistributionCost*> plans(count, nullptr);
    // Threads pay off only for many plans; a small graph stays on this thread.
    search_detail::parallel_for(count, count < 4096 ? 1 : 8, 64, [&](size_t j) {
      const Job& job = jobs_[j];
      const Layout& from = layouts_.values[static_cast<size_t>(job.from)];
      const Layout& to = layouts_.values[static_cast<size_t>(job.to)];
      same[j] = from.same_distribution(to);
      if (same[j]) return;
      const ir::TensorMeta& meta = tensor_types_.values[static_cast<size_t>(job.meta)];
      plans[j] = &redistribution_cost(from, to, meta.shape, planned_dtype(meta.dtype));
    });
    std::vector<double> cost(count, 0.0);
    for (size_t j = 0; j < count; ++j) {
      if (!same[j]) cost[j] = f_.beta * f_.comm * model_.redistribution_s(*plans[j]);
    }
    for (PendingEdge& p : pending_) {
      CostEdge& e = out_.edges[p.edge];
      e.cost.resize(p.cells.size());
      for (size_t c = 0; c < p.cells.size(); ++c) {
        e.cost[c] = cost[static_cast<size_t>(p.cells[c])];
      }
      if (!p.follow) continue;
      // A row whose output some candidate reads as produced forbids its other pairs.
      const size_t width = p.cols.size();
      for (size_t r = 0; r < p.rows.size(); ++r) {
        bool matched = false;
        for (size_t c = 0; c < width; ++c) {
          matched = matched || same[static_cast<size_t>(p.cells[r * width + c])];
        }
        if (!matched) continue;
        for (size_t c = 0; c < width; ++c) {
          if (!same[static_cast<size_t>(p.cells[r * width + c])]) {
            e.cost[r * width + c] = kForbidden;
          }
        }
      }
    }
    pending_.clear();
  }

  struct Job {
    int from, to, meta;
  };

  const Graph& g_;
  const SearchOptions& o_;
  const CostModel& model_;
  Factors f_;
  std::vector<search_detail::OpBackward> backward_;  // per node (NOTE [Backward of an op])
  std::vector<int> index_;                           // per graph node: its cost node, -1 for none
  std::vector<std::vector<OpSharding>> shardings_;
  std::vector<std::vector<OpSharding>> unfiltered_;  // fully_use_devices: before it filtered
  std::vector<std::vector<ir::TensorMeta>> metas_;
  std::vector<std::optional<Layout>> fixed_;                // graph inputs and constants
  std::map<std::pair<size_t, size_t>, Layout> layouts_of_;  // (parameter, candidate) -> layout
  Interned<Layout> raw_layouts_;           // NOTE [Edge costs]: the layouts cells name, as met
  std::vector<int> normal_of_;             // per raw layout: its normalized form's id in layouts_
  Interned<Layout> layouts_;               // the normalized forms
  Interned<ir::TensorMeta> tensor_types_;  // and their tensors' types
  std::unordered_map<uint64_t, int32_t> job_of_;  // (from, to, meta) -> job
  std::vector<Job> jobs_;
  std::vector<PendingEdge> pending_;
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
