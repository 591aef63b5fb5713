#include "cleave/ir/registry.h"

#include <algorithm>

#include "cleave/core/error.h"
#include "ops/register.h"

namespace cleave::ir {
namespace {

// NOTE [Parts absent on purpose] in cleave/ir/op_def.h: until the CUDA backend has operator
// kernels, no entry has one and each says so. TODO(#30): remove once the first kernel lands, so
// that every entry without one must say why.
constexpr const char* kViewHasNoKernel =
    "none, because its output is a view of input 0 (OpDef::output_is_view): no kernel runs";
constexpr const char* kNoCudaKernelYet =
    "none, because cleave's CUDA backend has no operator kernels yet (issue #30): CUDA tensors "
    "can be made and copied, but ops run on the CPU";

}  // namespace

Registry& Registry::global() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_ops(*r);
    return r;
  }();
  return *registry;
}

const OpDef& Registry::add(OpDef def) {
  CLEAVE_ASSERT(!def.name.empty() && ops_.count(def.name) == 0, "op '{}' registered twice",
                def.name);
  CLEAVE_ASSERT(def.infer != nullptr, "op '{}' has no infer", def.name);
  if (def.output_is_view) {
    CLEAVE_ASSERT(def.cpu_kernel == nullptr && def.cuda_kernel == nullptr,
                  "view op '{}' has a kernel, which never runs", def.name);
    def.no_cpu_kernel = def.no_cuda_kernel = kViewHasNoKernel;
  }
  if (def.cuda_kernel == nullptr && def.no_cuda_kernel.empty()) {
    def.no_cuda_kernel = kNoCudaKernelYet;
  }
  auto owned = std::make_unique<OpDef>(std::move(def));
  const OpDef& ref = *owned;
  ops_.emplace(ref.name, std::move(owned));
  return ref;
}

void Registry::add_family(const std::string& family,
                          const std::function<void(Registry&)>& add_ops) {
  const size_t before = ops_.size();
  add_ops(*this);
  CLEAVE_ASSERT(ops_.size() > before, "op family '{}' added no op", family);
  for (auto& [name, op] : ops_) {
    if (!op->family.empty()) continue;
    op->family = family;
  }
}

OpDef& Registry::entry(std::string_view op, std::string_view part) {
  auto it = ops_.find(std::string(op));
  CLEAVE_ASSERT(it != ops_.end(), "a {} was attached to op '{}', which is not registered", part,
                op);
  return *it->second;
}

void Registry::attach_cpu_kernel(std::string_view op, KernelFn kernel) {
  OpDef& def = entry(op, "CPU kernel");
  CLEAVE_ASSERT(def.cpu_kernel == nullptr && kernel != nullptr,
                "op '{}': a CPU kernel attached twice (or an empty one)", op);
  def.cpu_kernel = std::move(kernel);
  def.no_cpu_kernel.clear();
}

void Registry::attach_async_kernel(std::string_view op, AsyncKernelFn kernel) {
  OpDef& def = entry(op, "asynchronous kernel");
  CLEAVE_ASSERT(def.async_kernel == nullptr && kernel != nullptr,
                "op '{}': an asynchronous kernel attached twice (or an empty one)", op);
  def.async_kernel = std::move(kernel);
}

void Registry::attach_sharding_rule(std::string_view op,
                                    std::shared_ptr<const parallel::ShardingRule> rule) {
  OpDef& def = entry(op, "sharding rule");
  CLEAVE_ASSERT(def.sharding_rule == nullptr && rule != nullptr,
                "op '{}': a sharding rule attached twice (or a null one)", op);
  def.sharding_rule = std::move(rule);
  def.no_sharding_rule.clear();
}

const OpDef* Registry::find(std::string_view name) const {
  auto it = ops_.find(std::string(name));
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpDef& Registry::get(std::string_view name) const {
  const OpDef* op = find(name);
  CLEAVE_CHECK_ARG(op != nullptr, "unknown primitive '{}'; registered primitives are: {}", name,
                   fmt::join(names(), ", "));
  return *op;
}

std::vector<const OpDef*> Registry::ops() const {
  std::vector<const OpDef*> out;
  for (const auto& [name, op] : ops_) out.push_back(op.get());
  std::sort(out.begin(), out.end(),
            [](const OpDef* a, const OpDef* b) { return a->name < b->name; });
  return out;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, op] : ops_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cleave::ir
