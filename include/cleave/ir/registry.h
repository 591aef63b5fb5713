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
  std::vector<std::string> names() const;

 private:
  std::unordered_map<std::string, std::unique_ptr<OpDef>> ops_;
};

}  // namespace cleave::ir
