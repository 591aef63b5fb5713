// The primitive registry: name -> OpDef (NOTE [One primitive, one registry entry] in
// cleave/ir/op_def.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cleave/ir/op_def.h"

namespace cleave::ir {

class Registry {
 public:
  // The process-wide registry holding every built-in primitive, with the parts the linked
  // higher layers attached while the program started.
  static Registry& global();

  // Adds an op; a second op of the same name, or one without infer, is a broken invariant. The
  // OpDef lives as long as the registry; the returned reference stays valid.
  const OpDef& add(OpDef def);
  // Runs `add_ops(*this)` and sets `family` on every op it adds (a broken invariant when it adds
  // none, or an op that names a family already).
  void add_family(const std::string& family, const std::function<void(Registry&)>& add_ops);
  // Throws Error listing known ops when `name` is not registered.
  const OpDef& get(std::string_view name) const;
  const OpDef* find(std::string_view name) const;
  // Every op, sorted by name.
  std::vector<const OpDef*> ops() const;
  std::vector<std::string> names() const;

  // ---- parts attached by higher layers (NOTE [One primitive, one registry entry]) ----
  // Each is called while the program starts (from a static initialiser of the layer that owns
  // the part) and aborts it, naming the op and the part, when the op is not registered or
  // already has that part. Not thread-safe: nothing may run ops meanwhile.
  void attach_cpu_kernel(std::string_view op, KernelFn kernel);
  void attach_async_kernel(std::string_view op, AsyncKernelFn kernel);
  void attach_sharding_rule(std::string_view op,
                            std::shared_ptr<const parallel::ShardingRule> rule);

 private:
  OpDef& entry(std::string_view op, std::string_view part);
  std::unordered_map<std::string, std::unique_ptr<OpDef>> ops_;
};

}  // namespace cleave::ir
