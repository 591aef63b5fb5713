#include "cleave/optim/train_one_step.h"

#include <fmt/format.h>

#include <atomic>

#include "cleave/autodiff/backward.h"
#include "cleave/autodiff/graph_grad.h"
#include "cleave/comm/group_registry.h"
#include "cleave/core/shape.h"
#include "cleave/ir/graph.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/pipeline.h"
#include "cleave/runtime/placed_state.h"

namespace cleave::optim {
namespace {

std::string signature(const ir::TensorMeta& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), t.shape.to_string());
}
std::string signature(const Tensor& t) { return signature(ir::TensorMeta{t.shape(), t.dtype()}); }

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

TrainOneStep::TrainOneStep(nn::CellPtr net_with_loss, std::shared_ptr<Optimizer> optimizer)
    : net_(std::move(net_with_loss)), optimizer_(std::move(optimizer)) {
  CLEAVE_CHECK_ARG(net_ != nullptr,
                   "TrainOneStep: the network is null; expected a Cell that takes (data, label) "
                   "and returns the loss, e.g. std::make_shared<nn::WithLossCell>(net, loss_fn)");
  CLEAVE_CHECK_ARG(optimizer_ != nullptr,
                   "TrainOneStep: the optimizer is null; expected an Optimizer, e.g. "
                   "std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9)");
}

Tensor TrainOneStep::step_pynative(const Tensor& data, const Tensor& label) {
  Tensor loss = (*net_)(data, label);
  optimizer_->zero_grad();
  autodiff::backward(loss);
  optimizer_->step();
  return loss.detach();
}

runtime::StepProgram TrainOneStep::program(const ir::TensorMeta& data,
                                           const ir::TensorMeta& label) {
  net_->set_train(true);  // the contract in the header
  runtime::StepProgram program;
  program.name = "train_step";
  program.inputs = {{data, "data"}, {label, "label"}};
  for (const auto& [name, p] : net_->parameters_and_names())
    program.parameters.emplace_back(name, p);
  const std::vector<Tensor>& params = optimizer_->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    program.parameters.emplace_back(fmt::format("param{}", i), params[i]);  // once per tensor
  }
  program.forward = [this](const std::vector<Tensor>& in) {
    const Tensor loss = (*net_)(in[0], in[1]);
    CLEAVE_CHECK_ARG(loss.is_symbolic() && loss.numel() == 1,
                     "TrainOneStep: the network returned {} {}; expected a one-element loss "
                     "computed from its inputs",
                     dtype_name(loss.dtype()), loss.shape().to_string());
    return std::vector<Tensor>{loss};
  };
  program.wrt = params;
  // Optimizer state named "<state>.<parameter index>" is laid out like its parameter.
  program.wrt_like.resize(params.size());
  for (const auto& [name, t] : optimizer_->state()) {
    const size_t dot = name.rfind('.');
    const size_t i = dot == std::string::npos ? params.size() : std::stoul(name.substr(dot + 1));
    if (i < params.size()) program.wrt_like[i].push_back(t);
  }
  program.update = [this](const std::vector<Tensor>& grads) {
    const int64_t step_before = optimizer_->step_count();
    ir::ScopeGuard scope("optimizer", optimizer_->name());
    // Traced: one in-place update per parameter, reading the optimizer's lr_input() and its
    // per-step state (SGD's first-update flags, Adam's step counts) when the graph runs.
    optimizer_->apply(grads);
    CLEAVE_ASSERT(optimizer_->step_count() == step_before + 1, "apply counts one step");
  };
  return program;
}

Tensor TrainOneStep::operator()(const Tensor& data, const Tensor& label) {
  CLEAVE_CHECK_ARG(data.defined() && label.defined(),
                   "TrainOneStep: data and label must be defined tensors");
  net_->set_train(true);  // the contract in the header
  if (runtime::get_context().mode == runtime::PYNATIVE_MODE) {
    check_not_placed_in_pynative(*net_, "TrainOneStep");
    return step_pynative(data, label);
  }

  const Key key = cache_key(signature(data), signature(label));
  auto it = cache_.find(key);
  bool traced_now = false;
  if (it == cache_.end()) {
    it = cache_
             .emplace(key, runtime::compile_step(program({data.shape(), data.dtype()},
                                                         {label.shape(), label.dtype()})))
             .first;
    traced_now = true;
  }
  last_ = &it->second->executor();
  last_step_ = it->second.get();
  // Tracing ran apply(), which wrote this step's learning rate and counted the step; for a
  // cached graph both happen here.
  if (!traced_now) optimizer_->write_lr();
  std::vector<Tensor> out = last_step_->run({data, label});
  if (!traced_now) optimizer_->advance_step();
  return out.empty() ? Tensor() : out[0];
}

TrainOneStep::Key TrainOneStep::cache_key(std::string data, std::string label) const {
  const runtime::AutoParallelContext& apc = runtime::get_auto_parallel_context();
  return {std::move(data), std::move(label), net_->training(), apc.pipeline_micro_batches,
          static_cast<int>(apc.parallel_mode)};
}

void TrainOneStep::compile(const ir::TensorMeta& data, const ir::TensorMeta& label) {
  if (runtime::get_context().mode == runtime::PYNATIVE_MODE) return;
  net_->set_train(true);
  const Key key = cache_key(signature(data), signature(label));
  if (cache_.count(key) != 0) return;
  // Tracing counts a step (the update's apply()); no call ran one. The first call then finds the
  // graph cached and writes the learning rate and counts its step, as every cached call does.
  const int64_t steps = optimizer_->step_count();
  cache_.emplace(key, runtime::compile_step(program(data, label)));
  optimizer_->set_step_count(steps);
}

std::vector<bool> TrainOneStep::inputs_read() const {
  if (last_step_ == nullptr) return {true, true};
  return last_step_->inputs_read();
}

Forward::Forward(nn::CellPtr net) : net_(std::move(net)) {
  CLEAVE_CHECK_ARG(net_ != nullptr, "Forward: the network is null; expected a Cell");
}

Tensor Forward::operator()(const Tensor& x) {
  if (runtime::get_context().mode == runtime::PYNATIVE_MODE) {
    check_not_placed_in_pynative(*net_, "Forward");
    NoGradGuard no_grad;
    return (*net_)(x);
  }
  const std::tuple<std::string, bool, int> key{
      signature(x), net_->training(),
      static_cast<int>(runtime::get_auto_parallel_context().parallel_mode)};
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    it = cache_.emplace(key, runtime::compile_step(program({x.shape(), x.dtype()}))).first;
  }
  std::vector<Tensor> out = it->second->run({x});
  return out.empty() ? Tensor() : out[0];
}

runtime::StepProgram Forward::program(const ir::TensorMeta& x) {
  runtime::StepProgram program;
  program.name = "forward";
  program.inputs = {{x, "x"}};
  for (const auto& [name, p] : net_->parameters_and_names()) {
    program.parameters.emplace_back(name, p);
  }
  program.forward = [this](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{(*net_)(in[0])};
  };
  return program;
}

void TrainOneStep::share_placed_state(const std::vector<Tensor>& tensors) const {
  if (placed()) runtime::share_placed_state(*last_, tensors);
}

}  // namespace cleave::optim
