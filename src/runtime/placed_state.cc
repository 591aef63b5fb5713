// NOTE [Saving a placed network] in cleave/runtime/placed_state.h.
#include "cleave/runtime/placed_state.h"

#include <algorithm>
#include <unordered_set>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"
#include "cleave/core/error.h"

namespace cleave::runtime {

void share_placed_state(const Executor& step, const std::vector<Tensor>& tensors) {
  std::shared_ptr<comm::ProcessGroup> group = comm::get_group(comm::kWorldGroup);
  if (group == nullptr || group->size() == 1) return;
  // The bound tensors this worker's part writes.
  const ir::Graph& graph = step.graph();
  std::unordered_set<const void*> updated;
  for (const ir::Node& n : graph.nodes) {
    if (!n.is_op() || !n.op->mutates_inputs) continue;
    for (const ir::ValueRef& v : n.inputs) {
      const ir::Node& in = graph.nodes[v.node];
      if ((in.kind == ir::NodeKind::kParameter || in.kind == ir::NodeKind::kConstant) &&
          in.value.defined()) {
        updated.insert(in.value.raw_data());
      }
    }
  }
  const int64_t count = static_cast<int64_t>(tensors.size());
  for (int64_t i = 0; i < count; ++i) {
    CLEAVE_CHECK_ARG(tensors[i].defined() && tensors[i].device().is_cpu(),
                     "share_placed_state: tensor {} of {} must be a defined CPU tensor", i, count);
  }
  // Every worker must pass the same list: compare the counts first (max of count and -count).
  Tensor counts = Tensor::full({2}, 0.0, DType::kInt64);
  counts.data<int64_t>()[0] = count;
  counts.data<int64_t>()[1] = -count;
  group->all_reduce(counts, comm::ReduceOp::kMax);
  CLEAVE_CHECK_ARG(counts.data<int64_t>()[0] == count && -counts.data<int64_t>()[1] == count,
                   "share_placed_state on rank {}: this worker passes {} tensors, but the workers "
                   "pass between {} and {}; every worker must save the same training state",
                   group->rank(), count, -counts.data<int64_t>()[1], counts.data<int64_t>()[0]);
  Tensor owner = Tensor::full({std::max<int64_t>(count, 1)}, -1.0, DType::kInt64);
  for (int64_t i = 0; i < count; ++i) {
    const Tensor& t = tensors[i];
    if (t.numel() > 0 && updated.count(t.raw_data()) > 0) owner.data<int64_t>()[i] = group->rank();
  }
  group->all_reduce(owner, comm::ReduceOp::kMax);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t root = owner.data<int64_t>()[i];
    if (root >= 0) group->broadcast(tensors[i], static_cast<int>(root));
  }
}

}  // namespace cleave::runtime
