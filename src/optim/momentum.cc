// Momentum and SGD: one ApplyMomentum / SGD primitive call per parameter.
#include <cmath>

#include "cleave/core/error.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ir/registry.h"
#include "cleave/optim/optimizer.h"

namespace cleave::optim {
namespace {

std::vector<Tensor> zeros_like_each(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const Tensor& p : params) out.push_back(Tensor::zeros(p.shape(), p.dtype()));
  return out;
}

std::vector<std::pair<std::string, Tensor>> named(const std::string& prefix,
                                                  const std::vector<Tensor>& tensors) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < tensors.size(); ++i)
    out.emplace_back(prefix + std::to_string(i), tensors[i]);
  return out;
}

}  // namespace

// ---- Momentum ----

Momentum::Momentum(std::vector<Tensor> params, LearningRate lr, double momentum,
                   double weight_decay, bool use_nesterov)
    : Optimizer("Momentum", std::move(params), std::move(lr), weight_decay),
      momentum_(momentum),
      nesterov_(use_nesterov) {
  CLEAVE_CHECK_ARG(std::isfinite(momentum) && momentum >= 0,
                   "Momentum: momentum is {}; expected a finite value >= 0", momentum);
  accum_ = zeros_like_each(parameters());
}

std::vector<std::pair<std::string, Tensor>> Momentum::state() const {
  return named("moments.", accum_);
}

void Momentum::update(size_t i, const Tensor& grad, const Tensor& lr) {
  static const ir::OpDef& op = ir::Registry::global().get("ApplyMomentum");
  ir::call(op, {parameters()[i], accum_[i], grad, lr},
           {{"momentum", momentum_}, {"use_nesterov", nesterov_}, {"weight_decay", weight_decay_}});
}

// ---- SGD ----

SGD::SGD(std::vector<Tensor> params, LearningRate lr, SGDOptions options)
    : Optimizer("SGD", std::move(params), std::move(lr), options.weight_decay), options_(options) {
  CLEAVE_CHECK_ARG(std::isfinite(options.momentum) && options.momentum >= 0,
                   "SGD: momentum is {}; expected a finite value >= 0", options.momentum);
  CLEAVE_CHECK_ARG(std::isfinite(options.dampening) && options.dampening >= 0,
                   "SGD: dampening is {}; expected a finite value >= 0", options.dampening);
  CLEAVE_CHECK_ARG(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
                   "SGD: nesterov needs momentum > 0 and dampening 0; got momentum {} and "
                   "dampening {}",
                   options.momentum, options.dampening);
  accum_ = zeros_like_each(parameters());
  for (const Tensor& p : parameters()) stat_.push_back(Tensor::ones({1}, p.dtype()));
}

std::vector<std::pair<std::string, Tensor>> SGD::state() const { return named("accum.", accum_); }

std::vector<std::pair<std::string, Tensor>> SGD::counters() const {
  std::vector<int64_t> started;
  for (const Tensor& s : stat_) started.push_back(s.item() == 0 ? 1 : 0);
  return {{"accum_started", Tensor::from_vector(started)}};
}

void SGD::load_counters(const std::vector<std::pair<std::string, Tensor>>& counters) {
  for (const auto& [name, t] : counters) {
    if (name != "accum_started") continue;
    const std::vector<int64_t> started = t.to_vector<int64_t>();
    for (size_t i = 0; i < stat_.size() && i < started.size(); ++i) {
      stat_[i].fill(started[i] != 0 ? 0.0 : 1.0);
    }
  }
}

void SGD::update(size_t i, const Tensor& grad, const Tensor& lr) {
  static const ir::OpDef& op = ir::Registry::global().get("SGD");
  // stat 1 marks the first update of this parameter (the accumulation starts as the gradient);
  // the kernel clears it, so a compiled step reads and writes the same flag.
  ir::call(op, {parameters()[i], grad, accum_[i], stat_[i], lr},
           {{"momentum", options_.momentum},
            {"dampening", options_.dampening},
            {"weight_decay", weight_decay_},
            {"nesterov", options_.nesterov}});
}

}  // namespace cleave::optim
