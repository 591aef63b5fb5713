#include "cleave/nn/cell.h"

#include <unordered_set>

#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cleave/ir/graph.h"

namespace cleave::nn {
namespace {

// The cells being called on this thread while a graph is traced, innermost last.
thread_local std::vector<const Cell*> t_call_stack;

struct CallScope {
  explicit CallScope(const Cell* cell) { t_call_stack.push_back(cell); }
  ~CallScope() { t_call_stack.pop_back(); }
};

Tensor single_output(runtime::ShardedBlock& block, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out = block(inputs);
  CLEAVE_CHECK_ARG(out.size() == 1, "shard '{}': the cell's block returned {} outputs; expected 1",
                   block.name(), out.size());
  return out[0];
}

// A block's cache key part for a cell: its training mode.
std::function<std::string()> training_signature(const Cell* cell) {
  return [cell] { return cell->training() ? std::string("train") : std::string("eval"); };
}

// Runs `cell` on one or two inputs, as its construct takes them.
runtime::BlockFn cell_block_fn(Cell* cell, size_t arity) {
  CLEAVE_CHECK_ARG(arity == 1 || arity == 2,
                   "shard '{}': in_strategy has {} entries, but a Cell's construct takes one or "
                   "two inputs; give one strategy (or std::nullopt) per input",
                   cell->cls_name(), arity);
  if (arity == 1) {
    return [cell](const std::vector<Tensor>& in) { return std::vector<Tensor>{(*cell)(in[0])}; };
  }
  return
      [cell](const std::vector<Tensor>& in) { return std::vector<Tensor>{(*cell)(in[0], in[1])}; };
}

}  // namespace

Cell& Cell::shard(runtime::InStrategy in_strategy, runtime::ShardOptions options) {
  // The block calls this cell's operator(), which runs construct while the block traces it; the
  // cell owns the block, so the function holds a plain pointer.
  runtime::BlockFn fn = cell_block_fn(this, in_strategy.size());
  shard_block_ = std::make_shared<runtime::ShardedBlock>(
      runtime::ShardedBlockSpec{.name = cls_name_,
                                .fn = std::move(fn),
                                .parameters = parameters_and_names(),
                                .parameter_prefix = registered_name_,
                                .in_strategy = std::move(in_strategy),
                                .options = std::move(options),
                                .signature = training_signature(this)});
  return *this;
}

std::string Cell::scope_name() const {
  if (t_call_stack.empty()) return "network";
  for (const auto& [name, child] : t_call_stack.back()->children()) {
    if (child.get() == this) return name;
  }
  return cls_name_;
}

Tensor Cell::operator()(const Tensor& x) {
  if (shard_block_ != nullptr && runtime::ShardedBlock::tracing() != shard_block_.get()) {
    return single_output(*shard_block_, {x});
  }
  if (!ir::tracing()) return construct(x);
  ir::ScopeGuard scope(scope_name(), cls_name_, {place_role_, place_rank_});
  CallScope call(this);
  return construct(x);
}

Tensor Cell::operator()(const Tensor& a, const Tensor& b) {
  if (shard_block_ != nullptr && runtime::ShardedBlock::tracing() != shard_block_.get()) {
    return single_output(*shard_block_, {a, b});
  }
  if (!ir::tracing()) return construct(a, b);
  ir::ScopeGuard scope(scope_name(), cls_name_, {place_role_, place_rank_});
  CallScope call(this);
  return construct(a, b);
}

Cell& Cell::place(const std::string& role, int64_t rank_id) {
  CLEAVE_CHECK_ARG(role == "MS_WORKER",
                   "{}: place: role is '{}'; only workers run graph ops (the scheduler runs "
                   "none): use \"MS_WORKER\"",
                   cls_name_, role);
  const int workers = comm::world_size();
  CLEAVE_CHECK_ARG(rank_id >= 0 && (workers <= 1 || rank_id < workers),
                   "{}: place: rank_id is {}; expected a worker rank in [0, {}) (MS_WORKER_NUM)",
                   cls_name_, rank_id,
                   workers <= 1 ? std::string("MS_WORKER_NUM") : std::to_string(workers));
  place_role_ = role;
  place_rank_ = rank_id;
  return *this;
}

Cell::Cell(std::string cls_name) : cls_name_(std::move(cls_name)) {}

Tensor Cell::construct(const Tensor& /*x*/) {
  CLEAVE_FAIL("{} takes 2 input(s); it was called with 1 (or it does not define construct)",
              cls_name_);
}

Tensor Cell::construct(const Tensor& /*a*/, const Tensor& /*b*/) {
  CLEAVE_FAIL("{} takes 1 input(s); it was called with 2 (or it does not define construct)",
              cls_name_);
}

void Cell::check_new_name(const std::string& name) const {
  CLEAVE_CHECK_ARG(!name.empty(), "{}: a parameter or child cell needs a non-empty name",
                   cls_name_);
  CLEAVE_CHECK_ARG(name.find('.') == std::string::npos,
                   "{}: name '{}' contains '.'; names are joined by '.' into paths, so they "
                   "cannot contain one",
                   cls_name_, name);
  for (const auto& [existing, value] : parameters_) {
    CLEAVE_CHECK_ARG(existing != name,
                     "{}: name '{}' is already used by parameter '{}' ({} {}); names of "
                     "parameters and child cells must be unique within a cell",
                     cls_name_, name, existing, dtype_name(value.dtype()),
                     value.shape().to_string());
  }
  for (const auto& [existing, child] : children_) {
    CLEAVE_CHECK_ARG(existing != name,
                     "{}: name '{}' is already used by child cell '{}' ({}); names of "
                     "parameters and child cells must be unique within a cell",
                     cls_name_, name, existing, child->cls_name());
  }
}

void Cell::add_child(const std::string& name, std::shared_ptr<Cell> cell) {
  CLEAVE_CHECK_ARG(cell != nullptr, "{}: child cell '{}' is null", cls_name_, name);
  CLEAVE_CHECK_ARG(cell.get() != this, "{}: a cell cannot be its own child ('{}')", cls_name_,
                   name);
  check_new_name(name);
  if (cell->registered_name_.empty()) cell->registered_name_ = name;
  children_.emplace_back(name, std::move(cell));
}

Tensor Cell::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  CLEAVE_CHECK_ARG(value.defined(), "{}: parameter '{}' is an undefined Tensor", cls_name_, name);
  CLEAVE_CHECK_ARG(is_floating(value.dtype()),
                   "{}: parameter '{}' has dtype {}; parameters must be Float32 or Float64",
                   cls_name_, name, dtype_name(value.dtype()));
  check_new_name(name);
  value.set_requires_grad(requires_grad);
  parameters_.emplace_back(name, value);
  return value;
}

// A parameter reachable along several paths (a child cell registered twice, for weight sharing)
// is listed once, under the first path, so that an optimizer updates it once.
std::vector<std::pair<std::string, Tensor>> Cell::parameters_and_names() const {
  std::vector<std::pair<std::string, Tensor>> out = parameters_;
  for (const auto& [child_name, child] : children_) {
    for (auto& [path, value] : child->parameters_and_names()) {
      out.emplace_back(child_name + "." + path, std::move(value));
    }
  }
  std::unordered_set<const TensorImpl*> seen;
  std::erase_if(out, [&](const auto& entry) { return !seen.insert(entry.second.impl()).second; });
  return out;
}

std::vector<Tensor> Cell::trainable_params() const {
  std::vector<Tensor> out;
  for (auto& [name, value] : parameters_and_names()) {
    if (value.requires_grad()) out.push_back(std::move(value));
  }
  return out;
}

std::vector<Tensor> Cell::get_parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, value] : parameters_and_names()) out.push_back(std::move(value));
  return out;
}

Cell& Cell::set_train(bool mode) {
  training_ = mode;
  for (const auto& [name, child] : children_) child->set_train(mode);
  return *this;
}

}  // namespace cleave::nn

namespace cleave {

ShardedFunction shard(const nn::CellPtr& cell, InStrategy in_strategy, ShardOptions options) {
  CLEAVE_CHECK_ARG(cell != nullptr, "shard: the cell is null; expected a Cell or a function");
  runtime::BlockFn inner = nn::cell_block_fn(cell.get(), in_strategy.size());
  // The function shares ownership of the cell (it outlives any caller's pointer).
  runtime::BlockFn fn = [cell, inner](const std::vector<Tensor>& in) { return inner(in); };
  return ShardedFunction(std::make_shared<runtime::ShardedBlock>(
      runtime::ShardedBlockSpec{.name = cell->cls_name(),
                                .fn = std::move(fn),
                                .parameters = cell->parameters_and_names(),
                                .parameter_prefix = cell->registered_name(),
                                .in_strategy = std::move(in_strategy),
                                .options = std::move(options),
                                .signature = nn::training_signature(cell.get())}));
}

}  // namespace cleave
