#include "cleave/ir/registry.h"

#include <algorithm>

#include "cleave/core/error.h"
#include "ops/register.h"

namespace cleave::ir {

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
  auto owned = std::make_unique<OpDef>(std::move(def));
  const OpDef& ref = *owned;
  ops_.emplace(ref.name, std::move(owned));
  return ref;
}

void Registry::bind_cpu_kernel(std::string_view name, KernelFn kernel) {
  auto it = ops_.find(std::string(name));
  CLEAVE_ASSERT(it != ops_.end(), "bind_cpu_kernel: op '{}' is not registered", name);
  it->second->cpu_kernel = std::move(kernel);
}

void Registry::bind_async_kernel(std::string_view name, AsyncKernelFn kernel) {
  auto it = ops_.find(std::string(name));
  CLEAVE_ASSERT(it != ops_.end(), "bind_async_kernel: op '{}' is not registered", name);
  it->second->async_kernel = std::move(kernel);
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

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, op] : ops_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cleave::ir
