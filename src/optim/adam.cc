// Adam and AdamW: one Adam primitive call per parameter.
#include <cmath>

#include "cleave/core/error.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ir/registry.h"
#include "cleave/optim/optimizer.h"

namespace cleave::optim {

Adam::Adam(std::vector<Tensor> params, LearningRate lr, AdamOptions options)
    : Adam("Adam", std::move(params), std::move(lr), options, /*decoupled=*/false) {}

Adam::Adam(std::string name, std::vector<Tensor> params, LearningRate lr, AdamOptions options,
           bool decoupled)
    : Optimizer(std::move(name), std::move(params), std::move(lr), options.weight_decay),
      options_(options),
      decoupled_(decoupled) {
  CLEAVE_CHECK_ARG(options.beta1 >= 0 && options.beta1 < 1,
                   "{}: beta1 is {}; expected 0 <= beta1 < 1", this->name(), options.beta1);
  CLEAVE_CHECK_ARG(options.beta2 >= 0 && options.beta2 < 1,
                   "{}: beta2 is {}; expected 0 <= beta2 < 1", this->name(), options.beta2);
  CLEAVE_CHECK_ARG(std::isfinite(options.eps) && options.eps > 0, "{}: eps is {}; expected eps > 0",
                   this->name(), options.eps);
  for (const Tensor& p : parameters()) {
    m_.push_back(Tensor::zeros(p.shape(), p.dtype()));
    v_.push_back(Tensor::zeros(p.shape(), p.dtype()));
    steps_.push_back(Tensor::zeros({1}, p.dtype()));
  }
}

std::vector<std::pair<std::string, Tensor>> Adam::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < m_.size(); ++i) out.emplace_back("moment1." + std::to_string(i), m_[i]);
  for (size_t i = 0; i < v_.size(); ++i) out.emplace_back("moment2." + std::to_string(i), v_[i]);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Adam::counters() const {
  std::vector<int64_t> steps;
  for (const Tensor& s : steps_) steps.push_back(static_cast<int64_t>(s.item()));
  return {{"param_steps", Tensor::from_vector(steps)}};
}

void Adam::load_counters(const std::vector<std::pair<std::string, Tensor>>& counters) {
  for (const auto& [name, t] : counters) {
    if (name != "param_steps") continue;
    const std::vector<int64_t> steps = t.to_vector<int64_t>();
    for (size_t i = 0; i < steps_.size(); ++i) {
      steps_[i].fill(i < steps.size() ? static_cast<double>(steps[i]) : 0.0);
    }
  }
}

void Adam::update(size_t i, const Tensor& grad, const Tensor& lr) {
  static const ir::OpDef& op = ir::Registry::global().get("Adam");
  // lr and the step count are inputs (the kernel increments steps_[i]), so a compiled step
  // computes this step's bias correction.
  ir::call(op, {parameters()[i], m_[i], v_[i], grad, lr, steps_[i]},
           {{"beta1", options_.beta1},
            {"beta2", options_.beta2},
            {"eps", options_.eps},
            {"weight_decay", weight_decay_},
            {"decoupled", decoupled_}});
}

AdamW::AdamW(std::vector<Tensor> params, LearningRate lr, AdamOptions options)
    : Adam("AdamW", std::move(params), std::move(lr), options, /*decoupled=*/true) {}

}  // namespace cleave::optim
