#include "cleave/ir/dispatch.h"

#include <atomic>

#include "cleave/ir/grad_node.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/registry.h"

namespace cleave::ir {
namespace {

std::atomic<uint64_t> g_next_sequence{0};

void check_arity(const OpDef& op, const std::vector<Tensor>& inputs) {
  if (op.num_inputs == OpDef::kVariadic) {
    CLEAVE_CHECK_ARG(!inputs.empty(), "{}: no inputs given; expected at least one", op.name);
  } else {
    CLEAVE_CHECK_ARG(static_cast<int>(inputs.size()) == op.num_inputs,
                     "{}: {} inputs given; expected {}", op.name, inputs.size(), op.num_inputs);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    CLEAVE_CHECK_ARG(inputs[i].defined(), "{}: input {} is an undefined Tensor", op.name, i);
    CLEAVE_CHECK_ARG(inputs[i].device().is_cpu(),
                     "{}: input {} is on {}; this op runs on CPU tensors only", op.name, i,
                     inputs[i].device().to_string());
  }
}

// Records the call on its outputs so that backward can reach the inputs (NOTE [Tensor layout]:
// saved tensors are detached views, so no reference cycle forms through grad_fn).
void record(const OpDef& op, const Attrs& attrs, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs) {
  auto node = std::make_shared<GradNode>();
  node->op = &op;
  node->attrs = attrs;
  node->sequence = g_next_sequence.fetch_add(1);
  node->inputs.reserve(inputs.size());
  node->next.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    node->inputs.push_back(in.detach());
    TensorImpl* impl = in.impl();
    if (impl->grad_fn) {
      node->next[i].node = impl->grad_fn;
      node->next[i].output_index = impl->output_index;
    } else if (impl->requires_grad) {
      node->next[i].leaf = in.impl_ptr();
    }
  }
  node->outputs.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    node->outputs.push_back(outputs[i].detach());
    TensorImpl* impl = outputs[i].impl();
    if (!is_floating(impl->dtype)) continue;
    impl->grad_fn = node;
    impl->output_index = static_cast<int>(i);
    impl->requires_grad = true;
  }
}

}  // namespace

std::vector<TensorMeta> infer(const OpDef& op, const std::vector<TensorMeta>& inputs,
                              const Attrs& attrs) {
  return op.infer(InferContext{op, attrs, inputs});
}

std::vector<Tensor> call(const OpDef& op, std::vector<Tensor> inputs, const Attrs& attrs) {
  check_arity(op, inputs);
  if (Tracer* tracer = Tracer::current()) return tracer->record(op, inputs, attrs);
  std::vector<TensorMeta> in_metas;
  in_metas.reserve(inputs.size());
  for (const Tensor& t : inputs) in_metas.push_back({t.shape(), t.dtype()});
  const std::vector<TensorMeta> out_metas = op.infer(InferContext{op, attrs, in_metas});

  std::vector<Tensor> outputs;
  outputs.reserve(out_metas.size());
  if (op.output_is_view) {
    CLEAVE_ASSERT(out_metas.size() == 1 && out_metas[0].dtype == inputs[0].dtype(),
                  "view op '{}' must have one output of input 0's dtype", op.name);
    outputs.push_back(inputs[0].view(out_metas[0].shape));
  } else {
    for (const TensorMeta& m : out_metas) outputs.push_back(Tensor::empty(m.shape, m.dtype));
    CLEAVE_CHECK_ARG(op.cpu_kernel != nullptr, "{}: this program has no CPU kernel for it: {}",
                     op.name, op.no_cpu_kernel.empty() ? "none registered" : op.no_cpu_kernel);
    op.cpu_kernel(KernelContext{op, attrs, inputs, outputs});
  }

  if (!op.mutates_inputs && grad_mode_enabled()) {
    bool any = false;
    for (const Tensor& t : inputs) any = any || t.requires_grad();
    if (any) record(op, attrs, inputs, outputs);
  }
  return outputs;
}

Tensor call1(const OpDef& op, std::vector<Tensor> inputs, const Attrs& attrs) {
  std::vector<Tensor> out = call(op, std::move(inputs), attrs);
  CLEAVE_ASSERT(out.size() == 1, "op '{}' returned {} outputs; call1 expects one", op.name,
                out.size());
  return out[0];
}

std::vector<Tensor> call(std::string_view name, std::vector<Tensor> inputs, const Attrs& attrs) {
  return call(Registry::global().get(name), std::move(inputs), attrs);
}

}  // namespace cleave::ir
