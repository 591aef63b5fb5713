// NOTE [Exact batch blocks] in cleave/parallel/batch_split.h.
#include "cleave/parallel/batch_split.h"

#include <fmt/format.h>

#include "cleave/core/error.h"
#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel {
namespace {

// What a value is to the blocks.
enum class Rows {
  kNone,  // computed without the inputs (parameters, constants and what only they feed)
  kRows,  // split into the blocks along dimension 0
  kMean,  // the mean of all the elements of a kRows value: the loss
};

}  // namespace

std::string batch_split_blocker(const ir::Graph& forward, int parts, double min_block_flops) {
  CLEAVE_CHECK_ARG(parts >= 2, "batch_split_blocker: {} parts; expected at least 2", parts);
  const ir::Graph& g = forward;
  double flops = 0;  // of the ops reading the batch, on one block
  std::vector<std::vector<Rows>> rows(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    rows[i].assign(g.nodes[i].outputs.size(), Rows::kNone);
  }
  for (int in : g.inputs) {
    const ir::Node& n = g.nodes[static_cast<size_t>(in)];
    if (n.outputs[0].shape.rank() == 0) {
      return fmt::format("input '{}' is a scalar: it has no rows to cut", n.name);
    }
    rows[static_cast<size_t>(in)][0] = Rows::kRows;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_op()) continue;
    bool batch = false;
    ir::Strategy strategy;
    for (const ir::ValueRef& v : n.inputs) {
      const Rows r = rows[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
      if (r == Rows::kMean) {
        return fmt::format("{} '{}' reads the loss; only the step may", n.op->name, n.name);
      }
      batch = batch || r == Rows::kRows;
      std::vector<int64_t> split(static_cast<size_t>(g.meta(v).shape.rank()), 1);
      if (r == Rows::kRows) split[0] = parts;
      strategy.push_back(std::move(split));
    }
    if (!batch) continue;
    const RuleContext ctx{*n.op, n.attrs, {}, n.outputs, n.name, n.scope, parts};
    const std::string op = describe_op(ctx);
    if (n.op->random) return op + ": it draws random numbers, which the blocks would draw apart";
    if (n.op->communicates || n.op->mutates_inputs) {
      return op + ": it communicates or writes its inputs";
    }
    if (n.op->name == "ReduceMean" && n.outputs[0].shape.numel() == 1 &&
        rows[static_cast<size_t>(n.inputs[0].node)][static_cast<size_t>(n.inputs[0].output)] ==
            Rows::kRows) {
      rows[i][0] = Rows::kMean;
      continue;
    }
    const ShardingRule* rule = find_rule(*n.op);
    if (rule == nullptr) return op + ": it has no sharding rule to say how its rows split";
    std::vector<ir::TensorMeta> metas;
    for (const ir::ValueRef& v : n.inputs) metas.push_back(g.meta(v));
    const RuleContext with_inputs{*n.op, n.attrs, metas, n.outputs, n.name, n.scope, parts};
    flops += rule->flops(with_inputs);
    OpSharding sharding;
    try {
      sharding = rule->infer(with_inputs, strategy);
    } catch (const Error& e) {
      return e.what();
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const Layout& out = sharding.outputs[k];
      bool blocks = !out.is_partial() && out.tensor_rank() >= 1 && out.splits(0) == parts;
      for (int64_t d = 1; blocks && d < out.tensor_rank(); ++d) blocks = out.splits(d) == 1;
      if (!blocks) {
        return fmt::format(
            "{}: output {} ({}) is not cut into the blocks of its inputs' rows (cut {} ways, it is "
            "{}): {}",
            op, k, n.outputs[k].shape.to_string(), parts, out.to_string(),
            out.is_partial() ? "a reduction over the blocks, where only a mean loss may be one"
                             : "computed from the whole batch");
      }
      rows[i][k] = Rows::kRows;
    }
  }
  if (flops < min_block_flops) {
    return fmt::format(
        "a block's forward is {:.3g} floating-point operations, under the {:.3g} that pay for "
        "handing the blocks to the threads",
        flops, min_block_flops);
  }
  if (g.outputs.empty()) return "the step returns nothing";
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const ir::ValueRef& v = g.outputs[k];
    if (rows[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)] != Rows::kMean) {
      const ir::Node& n = g.nodes[static_cast<size_t>(v.node)];
      return fmt::format(
          "output {} ('{}') is not a ReduceMean of all the elements of values computed row by row "
          "(a mean of the blocks' means equals the whole batch's only then)",
          k, n.name);
    }
  }
  return "";
}

}  // namespace cleave::parallel
