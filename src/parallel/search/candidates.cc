// The candidates both searches share (candidates.h).
#include "parallel/search/candidates.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <numeric>
#include <thread>

#include "cleave/core/error.h"
#include "parallel/planned_dtype.h"

namespace cleave::parallel::search_detail {

int64_t devices_used(const OpSharding& s) {
  if (!s.loop_splits.empty()) {
    return std::accumulate(s.loop_splits.begin(), s.loop_splits.end(), int64_t{1},
                           std::multiplies<>());
  }
  int64_t most = 1;
  auto count = [&](const Layout& l) {
    int64_t n = 1;
    for (int64_t d = 0; d < l.tensor_rank(); ++d) n *= l.splits(d);
    for (int a : l.partial()) n *= l.device_matrix()[static_cast<size_t>(a)];
    most = std::max(most, n);
  };
  for (const Layout& l : s.inputs) count(l);
  for (const Layout& l : s.outputs) count(l);
  return most;
}

bool refines(const ir::Strategy& fine, const ir::Strategy& coarse) {
  if (fine.size() != coarse.size()) return false;
  for (size_t k = 0; k < fine.size(); ++k) {
    if (fine[k].size() != coarse[k].size()) return false;
    for (size_t d = 0; d < fine[k].size(); ++d) {
      if (coarse[k][d] <= 0 || fine[k][d] % coarse[k][d] != 0) return false;
    }
  }
  return true;
}

bool slice_aligned(const RuleContext& ctx, const OpSharding& s, const SearchOptions& o) {
  if (!o.tensor_slice_align_enable) return true;
  if (ctx.op.name != "MatMul" && ctx.op.name != "BatchMatMul") return true;
  for (size_t k = 0; k < s.inputs.size() && k < ctx.inputs.size(); ++k) {
    const Shape& shape = ctx.inputs[k].shape;
    for (int64_t d = std::max<int64_t>(0, shape.rank() - 2); d < shape.rank(); ++d) {
      const int64_t split = s.inputs[k].splits(d);
      if (split > 1 && (shape[d] / split) % o.tensor_slice_align_size != 0) return false;
    }
  }
  return true;
}

std::vector<size_t> filter_candidates(const RuleContext& ctx,
                                      const std::vector<OpSharding>& shardings,
                                      const std::vector<double>& costs,
                                      const std::vector<double>& memory, const SearchOptions& o,
                                      bool full_use) {
  std::vector<size_t> keep;
  for (size_t c = 0; c < shardings.size(); ++c) {
    if (slice_aligned(ctx, shardings[c], o)) keep.push_back(c);
  }
  // The replicated strategy (shardings' first) splits nothing, so it is always aligned; a rule
  // without it keeps everything rather than nothing.
  if (keep.empty()) {
    keep.resize(shardings.size());
    std::iota(keep.begin(), keep.end(), size_t{0});
  }
  if (full_use) {
    int64_t most = 1;
    for (size_t c : keep) most = std::max(most, devices_used(shardings[c]));
    std::erase_if(keep, [&](size_t c) { return devices_used(shardings[c]) != most; });
  }
  if (o.enable_algo_approxi && keep.size() > 1) {
    std::vector<size_t> order = keep;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return costs[a] < costs[b]; });
    std::vector<size_t> kept;
    for (size_t c : order) {
      const bool close = std::any_of(kept.begin(), kept.end(), [&](size_t k) {
        return costs[c] <= (1 + o.algo_approxi_epsilon) * costs[k] && memory[k] <= memory[c];
      });
      if (!close) kept.push_back(c);
    }
    std::sort(kept.begin(), kept.end());
    keep = std::move(kept);
  }
  return keep;
}

void check_search_options(const SearchOptions& o) {
  CLEAVE_CHECK_ARG(std::isfinite(o.algo_approxi_epsilon) && o.algo_approxi_epsilon > 0,
                   "search: algo_approxi_epsilon is {}; expected a finite value > 0 (MindSpore's "
                   "default: 0.1)",
                   o.algo_approxi_epsilon);
  CLEAVE_CHECK_ARG(o.tensor_slice_align_size >= 1 && o.tensor_slice_align_size <= 1024,
                   "search: tensor_slice_align_size is {}; expected an element count in [1, 1024] "
                   "(MindSpore's default: 16)",
                   o.tensor_slice_align_size);
  const int level = static_cast<int>(o.objective);
  CLEAVE_CHECK_ARG(level >= 0 && level <= 2,
                   "search: the objective (level) is {}; expected 0 (computation over "
                   "communication), 1 (memory) or 2 (speed)",
                   level);
}

const ShardingRule& searched_rule(const RuleContext& ctx) {
  const ShardingRule* rule = find_rule(ctx.op);
  CLEAVE_CHECK_ARG(rule != nullptr,
                   "{}: this primitive has no sharding rule{}, so the strategy search cannot "
                   "cost it in an AUTO_PARALLEL graph; give it a rule (docs/design/"
                   "adding_an_operator.md) or run it outside the parallel step",
                   describe_op(ctx),
                   ctx.op.no_sharding_rule.empty() ? "" : " (" + ctx.op.no_sharding_rule + ")");
  return *rule;
}

bool is_elementwise(const ir::OpDef& op) {
  const ShardingRule* rule = find_rule(op);
  return rule != nullptr && rule->summary().starts_with("elementwise");
}

bool trainable(const ir::Node& n) { return !n.value.defined() || n.value.requires_grad(); }

std::vector<OpBackward> op_backwards(const ir::Graph& g, bool training) {
  std::vector<OpBackward> out(g.nodes.size());
  if (!training) return out;
  // NOTE [Backward of an op]: whether each node's outputs need a gradient (one flag per node: an
  // op with a gradient rule gives every output one or none).
  std::vector<char> needs(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    switch (n.kind) {
      case ir::NodeKind::kParameter:
        needs[i] = trainable(n);
        break;
      case ir::NodeKind::kInput:
      case ir::NodeKind::kConstant:
        break;
      case ir::NodeKind::kOp: {
        int operands = 0, first_two = 0;
        uint64_t grads = 0;
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          const auto from = static_cast<size_t>(n.inputs[k].node);
          CLEAVE_ASSERT(from < i, "{} reads node {}, which comes after it", n.name, from);
          if (!needs[from]) continue;
          ++operands;
          if (k < 2) ++first_two;
          if (k < 64) grads |= uint64_t{1} << k;
        }
        const bool backward = operands > 0 && static_cast<bool>(n.op->grad);
        const ShardingRule* rule = find_rule(*n.op);
        const auto cls =
            rule != nullptr ? rule->compute_class() : ShardingRule::ComputeClass::kMemory;
        if (!backward) {
          out[i] = {};
        } else if (cls == ShardingRule::ComputeClass::kMemory) {
          out[i] = {3.0, grads};
        } else {
          out[i] = {1.0 + first_two, grads};
        }
        needs[i] = backward;
        break;
      }
    }
  }
  return out;
}

std::vector<ir::TensorMeta> input_slices(const RuleContext& ctx, const OpSharding& s) {
  std::vector<ir::TensorMeta> slices;
  for (size_t k = 0; k < ctx.inputs.size() && k < s.inputs.size(); ++k) {
    slices.push_back({s.inputs[k].slice_shape(ctx.inputs[k].shape), ctx.inputs[k].dtype});
  }
  return slices;
}

StepOpCost step_op_cost(const CostModel& model, const RuleContext& ctx, const OpSharding& s,
                        const OpBackward& b) {
  StepOpCost out{.cost = model.op_cost(ctx, s), .factor = b.factor};
  if (!model.has_measured_ops()) return out;
  const ShardingRule* rule = find_rule(ctx.op);
  if (rule == nullptr || rule->compute_class() == ShardingRule::ComputeClass::kMemory) return out;
  if (const std::optional<double> t =
          model.measured_s(op_slice_key(ctx.op, ctx.attrs, input_slices(ctx, s), b.grads))) {
    out.cost.compute_s = *t;
    out.factor = 1;
    out.measured = true;
  }
  return out;
}

double update_s(const CostModel& model, double slice_bytes) {
  return model.compute_s(ShardingRule::ComputeClass::kMemory, 0, kUpdateTraffic * slice_bytes);
}

double mirror_cost(const CostModel& model, const SearchOptions& o, const ir::TensorMeta& meta,
                   const Layout& l, bool trainable) {
  if (!o.training || !trainable) return 0;
  const double slice = static_cast<double>(l.slice_shape(meta.shape).numel() *
                                           dtype_size(planned_dtype(meta.dtype)));
  const double update = update_s(model, slice);
  if (l.replicas() <= 1) return update;
  const double n = static_cast<double>(l.replicas());
  return update + Factors(o).beta * model.collective_s(Collective::kAllReduce,
                                                       2 * slice * (n - 1) / n, l.replicas());
}

void parallel_for(size_t count, size_t threads, size_t chunk,
                  const std::function<void(size_t)>& body) {
  chunk = std::max<size_t>(chunk, 1);
  const size_t cores = std::max<size_t>(std::thread::hardware_concurrency(), 1);
  threads = std::clamp<size_t>(std::min(threads, cores), 1,
                               std::max<size_t>((count + chunk - 1) / chunk, 1));
  std::vector<std::exception_ptr> errors(count);
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (;;) {
      const size_t begin = next.fetch_add(chunk);
      if (begin >= count) return;
      for (size_t i = begin; i < std::min(count, begin + chunk); ++i) {
        try {
          body(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace cleave::parallel::search_detail
