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
  out_strategy_.clear();
  in_layouts_.clear();
  out_layouts_.clear();
  return *this;
}

Primitive& Primitive::shard(Strategy in_strategy, Strategy out_strategy) {
  shard(std::move(in_strategy));
  CLEAVE_CHECK_ARG(!out_strategy.empty(),
                   "{}: out_strategy is empty; give one entry per output of the op, or use "
                   "shard(in_strategy) alone",
                   op_->name);
  for (size_t i = 0; i < out_strategy.size(); ++i) {
    for (int64_t v : out_strategy[i]) {
      CLEAVE_CHECK_ARG(v >= 1, "{}: out_strategy {} splits output {} into {} slices; expected >= 1",
                       op_->name, strategy_to_string(out_strategy), i, v);
    }
  }
  out_strategy_ = std::move(out_strategy);
  return *this;
}

Primitive& Primitive::shard(std::vector<TensorLayout> in_layouts,
                            std::vector<TensorLayout> out_layouts) {
  CLEAVE_CHECK_ARG(!in_layouts.empty(), "{}: shard got no layout; give one per input", op_->name);
  for (const std::vector<TensorLayout>* layouts : {&in_layouts, &out_layouts}) {
    for (const TensorLayout& l : *layouts) {
      CLEAVE_CHECK_ARG(
          l.device_matrix == in_layouts[0].device_matrix && l.alias == in_layouts[0].alias,
          "{}: the layouts of one shard() are on different device matrices ({} and {}); "
          "expected every input and output laid out on one Layout",
          op_->name, in_layouts[0].to_string(), l.to_string());
    }
  }
  Strategy splits;
  for (const TensorLayout& l : in_layouts) splits.push_back(l.splits());
  shard(std::move(splits));
  in_layouts_ = std::move(in_layouts);
  out_layouts_ = std::move(out_layouts);
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
    // Eagerly (and in a standalone process) a strategy has no effect.
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
  AnnotationGuard annotate(placement_, {strategy_, out_strategy_, in_layouts_, out_layouts_},
                           name_);
  std::vector<Tensor> out = call(*op_, std::move(inputs), attrs_);
  const size_t n_out = !out_layouts_.empty() ? out_layouts_.size() : out_strategy_.size();
  if (n_out > 0) {
    CLEAVE_CHECK_ARG(n_out == out.size(),
                     "{}: out_strategy has {} entr{} but the op has {} output{}; expected one "
                     "entry per output",
                     op_->name, n_out, n_out == 1 ? "y" : "ies", out.size(),
                     out.size() == 1 ? "" : "s");
    for (size_t i = 0; i < out.size(); ++i) {
      const size_t dims =
          !out_layouts_.empty() ? out_layouts_[i].map.size() : out_strategy_[i].size();
      CLEAVE_CHECK_ARG(static_cast<int64_t>(dims) == out[i].rank(),
                       "{}: out_strategy gives output {} {} dimension{} but the output has "
                       "shape {}; expected one split per dimension",
                       op_->name, i, dims, dims == 1 ? "" : "s", out[i].shape().to_string());
    }
  }
  return out;
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
