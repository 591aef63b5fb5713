// The primitive registry: name -> OpDef.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cleave/ir/op_def.h"

namespace cleave::ir {

class Registry {
 public:
  // The process-wide registry holding every built-in primitive.
  static Registry& global();

  // Adds an op; a second op of the same name is a broken invariant. The OpDef lives as long as
  // the registry; the returned reference stays valid.
  const OpDef& add(OpDef def);
  // Throws Error listing known ops when `name` is not registered.
  const OpDef& get(std::string_view name) const;
  const OpDef* find(std::string_view name) const;
  // Sets the CPU kernel of the registered op `name` (a broken invariant when it is unknown): how
  // a higher layer binds the kernels of primitives defined here (the runtime binds the
  // communication primitives of cleave/ir/comm_ops.h). Call before the op runs; not thread-safe
  // against concurrent runs of that op.
  void bind_cpu_kernel(std::string_view name, KernelFn kernel);
  // The same for OpDef::async_kernel.
  void bind_async_kernel(std::string_view name, AsyncKernelFn kernel);
  std::vector<std::string> names() const;

 private:
  std::unordered_map<std::string, std::unique_ptr<OpDef>> ops_;
};

}  // namespace cleave::ir
