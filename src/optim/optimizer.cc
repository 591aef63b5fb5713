// The Optimizer base: parameter bookkeeping, gradient checks and the step counter.
#include "cleave/optim/optimizer.h"

#include <cmath>

#include "cleave/core/error.h"
#include "cleave/ir/graph.h"

namespace cleave::optim {

Optimizer::Optimizer(std::string name, std::vector<Tensor> params, LearningRate lr,
                     double weight_decay)
    : weight_decay_(weight_decay),
      name_(std::move(name)),
      params_(std::move(params)),
      lr_(std::move(lr)),
      lr_input_(Tensor::zeros({1}, DType::kFloat64)) {
  CLEAVE_CHECK_ARG(!params_.empty(),
                   "{}: no parameters given; expected at least one (e.g. "
                   "net->trainable_params())",
                   name_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    CLEAVE_CHECK_ARG(p.defined(), "{}: parameter {} is an undefined Tensor", name_, i);
    CLEAVE_CHECK_ARG(is_floating(p.dtype()),
                     "{}: parameter {} has dtype {}; expected Float32 or Float64", name_, i,
                     dtype_name(p.dtype()));
    for (size_t j = 0; j < i; ++j) {
      CLEAVE_CHECK_ARG(params_[j].impl() != p.impl(),
                       "{}: parameter {} is the same tensor as parameter {}; each parameter "
                       "must be given once",
                       name_, i, j);
    }
  }
  CLEAVE_CHECK_ARG(std::isfinite(weight_decay) && weight_decay >= 0,
                   "{}: weight_decay is {}; expected a finite value >= 0", name_, weight_decay);
}

void Optimizer::step() {
  std::vector<Tensor> grads;
  grads.reserve(params_.size());
  for (const Tensor& p : params_) grads.push_back(p.grad());
  apply(grads);
}

void Optimizer::apply(const std::vector<Tensor>& grads) {
  CLEAVE_CHECK_ARG(grads.size() == params_.size(),
                   "{}: {} gradients given for {} parameters; expected one per parameter, in "
                   "order (an undefined Tensor skips a parameter)",
                   name_, grads.size(), params_.size());
  // Every gradient is checked before any parameter changes, so a bad call updates nothing.
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor &g = grads[i], &p = params_[i];
    if (!g.defined()) continue;
    // While a step is traced, a parameter is what its graph node says: a sharded step traces
    // one rank's slice of a parameter that holds its whole value until the step is loaded.
    ir::TensorMeta meta{p.shape(), p.dtype()};
    if (ir::Tracer* tracer = ir::Tracer::current(); tracer != nullptr && g.is_symbolic()) {
      meta = tracer->graph().meta(tracer->value_of(p));
    }
    CLEAVE_CHECK_ARG(g.shape() == meta.shape && g.dtype() == meta.dtype,
                     "{}: gradient {} is {} {} but parameter {} is {} {}; they must match", name_,
                     i, dtype_name(g.dtype()), g.shape().to_string(), i, dtype_name(meta.dtype),
                     meta.shape.to_string());
  }
  write_lr();
  NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) update(i, grads[i].detach(), lr_input_);
  }
  ++step_;
}

void Optimizer::write_lr() const { lr_input_.data<double>()[0] = lr_.at(step_); }

void Optimizer::set_step_count(int64_t step) {
  CLEAVE_CHECK_ARG(step >= 0, "{}: step count {} is negative; expected >= 0", name_, step);
  step_ = step;
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace cleave::optim
