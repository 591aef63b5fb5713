#include "cleave/autodiff/graph_grad.h"

#include <map>

#include "cleave/ir/graph.h"
#include "cleave/ops/elementwise.h"

namespace cleave::autodiff {
namespace {

Tensor accumulate(const Tensor& acc, const Tensor& g) {
  return acc.defined() ? ops::add(acc, g) : g;
}

}  // namespace

std::vector<Tensor> graph_grad(const Tensor& loss, const std::vector<Tensor>& wrt, double seed) {
  ir::Tracer* tracer = ir::Tracer::current();
  CLEAVE_CHECK_ARG(tracer != nullptr, "graph_grad: no graph is being traced on this thread");
  CLEAVE_CHECK_ARG(loss.defined() && loss.is_symbolic(),
                   "graph_grad: the loss must be a traced tensor of the current graph");
  CLEAVE_CHECK_ARG(loss.numel() == 1,
                   "graph_grad: the loss has shape {} ({} elements); expected a one-element "
                   "tensor (reduce it first, e.g. ops::reduce_mean)",
                   loss.shape().to_string(), loss.numel());
  ir::Graph& g = tracer->graph();
  const ir::ValueRef loss_ref = tracer->value_of(loss);
  std::vector<ir::ValueRef> wrt_refs;
  for (const Tensor& t : wrt) wrt_refs.push_back(tracer->value_of(t));

  // needs[n][k]: output k of node n depends on a value of `wrt`.
  const int forward_end = loss_ref.node + 1;
  std::vector<std::vector<bool>> needs(forward_end);
  for (int i = 0; i < forward_end; ++i) {
    const ir::Node& n = g.nodes[i];
    needs[i].assign(n.outputs.size(), false);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      bool dep = false;
      for (const ir::ValueRef& w : wrt_refs)
        dep = dep || (w == ir::ValueRef{i, static_cast<int>(k)});
      if (n.is_op() && !n.op->mutates_inputs && is_floating(n.outputs[k].dtype)) {
        for (const ir::ValueRef& v : n.inputs) dep = dep || needs[v.node][v.output];
      }
      needs[i][k] = dep;
    }
  }

  // Gradients arriving at each value; a value of `wrt` keeps its sum (it is a leaf when it is a
  // parameter, and an interior value's gradient is read before its node passes it on).
  std::map<std::pair<int, int>, Tensor> grads;
  grads[{loss_ref.node, loss_ref.output}] = Tensor::full(loss.shape(), seed, loss.dtype());
  std::vector<Tensor> result(wrt.size());
  for (int i = forward_end - 1; i >= 0; --i) {
    const ir::Node node = g.nodes[i];  // a copy: the grad rule appends to g.nodes
    std::vector<Tensor> output_grads(node.outputs.size());
    bool any_grad = false;
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      auto it = grads.find({i, static_cast<int>(k)});
      if (it == grads.end()) continue;
      output_grads[k] = it->second;
      any_grad = true;
      for (size_t w = 0; w < wrt_refs.size(); ++w) {
        if (wrt_refs[w] == ir::ValueRef{i, static_cast<int>(k)}) result[w] = it->second;
      }
    }
    if (!any_grad || !node.is_op()) continue;
    std::vector<bool> needs_input(node.inputs.size());
    bool any_input = false;
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      needs_input[k] = needs[node.inputs[k].node][node.inputs[k].output];
      any_input = any_input || needs_input[k];
    }
    if (!any_input) continue;
    CLEAVE_CHECK_ARG(node.op->grad != nullptr,
                     "graph autodiff: primitive {} ('{}', scope {}) has no gradient, but a "
                     "gradient must flow through it to reach the parameters",
                     node.op->name, node.name, node.scope);
    std::vector<Tensor> inputs, outputs;
    for (const ir::ValueRef& v : node.inputs) inputs.push_back(tracer->symbolic(v));
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      outputs.push_back(tracer->symbolic({i, static_cast<int>(k)}));
    }
    const size_t first_new = g.nodes.size();
    const std::vector<Tensor> input_grads = node.op->grad(
        ir::GradContext{*node.op, node.attrs, inputs, outputs, output_grads, needs_input});
    // The backward ops of a forward op take its scope under "Gradients/" (as MindSpore names
    // them), its placement and an instance name derived from its own.
    for (size_t k = first_new; k < g.nodes.size(); ++k) {
      ir::Node& added = g.nodes[k];
      added.scope = "Gradients/" + node.scope;
      if (added.is_op()) added.name = node.name + ".grad." + ir::instance_stem(added.op->name);
      if (added.placement.empty()) added.placement = node.placement;
    }
    CLEAVE_ASSERT(input_grads.size() == node.inputs.size(),
                  "grad rule of {} returned {} gradients for {} inputs", node.op->name,
                  input_grads.size(), node.inputs.size());
    for (size_t k = 0; k < input_grads.size(); ++k) {
      if (!input_grads[k].defined() || !needs_input[k]) continue;
      Tensor& slot = grads[{node.inputs[k].node, node.inputs[k].output}];
      const size_t before_sum = g.nodes.size();
      slot = accumulate(slot, input_grads[k]);
      // A sum of gradient contributions runs where this contribution was computed (a placed
      // network then sums a shared parameter's gradients without a detour through worker 0).
      for (size_t a = before_sum; a < g.nodes.size(); ++a) {
        if (g.nodes[a].placement.empty()) g.nodes[a].placement = node.placement;
      }
    }
  }
  return result;
}

}  // namespace cleave::autodiff
