// The op slices a search may cost, and their keys (NOTE [Measured op slices] in
// cleave/parallel/search.h).
#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "cleave/core/error.h"
#include "cleave/parallel/search.h"
#include "parallel/search/candidates.h"

namespace cleave::parallel {

std::string op_slice_key(const ir::OpDef& op, const ir::Attrs& attrs,
                         std::span<const ir::TensorMeta> slices, uint64_t grads) {
  std::string inputs, mask;
  for (size_t k = 0; k < slices.size(); ++k) {
    inputs += fmt::format("{}{}{}", k == 0 ? "" : ", ", dtype_name(slices[k].dtype),
                          slices[k].shape.to_string());
    mask += (k < 64 && ((grads >> k) & 1) != 0) ? '1' : '0';
  }
  return fmt::format("{}{} ({}) grads {}", op.name, attrs.to_string(), inputs, mask);
}

std::vector<OpSlice> op_slices(const ir::Graph& global, const SearchOptions& options) {
  const std::vector<search_detail::OpBackward> backward =
      search_detail::op_backwards(global, options.training);
  std::vector<OpSlice> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < global.nodes.size(); ++i) {
    const ir::Node& n = global.nodes[i];
    if (!n.is_op()) continue;
    std::vector<ir::TensorMeta> metas;
    for (const ir::ValueRef& v : n.inputs) metas.push_back(global.meta(v));
    const RuleContext ctx{
        *n.op, n.attrs, metas, n.outputs, n.name, n.scope, options.step_parallel.device_num};
    const ShardingRule& rule = search_detail::searched_rule(ctx);
    if (rule.compute_class() == ShardingRule::ComputeClass::kMemory) continue;
    std::vector<OpSharding> shardings;
    if (!n.strategy.empty()) {
      shardings.push_back(infer_node(rule, ctx, n, n.strategy));
    } else {
      shardings = rule.shardings(ctx);
    }
    for (const OpSharding& s : shardings) {
      OpSlice slice{.op = n.op,
                    .attrs = n.attrs,
                    .inputs = search_detail::input_slices(ctx, s),
                    .grads = backward[i].grads};
      slice.key = op_slice_key(*n.op, n.attrs, slice.inputs, slice.grads);
      if (!seen.insert(slice.key).second) continue;
      slice.example = fmt::format("{} {}", n.name, ir::strategy_to_string(s.strategy));
      out.push_back(std::move(slice));
    }
  }
  return out;
}

}  // namespace cleave::parallel
