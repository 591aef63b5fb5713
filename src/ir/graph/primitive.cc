#include "cleave/ir/primitive.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "cleave/ir/dispatch.h"
#include "cleave/ir/registry.h"

namespace cleave::ir {
Primitive::Primitive(const std::string& op_name, Attrs attrs)
    : op_(&Registry::global().get(op_name)), attrs_(std::move(attrs)) {}

Primitive& Primitive::shard(Strategy in_strategy) {
  const std::string text = strategy_to_string(in_strategy);
  CLEAVE_CHECK_ARG(op_->num_inputs == OpDef::kVariadic ||
                       static_cast<int>(in_strategy.size()) == op_->num_inputs,
                   "{}: strategy {} has {} entr{}; expected one per input ({})", op_->name, text,
                   in_strategy.size(), in_strategy.size() == 1 ? "y" : "ies", op_->num_inputs);
  for (size_t i = 0; i < in_strategy.size(); ++i) {
    for (int64_t v : in_strategy[i]) {
      CLEAVE_CHECK_ARG(v >= 1, "{}: strategy {} splits input {} into {} slices; expected >= 1",
                       op_->name, text, i, v);
    }
  }
  strategy_ = std::move(in_strategy);
  return *this;
}

Primitive& Primitive::place(const std::string& role, int64_t rank_id) {
  CLEAVE_CHECK_ARG(role == "MS_WORKER",
                   "{}: place: role is '{}'; only workers run graph ops (the scheduler runs "
                   "none): use \"MS_WORKER\"",
                   op_->name, role);
  CLEAVE_CHECK_ARG(rank_id >= 0, "{}: place: rank_id is {}; expected a worker rank >= 0", op_->name,
                   rank_id);
  placement_ = {role, rank_id};
  return *this;
}

std::vector<Tensor> Primitive::operator()(std::vector<Tensor> inputs) const {
  if (!tracing() || (strategy_.empty() && placement_.empty() && name_.empty())) {
    return call(*op_, std::move(inputs), attrs_);
  }
  if (!strategy_.empty()) {
    CLEAVE_CHECK_ARG(strategy_.size() == inputs.size(),
                     "{}: strategy {} has {} entr{} but the op was called with {} input{}; "
                     "expected one entry per input",
                     op_->name, strategy_to_string(strategy_), strategy_.size(),
                     strategy_.size() == 1 ? "y" : "ies", inputs.size(),
                     inputs.size() == 1 ? "" : "s");
    for (size_t i = 0; i < inputs.size(); ++i) {
      CLEAVE_CHECK_ARG(static_cast<int64_t>(strategy_[i].size()) == inputs[i].rank(),
                       "{}: strategy {} gives input {} {} split{} but the input has shape {} "
                       "(rank {}); expected one split per dimension",
                       op_->name, strategy_to_string(strategy_), i, strategy_[i].size(),
                       strategy_[i].size() == 1 ? "" : "s", inputs[i].shape().to_string(),
                       inputs[i].rank());
    }
  }
  AnnotationGuard annotate(placement_, strategy_, name_);
  return call(*op_, std::move(inputs), attrs_);
}

Primitive& Primitive::set_name(std::string name) {
  const bool identifier = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
  CLEAVE_CHECK_ARG(identifier,
                   "{}: set_name(\"{}\"): an instance name must be a non-empty identifier "
                   "(letters, digits, '_')",
                   op_->name, name);
  name_ = std::move(name);
  return *this;
}

Tensor Primitive::call1(std::vector<Tensor> inputs) const {
  std::vector<Tensor> out = (*this)(std::move(inputs));
  CLEAVE_CHECK_ARG(out.size() == 1, "{}: call1 used on an op with {} outputs", op_->name,
                   out.size());
  return out[0];
}

}  // namespace cleave::ir
