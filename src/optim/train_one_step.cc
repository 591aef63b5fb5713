#include "cleave/optim/train_one_step.h"

#include <fmt/format.h>

#include <atomic>

#include "cleave/autodiff/backward.h"
#include "cleave/autodiff/graph_grad.h"
#include "cleave/comm/group_registry.h"
#include "cleave/core/shape.h"
#include "cleave/ir/graph.h"
#include "cleave/runtime/compile.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/placed_state.h"

namespace cleave::optim {
namespace {

std::string signature(const Tensor& t) {
  return fmt::format("{}{}", dtype_name(t.dtype()), t.shape().to_string());
}

std::atomic<int> g_graph_counter{0};

bool has_placed_cell(const nn::Cell& cell) {
  if (cell.placement_rank() >= 0) return true;
  for (const auto& [name, child] : cell.children()) {
    if (has_placed_cell(*child)) return true;
  }
  return false;
}

// The seed: "Distributed graph slicing does not support PyNative mode." Running a placed network
// eagerly in a job would train a full copy on every worker, silently not what was asked.
void check_not_placed_in_pynative(const nn::Cell& net, const char* what) {
  CLEAVE_CHECK_ARG(comm::world_size() <= 1 || !has_placed_cell(net),
                   "{}: the network has cells placed with Cell::place in a job of {} workers, but "
                   "the context is PYNATIVE_MODE; distributed graph partition needs GRAPH_MODE "
                   "(runtime::set_context({{.mode = runtime::GRAPH_MODE}}))",
                   what, comm::world_size());
}

}  // namespace

TrainOneStep::TrainOneStep(nn::Cell& net_with_loss, Optimizer& optimizer)
    : net_(net_with_loss), optimizer_(optimizer) {}

Tensor TrainOneStep::step_pynative(const Tensor& data, const Tensor& label) {
  Tensor loss = net_(data, label);
  optimizer_.zero_grad();
  autodiff::backward(loss);
  optimizer_.step();
  return loss.detach();
}

TrainOneStep::Compiled TrainOneStep::trace_and_compile(const Tensor& data, const Tensor& label) {
  Compiled compiled;
  ir::Graph graph;
  graph.name = fmt::format("train_step_{}", g_graph_counter++);
  // NOTE [Micro-batches] in cleave/parallel/partition.h: the step is traced for one micro-batch.
  const int micro_batches = runtime::get_auto_parallel_context().pipeline_micro_batches;
  Shape data_shape = data.shape(), label_shape = label.shape();
  if (micro_batches > 1) {
    for (const auto& [what, t] : {std::pair{"data", &data}, std::pair{"label", &label}}) {
      CLEAVE_CHECK_ARG(t->rank() >= 1 && t->shape()[0] % micro_batches == 0,
                       "TrainOneStep: {} has shape {}; with pipeline_micro_batches = {} its "
                       "batch dimension must be divisible by {} (set a batch size that is a "
                       "multiple of the micro-batch count)",
                       what, t->shape().to_string(), micro_batches, micro_batches);
    }
    data_shape[0] /= micro_batches;
    label_shape[0] /= micro_batches;
  }
  int step_begin = -1;
  {
    ir::Tracer tracer(graph);
    {
      const Tensor sym_data = tracer.add_input({data_shape, data.dtype()}, "data");
      const Tensor sym_label = tracer.add_input({label_shape, label.dtype()}, "label");
      for (const auto& [name, p] : net_.parameters_and_names()) tracer.add_parameter(p, name);
      const std::vector<Tensor>& params = optimizer_.parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        tracer.add_parameter(params[i], fmt::format("param{}", i));  // no-op when already bound
      }
      const Tensor loss = net_(sym_data, sym_label);
      CLEAVE_CHECK_ARG(loss.is_symbolic() && loss.numel() == 1,
                       "TrainOneStep: the network returned {} {}; expected a one-element loss "
                       "computed from its inputs",
                       dtype_name(loss.dtype()), loss.shape().to_string());
      graph.outputs = {tracer.value_of(loss)};
      runtime::dump_stage(graph, 1, "trace");
      const std::vector<Tensor> grads = autodiff::graph_grad(loss, params);
      runtime::dump_stage(graph, 5, "autodiff");
      step_begin = static_cast<int>(graph.nodes.size());
      {
        const int64_t step_before = optimizer_.step_count();
        ir::ScopeGuard scope("optimizer", optimizer_.name());
        // Traced: one in-place update per parameter, reading the optimizer's lr_input() and its
        // per-step state (SGD's first-update flags, Adam's step counts) when the graph runs.
        optimizer_.apply(grads);
        CLEAVE_ASSERT(optimizer_.step_count() == step_before + 1, "apply counts one step");
      }
      runtime::dump_stage(graph, 6, "optimizer");
    }
    tracer.finish();
  }
  compiled.micro_batches = micro_batches;
  compiled.executor = runtime::compile_distributed(
      std::move(graph), {.step_begin = step_begin, .micro_batches = micro_batches});
  return compiled;
}

Tensor TrainOneStep::operator()(const Tensor& data, const Tensor& label) {
  CLEAVE_CHECK_ARG(data.defined() && label.defined(),
                   "TrainOneStep: data and label must be defined tensors");
  if (runtime::get_context().mode == runtime::PYNATIVE_MODE) {
    check_not_placed_in_pynative(net_, "TrainOneStep");
    return step_pynative(data, label);
  }

  const Key key{signature(data), signature(label), net_.training(),
                runtime::get_auto_parallel_context().pipeline_micro_batches};
  auto it = cache_.find(key);
  bool traced_now = false;
  if (it == cache_.end()) {
    it = cache_.emplace(key, trace_and_compile(data, label)).first;
    traced_now = true;
  }
  last_ = it->second.executor.get();
  // Tracing ran apply(), which wrote this step's learning rate and counted the step; for a
  // cached graph both happen here.
  if (!traced_now) optimizer_.write_lr();
  std::vector<Tensor> inputs = {data, label};
  if (const int m = it->second.micro_batches; m > 1) {
    inputs.clear();
    const int64_t rows = data.shape()[0] / m, label_rows = label.shape()[0] / m;
    for (int k = 0; k < m; ++k) {
      inputs.push_back(data.narrow_rows(k * rows, rows));
      inputs.push_back(label.narrow_rows(k * label_rows, label_rows));
    }
  }
  std::vector<Tensor> out = last_->run(inputs);
  if (!traced_now) optimizer_.advance_step();
  return out.empty() ? Tensor() : out[0];
}

std::vector<bool> TrainOneStep::inputs_read() const {
  if (last_ == nullptr) return {true, true};
  // The graph's inputs are (data, label), or (data_0, label_0, data_1, label_1, ...) per
  // micro-batch.
  std::vector<bool> read(2, false);
  const std::vector<bool>& per_input = last_->inputs_read();
  for (size_t k = 0; k < per_input.size(); ++k) read[k % 2] = read[k % 2] || per_input[k];
  return read;
}

Forward::Forward(nn::Cell& net) : net_(net) {}

Tensor Forward::operator()(const Tensor& x) {
  if (runtime::get_context().mode == runtime::PYNATIVE_MODE) {
    check_not_placed_in_pynative(net_, "Forward");
    NoGradGuard no_grad;
    return net_(x);
  }
  const std::pair<std::string, bool> key{signature(x), net_.training()};
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    ir::Graph graph;
    graph.name = fmt::format("forward_{}", g_graph_counter++);
    {
      ir::Tracer tracer(graph);
      {
        const Tensor sym = tracer.add_input({x.shape(), x.dtype()}, "x");
        for (const auto& [name, p] : net_.parameters_and_names()) tracer.add_parameter(p, name);
        const Tensor y = net_(sym);
        graph.outputs = {tracer.value_of(y)};
        runtime::dump_stage(graph, 1, "trace");
      }
      tracer.finish();
    }
    it = cache_.emplace(key, runtime::compile_distributed(std::move(graph), {})).first;
  }
  std::vector<Tensor> out = it->second->run({x});
  return out.empty() ? Tensor() : out[0];
}

void TrainOneStep::share_placed_state(const std::vector<Tensor>& tensors) const {
  if (placed()) runtime::share_placed_state(*last_, tensors);
}

}  // namespace cleave::optim
