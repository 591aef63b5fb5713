// The recursive-programming search (NOTE [Recursive programming search] in
// cleave/parallel/search.h).
//
// Vocabulary: an *op* is an operator node of the traced graph; its *candidates* are every valid
// strategy on the D devices of the job whose splits' product divides D (ShardingRule::shardings:
// those using fewer devices repeat the computation), so that all layouts live on D devices and
// compare as they will in the rewrite; its *current* candidate is its partial strategy after the
// levels done so far. A *level* multiplies the devices an op uses by one prime factor of D; its
// *options* are the candidates refining the current one by that factor. An op is *decided* at a
// level once it took one of its options; only decided neighbours are costed.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "cleave/core/error.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/search.h"
#include "parallel/planned_dtype.h"
#include "parallel/search/candidates.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using search_detail::Factors;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kNone = -1;

std::vector<int64_t> prime_factors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t p = 2; p * p <= n; ++p) {
    while (n % p == 0) {
      out.push_back(p);
      n /= p;
    }
  }
  if (n > 1) out.push_back(n);
  return out;
}

// Where an op's input comes from.
struct Source {
  enum class Kind { kOp, kParameter, kFixed, kOther };
  Kind kind = Kind::kOther;
  int index = kNone;  // kOp: the producer's op index; kParameter: the parameter's index
  int output = 0;     // kOp: which of the producer's outputs
  std::optional<Layout> fixed;
};

// The candidates of every op of one *signature* (primitive, attributes, input and output types,
// the factor of NOTE [Backward of an op]: what a rule's strategies and an op's cost depend on),
// found and costed once: the layers of a network repeat.
struct Family {
  std::vector<OpSharding> cands;
  std::vector<int64_t> used;  // per candidate: devices_used
  std::vector<double> own;    // per candidate: own cost, NaN until computed
  std::vector<double> memory;
  std::vector<std::vector<Layout>> completed;  // per candidate: its outputs, completed
};

struct PairHash {
  size_t operator()(const std::pair<const Layout*, const Layout*>& p) const {
    return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
  }
};

struct Op {
  size_t node = 0;
  std::vector<ir::TensorMeta> metas;
  std::shared_ptr<Family> f;
  bool configured = false;
  bool elementwise = false;
  std::vector<Source> sources;            // per input
  std::vector<std::array<int, 3>> users;  // (op, input index, output index)
  int cur = 0;                            // current candidate
  std::vector<int> options;               // this level's
  int first_op_input = kNone;             // elementwise_op_strategy_follow
};

struct Parameter {
  size_t node = 0;
  std::vector<std::pair<int, int>> users;  // (op, input index)
  std::optional<Layout> layout;            // this level's, once a user decided it
};

class Recursive {
 public:
  Recursive(const Graph& g, const SearchOptions& o)
      : g_(g),
        o_(o),
        model_(o.cost_model != nullptr ? *o.cost_model : default_cost_model()),
        f_(o),
        backward_(search_detail::op_backwards(g, o.training)),
        op_of_(g.nodes.size(), kNone),
        param_of_(g.nodes.size(), kNone) {}

  RecursivePlan run() {
    build();
    RecursivePlan plan;
    plan.levels = prime_factors(o_.step_parallel.device_num);
    std::vector<int> order;
    for (size_t a = 0; a < ops_.size(); ++a) {
      if (!ops_[a].configured) order.push_back(static_cast<int>(a));
    }
    plan.ops = static_cast<int>(order.size());
    for (int64_t p : plan.levels) level(order, p);
    plan.strategies.resize(g_.nodes.size());
    // A parameter its users still read in two layouts (their options never met): repaired.
    for (size_t p = 0; p < params_.size(); ++p) repair_parameter(p);
    for (const Op& op : ops_) {
      plan.strategies[op.node] = op.f->cands[static_cast<size_t>(op.cur)].strategy;
    }
    plan.cost = total_cost();
    for (size_t a = 0; a < ops_.size(); ++a) plan.memory_bytes += memory(a, ops_[a].cur);
    return plan;
  }

  // The least memory of any plan: every op's least over the candidates the options allow.
  double least_memory() {
    double total = 0;
    for (size_t a = 0; a < ops_.size(); ++a) {
      const Op& op = ops_[a];
      int64_t most = 1;
      for (int64_t u : op.f->used) most = std::max(most, u);
      double least = kInf;
      for (size_t c = 0; c < op.f->cands.size(); ++c) {
        if (o_.fully_use_devices && op.f->used[c] != most) continue;
        least = std::min(least, memory(a, static_cast<int>(c)));
      }
      total += least;
    }
    return total;
  }

 private:
  RuleContext context(size_t node) const {
    const Node& n = g_.nodes[node];
    const Op& op = ops_[static_cast<size_t>(op_of_[node])];
    return RuleContext{
        *n.op, n.attrs, op.metas, n.outputs, n.name, n.scope, o_.step_parallel.device_num};
  }

  void build() {
    CLEAVE_CHECK_ARG(o_.step_parallel.device_num >= 1,
                     "device_num is {}; expected a positive device count",
                     o_.step_parallel.device_num);
    CLEAVE_CHECK_ARG(std::isfinite(o_.beta) && o_.beta >= 0,
                     "search: beta is {}; expected a finite weight >= 0", o_.beta);
    CLEAVE_CHECK_ARG(o_.memory_capacity_bytes >= 0,
                     "search: memory_capacity_bytes is {}; expected >= 0 (0: no limit)",
                     o_.memory_capacity_bytes);
    search_detail::check_search_options(o_);
    std::vector<std::optional<Layout>> fixed(g_.nodes.size());
    const std::vector<Layout> inputs = dataset_layouts(g_, o_.step_parallel);
    for (size_t k = 0; k < g_.inputs.size(); ++k) {
      fixed[static_cast<size_t>(g_.inputs[k])] = inputs[k];
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (n.kind == NodeKind::kConstant) {
        fixed[i] = Layout::replicated({o_.step_parallel.device_num}, n.outputs[0].shape.rank());
      } else if (n.kind == NodeKind::kParameter) {
        param_of_[i] = static_cast<int>(params_.size());
        params_.push_back({i, {}, std::nullopt});
      } else if (n.is_op()) {
        op_of_[i] = static_cast<int>(ops_.size());
        ops_.emplace_back();
        ops_.back().node = i;
      }
    }
    for (size_t a = 0; a < ops_.size(); ++a) {
      Op& op = ops_[a];
      const Node& n = g_.nodes[op.node];
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const auto src = static_cast<size_t>(n.inputs[k].node);
        op.metas.push_back(g_.meta(n.inputs[k]));
        Source s;
        if (op_of_[src] != kNone) {
          s.kind = Source::Kind::kOp;
          s.index = op_of_[src];
          s.output = n.inputs[k].output;
          ops_[static_cast<size_t>(s.index)].users.push_back(
              {static_cast<int>(a), static_cast<int>(k), s.output});
          if (op.first_op_input == kNone) op.first_op_input = static_cast<int>(k);
        } else if (param_of_[src] != kNone) {
          s.kind = Source::Kind::kParameter;
          s.index = param_of_[src];
          params_[static_cast<size_t>(s.index)].users.emplace_back(static_cast<int>(a),
                                                                   static_cast<int>(k));
        } else if (fixed[src]) {
          s.kind = Source::Kind::kFixed;
          s.fixed = fixed[src];
        }
        op.sources.push_back(std::move(s));
      }
      const RuleContext ctx = context(op.node);
      const ShardingRule* rule = &search_detail::searched_rule(ctx);
      op.elementwise = o_.elementwise_op_strategy_follow && search_detail::is_elementwise(*n.op);
      if (!n.strategy.empty()) {
        op.configured = true;
        op.f = std::make_shared<Family>();
        op.f->cands.push_back(
            infer_node(*rule, ctx, n, n.strategy));  // the rewrite's check and error
      } else {
        // The factor of NOTE [Backward of an op] too: it is part of the cost.
        std::string signature = fmt::format("{}{}c{}g{}", n.op->name, n.attrs.to_string(),
                                            backward_[op.node].factor, backward_[op.node].grads);
        for (const ir::TensorMeta& m : op.metas) {
          signature += fmt::format("|{}{}", m.shape.to_string(), dtype_name(m.dtype));
        }
        for (const ir::TensorMeta& m : n.outputs) {
          signature += fmt::format(">{}{}", m.shape.to_string(), dtype_name(m.dtype));
        }
        std::shared_ptr<Family>& family = families_[signature];
        if (family != nullptr) {
          op.f = family;
          op.cur = ops_[static_cast<size_t>(family_first_[family.get()])].cur;
          continue;
        }
        family = op.f = std::make_shared<Family>();
        family_first_[family.get()] = static_cast<int>(a);
        std::vector<OpSharding> all = rule->shardings(ctx);
        // tensor_slice_align only: the levels apply fully_use_devices, the options the
        // approximation.
        const std::vector<double> none;
        SearchOptions align = o_;
        align.enable_algo_approxi = false;
        for (size_t c : search_detail::filter_candidates(ctx, all, none, none, align, false)) {
          op.f->cands.push_back(std::move(all[c]));
        }
      }
      CLEAVE_ASSERT(!op.f->cands.empty(), "{}: its rule offers no strategy on {} devices",
                    describe_op(ctx), o_.step_parallel.device_num);
      for (const OpSharding& s : op.f->cands) op.f->used.push_back(search_detail::devices_used(s));
      for (const OpSharding& c : op.f->cands) {
        std::vector<Layout>& outs = op.f->completed.emplace_back();
        for (size_t k = 0; k < c.outputs.size(); ++k) outs.push_back(c.final_output(k));
      }
      op.f->own.assign(op.f->cands.size(), std::nan(""));
      op.f->memory.assign(op.f->cands.size(), std::nan(""));
      // Start from the least split candidate (the replicated one, shardings' first).
      op.cur = static_cast<int>(std::min_element(op.f->used.begin(), op.f->used.end()) -
                                op.f->used.begin());
    }
  }

  void cost_candidate(size_t a, int c) {
    Op& op = ops_[a];
    const auto i = static_cast<size_t>(c);
    if (!std::isnan(op.f->own[i])) return;
    const search_detail::StepOpCost cost =
        search_detail::step_op_cost(model_, context(op.node), op.f->cands[i], backward_[op.node]);
    op.f->own[i] = f_.own(cost.cost, cost.factor);
    op.f->memory[i] = cost.cost.memory_bytes;
  }
  double own(size_t a, int c) {
    cost_candidate(a, c);
    return ops_[a].f->own[static_cast<size_t>(c)];
  }
  double memory(size_t a, int c) {
    cost_candidate(a, c);
    return ops_[a].f->memory[static_cast<size_t>(c)];
  }

  // Layouts live in the families (and the sources) for the whole search, so a pair of them is
  // one tensor's pair: its cost is cached by address.
  double redistribution(const Layout& from, const Layout& to, const ir::TensorMeta& meta) {
    const auto [it, added] = redistribution_cache_.try_emplace({&from, &to}, 0.0);
    if (added) it->second = redistribution_uncached(from, to, meta);
    return it->second;
  }

  double redistribution_uncached(const Layout& from, const Layout& to,
                                 const ir::TensorMeta& meta) const {
    if (from.same_distribution(to)) return 0;
    return f_.beta * f_.comm *
           model_.redistribution_s(
               redistribution_cost(from, to, meta.shape, planned_dtype(meta.dtype)));
  }

  const Layout& output_layout(size_t a, int output) const {
    const Op& op = ops_[a];
    return op.f->completed[static_cast<size_t>(op.cur)][static_cast<size_t>(output)];
  }

  // The local cost of candidate c of op a against its decided neighbours; `param_ok` false when
  // it reads a parameter in another layout than the one decided, `follows` false when an
  // elementwise op under elementwise_op_strategy_follow reads its producer's output otherwise
  // than as produced.
  double local_cost(size_t a, int c, const std::vector<char>& decided, bool& param_ok,
                    bool& follows) {
    const Op& op = ops_[a];
    const OpSharding& s = op.f->cands[static_cast<size_t>(c)];
    double cost = own(a, c);
    param_ok = true;
    follows = true;
    for (size_t k = 0; k < op.sources.size(); ++k) {
      const Source& src = op.sources[k];
      const Layout& in = s.inputs[k];
      switch (src.kind) {
        case Source::Kind::kOp:
          if (decided[static_cast<size_t>(src.index)]) {
            const Layout& from = output_layout(static_cast<size_t>(src.index), src.output);
            cost += redistribution(from, in, op.metas[k]);
            if (op.elementwise && static_cast<int>(k) == op.first_op_input &&
                !from.same_distribution(in)) {
              follows = false;
            }
          }
          break;
        case Source::Kind::kParameter: {
          const Parameter& p = params_[static_cast<size_t>(src.index)];
          if (p.layout && p.users.size() > 1 && !p.layout->same_distribution(in)) param_ok = false;
          // Its gradient is reduced once for all its users: each carries its share.
          cost += search_detail::mirror_cost(model_, o_, op.metas[k], in,
                                             search_detail::trainable(g_.nodes[p.node])) /
                  static_cast<double>(p.users.size());
          break;
        }
        case Source::Kind::kFixed:
          cost += redistribution(*src.fixed, in, op.metas[k]);
          break;
        case Source::Kind::kOther:
          break;
      }
    }
    for (const auto& [b, k, out] : op.users) {
      if (!decided[static_cast<size_t>(b)]) continue;
      const Op& user = ops_[static_cast<size_t>(b)];
      cost += redistribution(
          op.f->completed[static_cast<size_t>(c)][static_cast<size_t>(out)],
          user.f->cands[static_cast<size_t>(user.cur)].inputs[static_cast<size_t>(k)],
          user.metas[static_cast<size_t>(k)]);
    }
    return cost;
  }

  // This level's options of op a: the candidates refining its current one by `p`, and the current
  // one where fully_use_devices is off or none refines it; thinned under enable_algo_approxi.
  void make_options(size_t a, int64_t p) {
    Op& op = ops_[a];
    const OpSharding& base = op.f->cands[static_cast<size_t>(op.cur)];
    const int64_t target = op.f->used[static_cast<size_t>(op.cur)] * p;
    op.options.clear();
    for (size_t c = 0; c < op.f->cands.size(); ++c) {
      if (op.f->used[c] == target &&
          search_detail::refines(op.f->cands[c].strategy, base.strategy)) {
        op.options.push_back(static_cast<int>(c));
      }
    }
    if (op.options.empty() || !o_.fully_use_devices) op.options.push_back(op.cur);
    if (o_.enable_algo_approxi && op.options.size() > 1) {
      std::vector<int> sorted = op.options;
      std::stable_sort(sorted.begin(), sorted.end(),
                       [&](int x, int y) { return own(a, x) < own(a, y); });
      std::vector<int> kept;
      for (int c : sorted) {
        const bool close = std::any_of(kept.begin(), kept.end(), [&](int k) {
          return own(a, c) <= (1 + o_.algo_approxi_epsilon) * own(a, k) &&
                 memory(a, k) <= memory(a, c);
        });
        if (!close) kept.push_back(c);
      }
      op.options = std::move(kept);
    }
  }

  // Op a takes its option of least local cost: among those keeping the parameter and follow
  // rules, else among those keeping the parameter rule, else among all.
  void choose(size_t a, const std::vector<char>& decided) {
    Op& op = ops_[a];
    double best[3] = {kInf, kInf, kInf};
    int pick[3] = {kNone, kNone, kNone};
    for (int c : op.options) {
      bool param_ok = true, follows = true;
      const double cost = local_cost(a, c, decided, param_ok, follows);
      const int tier = param_ok ? (follows ? 0 : 1) : 2;
      if (cost < best[tier]) {
        best[tier] = cost;
        pick[tier] = c;
      }
    }
    for (int t = 0; t < 3; ++t) {
      if (pick[t] != kNone) {
        op.cur = pick[t];
        break;
      }
    }
    for (size_t k = 0; k < op.sources.size(); ++k) {
      const Source& src = op.sources[k];
      if (src.kind != Source::Kind::kParameter) continue;
      Parameter& p = params_[static_cast<size_t>(src.index)];
      // A parameter of one user follows it; of several, the first to decide lays it out.
      if (!p.layout || p.users.size() == 1) {
        p.layout = op.f->cands[static_cast<size_t>(op.cur)].inputs[k];
      }
    }
  }

  // One level (NOTE [Recursive programming search]): the ops decide in the order of their
  // weight, then in the graph's order (producers first, as propagation would), then in reverse;
  // the cheapest of the three outcomes stays.
  void level(const std::vector<int>& ops, int64_t p) {
    std::vector<int> by_weight = ops;
    std::vector<double> weight(ops_.size(), 0);
    for (int a : ops) {
      weight[static_cast<size_t>(a)] =
          own(static_cast<size_t>(a), ops_[static_cast<size_t>(a)].cur);
    }
    std::stable_sort(by_weight.begin(), by_weight.end(), [&](int x, int y) {
      return weight[static_cast<size_t>(x)] > weight[static_cast<size_t>(y)];
    });
    std::vector<int> forward = ops;
    std::vector<int> backward(ops.rbegin(), ops.rend());
    std::vector<int> start(ops_.size());
    for (size_t a = 0; a < ops_.size(); ++a) start[a] = ops_[a].cur;
    for (int a : ops) make_options(static_cast<size_t>(a), p);
    std::vector<int> best;
    double best_cost = kInf;
    for (const std::vector<int>* order : {&by_weight, &forward, &backward}) {
      for (size_t a = 0; a < ops_.size(); ++a) ops_[a].cur = start[a];
      decide(*order);
      const double cost = total_cost();
      if (best.empty() || cost < best_cost) {
        best_cost = cost;
        best.resize(ops_.size());
        for (size_t a = 0; a < ops_.size(); ++a) best[a] = ops_[a].cur;
      }
    }
    for (size_t a = 0; a < ops_.size(); ++a) ops_[a].cur = best[a];
  }

  // Every op of `order` takes an option against the decided ones, then once more against all.
  void decide(const std::vector<int>& order) {
    std::vector<char> decided(ops_.size(), 0);
    for (Parameter& param : params_) param.layout.reset();
    for (size_t a = 0; a < ops_.size(); ++a) {
      if (!ops_[a].configured) continue;
      decided[a] = 1;
      // A configured op lays out the parameters it reads.
      for (size_t k = 0; k < ops_[a].sources.size(); ++k) {
        const Source& src = ops_[a].sources[k];
        if (src.kind == Source::Kind::kParameter) {
          params_[static_cast<size_t>(src.index)].layout = ops_[a].f->cands[0].inputs[k];
        }
      }
    }
    for (int a : order) {
      choose(static_cast<size_t>(a), decided);
      decided[static_cast<size_t>(a)] = 1;
    }
    for (int a : order) choose(static_cast<size_t>(a), decided);
    bool moved = false;
    for (size_t p = 0; p < params_.size(); ++p) moved = move_parameter(p) || moved;
    if (moved) {
      for (int a : order) choose(static_cast<size_t>(a), decided);
    }
  }

  // The users of a shared parameter change together: for every layout some option of a user reads
  // it in, each user takes its cheapest option reading it so (the others as they are); the layout
  // of least total stays. (One user at a time could not leave a layout all of them share.)
  // Returns whether the layout changed.
  // `repair` (after the last level, for a parameter its users read in two layouts): each user
  // may take any candidate using as many devices as its current one, not only this level's
  // options, and where that does not make them agree, any candidate at all.
  bool repair_parameter(size_t index) {
    Parameter& p = params_[index];
    if (p.users.size() < 2 || consistent(p)) return false;
    for (bool same_devices : {true, false}) {
      p.layout = layout_of(p.users.front());
      for (const auto& [a, k] : p.users) {
        Op& op = ops_[static_cast<size_t>(a)];
        op.options.clear();
        for (size_t c = 0; c < op.f->cands.size(); ++c) {
          if (!same_devices || op.f->used[c] == op.f->used[static_cast<size_t>(op.cur)]) {
            op.options.push_back(static_cast<int>(c));
          }
        }
      }
      if (move_parameter(index, true)) return true;
    }
    return false;
  }

  bool move_parameter(size_t index, bool repair = false) {
    Parameter& p = params_[index];
    if (p.users.size() < 2) return false;
    if (!p.layout) return false;
    const std::vector<char> all(ops_.size(), 1);
    // The layouts tried: those of the user with the fewest options (every user must read the
    // parameter alike), or a configured user's.
    size_t fewest = 0;
    for (size_t u = 0; u < p.users.size(); ++u) {
      const Op& op = ops_[static_cast<size_t>(p.users[u].first)];
      const Op& best = ops_[static_cast<size_t>(p.users[fewest].first)];
      if (op.configured || (!best.configured && op.options.size() < best.options.size())) {
        fewest = u;
      }
    }
    std::vector<Layout> layouts;
    {
      const auto [a, k] = p.users[fewest];
      const Op& op = ops_[static_cast<size_t>(a)];
      for (int c : op.configured ? std::vector<int>{0} : op.options) {
        const Layout& l = op.f->cands[static_cast<size_t>(c)].inputs[static_cast<size_t>(k)];
        if (std::none_of(layouts.begin(), layouts.end(),
                         [&](const Layout& x) { return x.same_distribution(l); })) {
          layouts.push_back(l);
        }
      }
    }
    const Layout before = *p.layout;
    double best_total = kInf;
    std::vector<int> best_pick;
    std::optional<Layout> best_layout;
    for (const Layout& l : layouts) {
      p.layout = l;
      double total = 0;
      std::vector<int> pick;
      for (const auto& [a, k] : p.users) {
        const Op& op = ops_[static_cast<size_t>(a)];
        double least = kInf;
        int chosen = kNone;
        if (op.configured) {
          bool param_ok = true, follows = true;
          least = local_cost(static_cast<size_t>(a), 0, all, param_ok, follows);
          chosen = param_ok ? 0 : kNone;
          if (!param_ok) least = kInf;
        }
        for (int c : op.configured ? std::vector<int>{} : op.options) {
          if (!op.f->cands[static_cast<size_t>(c)].inputs[static_cast<size_t>(k)].same_distribution(
                  l)) {
            continue;
          }
          bool param_ok = true, follows = true;
          const double cost = local_cost(static_cast<size_t>(a), c, all, param_ok, follows);
          if (param_ok && cost < least) {
            least = cost;
            chosen = c;
          }
        }
        total += least;
        pick.push_back(chosen);
      }
      const bool is_before = l.same_distribution(before);
      // Strictly cheaper to move (ties keep the layout chosen already).
      if (std::isfinite(total) &&
          (total < best_total * (1 - 1e-12) || (is_before && total <= best_total))) {
        best_total = total;
        best_pick = std::move(pick);
        best_layout = l;
      }
    }
    p.layout = before;
    if (!best_layout || (!repair && best_layout->same_distribution(before))) return false;
    p.layout = best_layout;
    for (size_t u = 0; u < p.users.size(); ++u) {
      ops_[static_cast<size_t>(p.users[u].first)].cur = best_pick[u];
    }
    return true;
  }

  const Layout& layout_of(const std::pair<int, int>& user) const {
    const Op& op = ops_[static_cast<size_t>(user.first)];
    return op.f->cands[static_cast<size_t>(op.cur)].inputs[static_cast<size_t>(user.second)];
  }

  // Whether every user of `p` reads it in one layout.
  bool consistent(const Parameter& p) const {
    const Layout& first = layout_of(p.users.front());
    return std::all_of(p.users.begin(), p.users.end(),
                       [&](const auto& u) { return layout_of(u).same_distribution(first); });
  }

  // The plan's cost as CostGraph::cost counts it: every op's own cost and its fixed inputs'
  // redistribution, every edge between ops, every parameter's gradient reduction in the layout
  // its first user reads it in.
  double total_cost() {
    double total = 0;
    for (size_t a = 0; a < ops_.size(); ++a) {
      const Op& op = ops_[a];
      const OpSharding& s = op.f->cands[static_cast<size_t>(op.cur)];
      total += own(a, op.cur);
      for (size_t k = 0; k < op.sources.size(); ++k) {
        const Source& src = op.sources[k];
        if (src.kind == Source::Kind::kFixed) {
          total += redistribution(*src.fixed, s.inputs[k], op.metas[k]);
        } else if (src.kind == Source::Kind::kOp) {
          total += redistribution(output_layout(static_cast<size_t>(src.index), src.output),
                                  s.inputs[k], op.metas[k]);
        }
      }
    }
    for (const Parameter& p : params_) {
      if (p.users.empty()) continue;
      const auto [a, k] = p.users.front();
      const Op& op = ops_[static_cast<size_t>(a)];
      const Layout& l = op.f->cands[static_cast<size_t>(op.cur)].inputs[static_cast<size_t>(k)];
      for (const auto& [b, j] : p.users) {
        const Op& other = ops_[static_cast<size_t>(b)];
        if (!l.same_distribution(
                other.f->cands[static_cast<size_t>(other.cur)].inputs[static_cast<size_t>(j)])) {
          return kInf;  // read in two layouts: a forbidden pair of the cost graph
        }
      }
      total += search_detail::mirror_cost(model_, o_, op.metas[static_cast<size_t>(k)], l,
                                          search_detail::trainable(g_.nodes[p.node]));
    }
    return total;
  }

  const Graph& g_;
  const SearchOptions& o_;
  const CostModel& model_;
  Factors f_;
  std::vector<search_detail::OpBackward> backward_;  // per graph node (NOTE [Backward of an op])
  std::vector<int> op_of_, param_of_;  // per graph node: its op / parameter index, or kNone
  std::vector<Op> ops_;
  std::vector<Parameter> params_;
  std::map<std::string, std::shared_ptr<Family>> families_;  // by signature
  std::map<const Family*, int> family_first_;                // the op that made it
  std::unordered_map<std::pair<const Layout*, const Layout*>, double, PairHash>
      redistribution_cache_;
};

}  // namespace

RecursivePlan recursive_programming_plan(const Graph& global, const SearchOptions& options) {
  return Recursive(global, options).run();
}

std::vector<ir::Strategy> recursive_programming(const Graph& global, const SearchOptions& options) {
  return recursive_programming_plan(global, options).strategies;
}

std::string RecursivePlan::summary() const {
  return fmt::format(
      "recursive programming: {} ops, {} level{} ({}), predicted step cost {:.4g} ms, memory "
      "{:.4g} MiB per rank",
      ops, levels.size(), levels.size() == 1 ? "" : "s",
      levels.empty() ? std::string("1 device") : fmt::format("{}", fmt::join(levels, " x ")),
      cost * 1e3, memory_bytes / (1 << 20));
}

RecursivePlan search_strategies_recursive(Graph& global, const SearchOptions& options) {
  Recursive search(global, options);
  RecursivePlan plan = search.run();
  if (options.memory_capacity_bytes > 0 && plan.memory_bytes > options.memory_capacity_bytes) {
    const double least = search.least_memory();
    CLEAVE_CHECK_ARG(least <= options.memory_capacity_bytes,
                     "recursive programming: no plan fits the memory capacity of {:.0f} bytes per "
                     "rank; the smallest memory any plan needs is {:.0f} bytes ({:.2f} MiB); "
                     "raise the capacity or use more devices",
                     options.memory_capacity_bytes, least, least / (1 << 20));
    CLEAVE_FAIL(
        "recursive programming: its plan needs {:.0f} bytes per rank, more than the memory "
        "capacity of {:.0f} bytes (a plan needing {:.0f} bytes may exist: search_mode "
        "\"dynamic_programming\" searches under the capacity)",
        plan.memory_bytes, options.memory_capacity_bytes, least);
  }
  for (size_t i = 0; i < global.nodes.size(); ++i) {
    Node& node = global.nodes[i];
    if (!node.is_op() || !node.strategy.empty()) continue;
    node.strategy = plan.strategies[i];
    node.strategy_derived = true;
  }
  return plan;
}

SearchResult cost_of_strategies(const CostGraph& graph, const Graph& global,
                                const std::vector<ir::Strategy>& strategies) {
  std::vector<int> choice(graph.nodes.size(), kNone);
  std::vector<int> index(global.nodes.size(), kNone);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const CostNode& n = graph.nodes[i];
    index[static_cast<size_t>(n.graph_node)] = static_cast<int>(i);
    if (n.kind != CostNode::Kind::kOperator) continue;
    const ir::Strategy& want = strategies.at(static_cast<size_t>(n.graph_node));
    const auto it = std::find(n.strategies.begin(), n.strategies.end(), want);
    CLEAVE_CHECK_ARG(it != n.strategies.end(),
                     "{}: strategy {} is not among its {} candidates in the cost graph", n.name,
                     ir::strategy_to_string(want), n.strategies.size());
    choice[i] = static_cast<int>(it - n.strategies.begin());
  }
  // A parameter takes the candidate its first user reads it in (edge entry 0).
  for (const CostEdge& e : graph.edges) {
    const CostNode& from = graph.nodes[static_cast<size_t>(e.from)];
    if (from.kind != CostNode::Kind::kParameter || choice[static_cast<size_t>(e.from)] != kNone) {
      continue;
    }
    const int64_t cols = graph.nodes[static_cast<size_t>(e.to)].num_candidates();
    const int user = choice[static_cast<size_t>(e.to)];
    for (int64_t c = 0; c < from.num_candidates(); ++c) {
      if (e.cost[static_cast<size_t>(c * cols + user)] == 0) {
        choice[static_cast<size_t>(e.from)] = static_cast<int>(c);
        break;
      }
    }
  }
  for (size_t i = 0; i < choice.size(); ++i) {
    CLEAVE_ASSERT(choice[i] != kNone, "cost_of_strategies: node {} ({}) has no candidate", i,
                  graph.nodes[i].name);
  }
  SearchResult r;
  r.cost = graph.cost(choice);
  r.memory_bytes = graph.memory(choice);
  r.choice = std::move(choice);
  return r;
}

}  // namespace cleave::parallel
