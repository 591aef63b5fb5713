// The rules' common machinery (NOTE [Sharding rules] in cleave/parallel/sharding_rule.h): strategy
// checks against an iteration space, layouts, default strategies, enumeration, and the registry.
#include "cleave/parallel/sharding_rule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <numeric>

#include "cleave/core/error.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ir/registry.h"
#include "parallel/rules/rules.h"

namespace cleave::parallel {

std::string describe_op(const RuleContext& ctx) {
  std::string text = fmt::format("{} '{}'", ctx.op.name, ctx.name);
  if (!ctx.scope.empty()) text += fmt::format(" (scope {})", ctx.scope);
  return text;
}

void invalid_strategy(const RuleContext& ctx, const ir::Strategy& strategy,
                      const std::string& why) {
  std::vector<std::string> shapes;
  for (const ir::TensorMeta& m : ctx.inputs) shapes.push_back(m.shape.to_string());
  CLEAVE_FAIL("{}: strategy {} for input{} of shape{} {} on {} device{} is invalid: {}",
              describe_op(ctx), ir::strategy_to_string(strategy), shapes.size() == 1 ? "" : "s",
              shapes.size() == 1 ? "" : "s", fmt::join(shapes, ", "), ctx.device_num,
              ctx.device_num == 1 ? "" : "s", why);
}

std::vector<int> OpSharding::axes_of(int loop) const {
  if (split(loop) <= 1) return {};
  if (!loop_axes.empty()) return loop_axes[static_cast<size_t>(loop)];
  return {loop};
}

int64_t LowerContext::loop_index(int loop) const {
  const std::vector<int> axes = sharding.axes_of(loop);
  if (axes.empty()) return 0;
  const std::vector<int64_t> at = rank_to_coordinate(rank, sharding.device_matrix);
  int64_t index = 0;
  for (int a : axes) {
    index = index * sharding.device_matrix[static_cast<size_t>(a)] + at[static_cast<size_t>(a)];
  }
  return index;
}

namespace {

std::string divisors_text(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return fmt::format("{}", fmt::join(d, ", "));
}

double local_bytes(const ir::TensorMeta& m, const Layout& l) {
  return static_cast<double>(l.slice_shape(m.shape).numel() * dtype_size(m.dtype));
}

// Layouts from loop splits (NOTE [Sharding rules]).
OpSharding sharding_from_splits(const RuleContext& ctx, const IterationSpace& space,
                                std::vector<int64_t> splits, ir::Strategy strategy,
                                double slice_flops) {
  OpSharding s;
  s.strategy = std::move(strategy);
  s.space = space;
  int64_t used = 1;
  for (int64_t v : splits) used *= v;
  s.device_matrix = splits;
  if (s.device_matrix.empty()) s.device_matrix.push_back(1);
  if (ctx.device_num / used > 1) s.device_matrix.push_back(ctx.device_num / used);
  s.loop_splits = std::move(splits);
  auto layout = [&](const std::vector<int>& dims, bool output) {
    std::vector<Layout::DimAxes> map;
    std::vector<bool> indexed(space.loops.size(), false);
    for (int l : dims) {
      if (l >= 0 && s.split(l) > 1) {
        map.push_back({l});
      } else {
        map.emplace_back();
      }
      if (l >= 0) indexed[static_cast<size_t>(l)] = true;
    }
    std::vector<int> partial;
    PartialOp op = PartialOp::kSum;
    if (output) {
      for (size_t l = 0; l < space.loops.size(); ++l) {
        const LoopDim& loop = space.loops[l];
        if (indexed[l] || loop.kind != LoopDim::Kind::kReduce || s.split(static_cast<int>(l)) <= 1)
          continue;
        CLEAVE_ASSERT(partial.empty() || op == loop.reduce,
                      "{}: an output pending two kinds of reduction", ctx.op.name);
        partial.push_back(static_cast<int>(l));
        op = loop.reduce;
      }
    }
    return Layout(s.device_matrix, std::move(map), std::move(partial), op);
  };
  for (const auto& dims : space.inputs) s.inputs.push_back(layout(dims, false));
  for (const auto& dims : space.outputs) s.outputs.push_back(layout(dims, true));
  s.compute_flops = slice_flops;
  for (size_t k = 0; k < s.outputs.size(); ++k) {
    const Layout& l = s.outputs[k];
    if (!l.is_partial()) continue;
    double n = 1;
    for (int a : l.partial()) n *= static_cast<double>(l.device_matrix()[static_cast<size_t>(a)]);
    s.forward_comm_bytes += 2 * local_bytes(ctx.outputs[k], l) * (n - 1) / n;
  }
  return s;
}

// The batch loop of the default strategy (NOTE [Sharding rules]).
int batch_loop(const IterationSpace& space) {
  if (space.batch_loop >= 0) return space.batch_loop;
  if (!space.outputs.empty() && !space.outputs[0].empty()) return space.outputs[0][0];
  if (!space.inputs.empty() && !space.inputs[0].empty()) return space.inputs[0][0];
  return -1;
}

ir::Strategy strategy_from_splits(const IterationSpace& space, const std::vector<int64_t>& splits) {
  ir::Strategy strategy;
  for (const auto& dims : space.inputs) {
    std::vector<int64_t> entry;
    for (int l : dims) entry.push_back(l >= 0 ? splits[static_cast<size_t>(l)] : 1);
    strategy.push_back(std::move(entry));
  }
  return strategy;
}

ir::Strategy replicated_strategy(const RuleContext& ctx) {
  ir::Strategy s;
  for (const ir::TensorMeta& m : ctx.inputs) s.emplace_back(static_cast<size_t>(m.shape.rank()), 1);
  return s;
}

}  // namespace

IterationSpace ShardingRule::space(const RuleContext& ctx) const {
  CLEAVE_ASSERT(false, "the rule of {} defines neither space() nor infer()", ctx.op.name);
  return {};
}

OpSharding ShardingRule::infer(const RuleContext& ctx, const ir::Strategy& strategy) const {
  if (strategy.size() != ctx.inputs.size()) {
    invalid_strategy(ctx, strategy,
                     fmt::format("it has {} entr{}; expected one per input ({})", strategy.size(),
                                 strategy.size() == 1 ? "y" : "ies", ctx.inputs.size()));
  }
  for (size_t k = 0; k < strategy.size(); ++k) {
    const Shape& shape = ctx.inputs[k].shape;
    if (static_cast<int64_t>(strategy[k].size()) != shape.rank()) {
      invalid_strategy(
          ctx, strategy,
          fmt::format("entry {} has {} split{} but input {} has rank {}; expected one "
                      "split per dimension",
                      k, strategy[k].size(), strategy[k].size() == 1 ? "" : "s", k, shape.rank()));
    }
    for (size_t d = 0; d < strategy[k].size(); ++d) {
      if (strategy[k][d] < 1) {
        invalid_strategy(ctx, strategy,
                         fmt::format("input {} dim {} is split {} ways; splits must be >= 1", k, d,
                                     strategy[k][d]));
      }
    }
  }
  const IterationSpace sp = space(ctx);
  std::vector<int64_t> splits(sp.loops.size(), 0);
  std::vector<std::pair<size_t, size_t>> source(sp.loops.size());
  for (size_t k = 0; k < strategy.size(); ++k) {
    for (size_t d = 0; d < strategy[k].size(); ++d) {
      const int64_t s = strategy[k][d];
      const int l = sp.inputs[k][d];
      const int64_t size = ctx.inputs[k].shape[static_cast<int64_t>(d)];
      if (l < 0) {
        if (s != 1) {
          invalid_strategy(ctx, strategy,
                           fmt::format("input {} dim {} (size {}) is split {} ways, but it is not "
                                       "split by this operator (a broadcast dimension, or one "
                                       "every rank needs whole); expected 1",
                                       k, d, size, s));
        }
        continue;
      }
      const LoopDim& loop = sp.loops[static_cast<size_t>(l)];
      if (loop.kind == LoopDim::Kind::kFixed && s != 1) {
        invalid_strategy(ctx, strategy,
                         fmt::format("input {} dim {} is split {} ways, but it is {}, which cannot "
                                     "be split; expected 1",
                                     k, d, s, loop.name));
      }
      int64_t& have = splits[static_cast<size_t>(l)];
      if (have == 0) {
        have = s;
        source[static_cast<size_t>(l)] = {k, d};
      } else if (have != s) {
        const auto [k0, d0] = source[static_cast<size_t>(l)];
        invalid_strategy(ctx, strategy,
                         fmt::format("input {} dim {} is split {} ways but input {} dim {} is "
                                     "split {} ways; they must match ({})",
                                     k, d, s, k0, d0, have, loop.name));
      }
    }
  }
  int64_t used = 1;
  std::vector<std::string> factors;
  for (size_t l = 0; l < splits.size(); ++l) {
    if (splits[l] == 0) splits[l] = 1;
    const LoopDim& loop = sp.loops[l];
    if (loop.size % splits[l] != 0) {
      const auto [k, d] = source[l];
      invalid_strategy(ctx, strategy,
                       fmt::format("input {} dim {} has size {}, which {} ways do not divide; a "
                                   "split of it must be one of {}",
                                   k, d, loop.size, splits[l], divisors_text(loop.size)));
    }
    used *= splits[l];
    if (splits[l] > 1) factors.push_back(std::to_string(splits[l]));
  }
  if (ctx.device_num % used != 0) {
    invalid_strategy(ctx, strategy,
                     fmt::format("it uses {} devices ({}), which does not divide device_num {}; "
                                 "the product of the splits must divide the device count",
                                 used, fmt::join(factors, " x "), ctx.device_num));
  }
  const double work = slice_flops(ctx, splits);
  return sharding_from_splits(ctx, sp, std::move(splits), strategy, work);
}

ir::Strategy ShardingRule::default_strategy(const RuleContext& ctx) const {
  const IterationSpace sp = space(ctx);
  const int b = batch_loop(sp);
  if (b >= 0 && ctx.device_num > 1) {
    std::vector<int64_t> splits(sp.loops.size(), 1);
    splits[static_cast<size_t>(b)] = ctx.device_num;
    const ir::Strategy s = strategy_from_splits(sp, splits);
    try {
      infer(ctx, s);
      return s;
    } catch (const Error&) {
      // Not divisible, not splittable, or not read from an input: replicated.
    }
  }
  return replicated_strategy(ctx);
}

std::vector<OpSharding> ShardingRule::shardings(const RuleContext& ctx) const {
  const IterationSpace sp = space(ctx);
  std::vector<bool> read(sp.loops.size(), false);
  for (const auto& dims : sp.inputs) {
    for (int l : dims) {
      if (l >= 0) read[static_cast<size_t>(l)] = true;
    }
  }
  std::vector<OpSharding> out;
  std::vector<int64_t> splits(sp.loops.size(), 1);
  std::function<void(size_t, int64_t)> walk = [&](size_t l, int64_t used) {
    if (l == sp.loops.size()) {
      try {
        out.push_back(infer(ctx, strategy_from_splits(sp, splits)));
      } catch (const Error&) {
      }
      return;
    }
    const LoopDim& loop = sp.loops[l];
    for (int64_t v = 1; used * v <= ctx.device_num; ++v) {
      if (ctx.device_num % (used * v) != 0 || loop.size % v != 0) continue;
      if (v > 1 && (!read[l] || loop.kind == LoopDim::Kind::kFixed)) break;
      splits[l] = v;
      walk(l + 1, used * v);
    }
    splits[l] = 1;
  };
  walk(0, 1);
  return out;
}

std::vector<ir::Strategy> ShardingRule::strategies(const RuleContext& ctx) const {
  std::vector<ir::Strategy> out;
  for (OpSharding& s : shardings(ctx)) out.push_back(std::move(s.strategy));
  return out;
}

ir::Attrs ShardingRule::local_attrs(const LowerContext& ctx) const { return ctx.rule.attrs; }

std::vector<Tensor> ShardingRule::lower(const LowerContext& ctx) const {
  return ir::call(ctx.rule.op, ctx.inputs, local_attrs(ctx));
}

double ShardingRule::slice_flops(const RuleContext& ctx, const std::vector<int64_t>& splits) const {
  double used = 1;
  for (int64_t v : splits) used *= static_cast<double>(std::max<int64_t>(v, 1));
  return flops(ctx) / used;
}

double ShardingRule::flops(const RuleContext& ctx) const {
  double n = 0;
  for (const ir::TensorMeta& m : ctx.inputs) n += static_cast<double>(m.shape.numel());
  for (const ir::TensorMeta& m : ctx.outputs) n += static_cast<double>(m.shape.numel());
  return n;
}

// ---- the rules on the registry's entries ----

const ShardingRule* find_rule(const ir::OpDef& op) { return op.sharding_rule.get(); }

const ShardingRule& rule_of(const ir::OpDef& op) {
  CLEAVE_CHECK_ARG(op.sharding_rule != nullptr,
                   "{}: this primitive has no sharding rule{}, so it cannot be part of a "
                   "SEMI_AUTO_PARALLEL or AUTO_PARALLEL graph",
                   op.name, op.no_sharding_rule.empty() ? "" : " (" + op.no_sharding_rule + ")");
  return *op.sharding_rule;
}

std::vector<std::string> ops_with_rules() {
  std::vector<std::string> out;
  for (const ir::OpDef* op : ir::Registry::global().ops()) {
    if (op->sharding_rule != nullptr) out.push_back(op->name);
  }
  return out;
}

}  // namespace cleave::parallel
