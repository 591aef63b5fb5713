#include "cleave/autodiff/backward.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "cleave/ir/grad_node.h"
#include "cleave/ops/elementwise.h"

namespace cleave::autodiff {
namespace {

// NOTE [Backward order]
// Every recorded node carries a creation sequence number; a node's inputs were produced by
// nodes created before it. Visiting the nodes reachable from the output in decreasing sequence
// therefore sees every consumer of a node before the node itself, so when a node is visited all
// gradient contributions to its outputs have arrived and are summed.

Tensor accumulate(const Tensor& acc, const Tensor& g) {
  return acc.defined() ? ops::add(acc, g) : g;
}

Tensor seed_gradient(const Tensor& output, const Tensor& grad_output, const char* what) {
  CLEAVE_CHECK_ARG(output.defined(), "{}: the output is an undefined Tensor", what);
  CLEAVE_CHECK_ARG(output.requires_grad(),
                   "{}: the output {} does not require a gradient: none of the tensors it was "
                   "computed from requires one (call set_requires_grad(true) on the inputs, and do "
                   "not compute it inside a NoGradGuard)",
                   what, output.shape().to_string());
  if (!grad_output.defined()) {
    CLEAVE_CHECK_ARG(output.numel() == 1,
                     "{}: the output has shape {} ({} elements); a gradient can only be implied "
                     "for a scalar output: reduce it first (e.g. ops::reduce_mean) or pass "
                     "grad_output of shape {}",
                     what, output.shape().to_string(), output.numel(), output.shape().to_string());
    return Tensor::ones(output.shape(), output.dtype());
  }
  CLEAVE_CHECK_ARG(grad_output.shape() == output.shape() && grad_output.dtype() == output.dtype(),
                   "{}: grad_output is {} {} but the output is {} {}; they must match", what,
                   dtype_name(grad_output.dtype()), grad_output.shape().to_string(),
                   dtype_name(output.dtype()), output.shape().to_string());
  return grad_output;
}

struct Sink {
  // Receives the gradient reaching a leaf.
  virtual void leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) = 0;
  // Receives the gradient reaching output `index` of `node` (before the node runs).
  virtual void node_output(const GradNode* node, int index, const Tensor& g) = 0;
  virtual ~Sink() = default;
};

void run_backward(const Tensor& output, const Tensor& seed, Sink& sink) {
  NoGradGuard no_grad;
  TensorImpl* out = output.impl();
  if (!out->grad_fn) {  // the output is itself a leaf
    sink.leaf(output.impl_ptr(), seed);
    return;
  }

  std::vector<GradNode*> order;
  std::unordered_set<GradNode*> seen;
  std::vector<GradNode*> stack{out->grad_fn.get()};
  seen.insert(out->grad_fn.get());
  while (!stack.empty()) {
    GradNode* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const GradEdge& e : n->next) {
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  std::sort(order.begin(), order.end(),
            [](const GradNode* a, const GradNode* b) { return a->sequence > b->sequence; });

  std::unordered_map<GradNode*, std::vector<Tensor>> pending;
  pending[out->grad_fn.get()].resize(out->grad_fn->outputs.size());
  pending[out->grad_fn.get()][out->output_index] = seed;

  for (GradNode* n : order) {
    auto it = pending.find(n);
    if (it == pending.end()) continue;
    std::vector<Tensor> output_grads = std::move(it->second);
    pending.erase(it);
    output_grads.resize(n->outputs.size());
    for (size_t i = 0; i < output_grads.size(); ++i) {
      if (output_grads[i].defined()) sink.node_output(n, static_cast<int>(i), output_grads[i]);
    }

    std::vector<bool> needs(n->next.size());
    bool any = false;
    for (size_t i = 0; i < needs.size(); ++i) {
      needs[i] = n->next[i].node != nullptr || n->next[i].leaf != nullptr;
      any = any || needs[i];
    }
    if (!any) continue;
    CLEAVE_CHECK_ARG(n->op->grad != nullptr,
                     "backward: primitive {} has no gradient, but a gradient must flow through it "
                     "to reach its inputs; compute it under NoGradGuard or detach() its inputs",
                     n->op->name);
    std::vector<Tensor> input_grads =
        n->op->grad(ir::GradContext{*n->op, n->attrs, n->inputs, n->outputs, output_grads, needs});
    CLEAVE_ASSERT(input_grads.size() == n->next.size(),
                  "grad rule of {} returned {} gradients for {} inputs", n->op->name,
                  input_grads.size(), n->next.size());
    for (size_t i = 0; i < input_grads.size(); ++i) {
      const Tensor& g = input_grads[i];
      const GradEdge& e = n->next[i];
      if (!g.defined() || !needs[i]) continue;
      CLEAVE_ASSERT(g.shape() == n->inputs[i].shape(),
                    "grad rule of {} gave input {} a gradient of shape {} for shape {}",
                    n->op->name, i, g.shape().to_string(), n->inputs[i].shape().to_string());
      if (e.leaf) {
        sink.leaf(e.leaf, g);
      } else {
        auto& slot = pending[e.node.get()];
        slot.resize(e.node->outputs.size());
        slot[e.output_index] = accumulate(slot[e.output_index], g);
      }
    }
  }
}

}  // namespace

void backward(const Tensor& output, const Tensor& grad_output) {
  const Tensor seed = seed_gradient(output, grad_output, "backward");
  struct AccumulateSink : Sink {
    void leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) override {
      if (!leaf->requires_grad) return;
      Tensor current(leaf->grad);
      if (current.defined()) {
        leaf->grad = ops::add(current, g).impl_ptr();
      } else if (g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1) {
        leaf->grad = g.impl_ptr();  // nothing else sees this buffer: keep it without a copy
      } else {
        // The grad rule returned a tensor that is also used elsewhere (e.g. Add passes dy on
        // to both inputs): copy, so that later accumulation cannot write through to it.
        leaf->grad = g.clone().impl_ptr();
      }
    }
    void node_output(const GradNode*, int, const Tensor&) override {}
  } sink;
  run_backward(output, seed, sink);
}

std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                         const Tensor& grad_output) {
  const Tensor seed = seed_gradient(output, grad_output, "grad");
  struct CollectSink : Sink {
    std::unordered_map<const TensorImpl*, Tensor> leaves;
    std::unordered_map<const GradNode*, std::vector<Tensor>> nodes;
    void leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) override {
      Tensor& slot = leaves[leaf.get()];
      slot = accumulate(slot, g);
    }
    void node_output(const GradNode* node, int index, const Tensor& g) override {
      auto& slots = nodes[node];
      slots.resize(node->outputs.size());
      slots[index] = g;
    }
  } sink;
  run_backward(output, seed, sink);

  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    CLEAVE_CHECK_ARG(in.defined(), "grad: an input is an undefined Tensor");
    Tensor g;
    TensorImpl* impl = in.impl();
    if (impl->grad_fn) {
      auto it = sink.nodes.find(impl->grad_fn.get());
      if (it != sink.nodes.end()) g = it->second[impl->output_index];
    } else {
      auto it = sink.leaves.find(impl);
      if (it != sink.leaves.end()) g = it->second;
    }
    out.push_back(g.defined() ? g : Tensor::zeros(in.shape(), in.dtype()));
  }
  return out;
}

}  // namespace cleave::autodiff
