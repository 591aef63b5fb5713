// Attributes of an operator call: a small ordered map from name to value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "cleave/core/dtype.h"
#include "cleave/core/error.h"

namespace cleave::ir {

using AttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, DType>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) : items_(items) {}

  // Adds or replaces `name`.
  Attrs& set(std::string name, AttrValue value);
  bool has(std::string_view name) const { return find(name) != nullptr; }

  // The value of `name`; throws Error naming `op` when it is absent or of another type.
  template <typename T>
  const T& get(std::string_view name, std::string_view op = "op") const {
    const AttrValue* v = find(name);
    CLEAVE_CHECK_ARG(v != nullptr, "{}: attribute '{}' is missing", op, name);
    const T* typed = std::get_if<T>(v);
    CLEAVE_CHECK_ARG(typed != nullptr, "{}: attribute '{}' has the wrong type", op, name);
    return *typed;
  }
  template <typename T>
  T get_or(std::string_view name, T fallback) const {
    const AttrValue* v = find(name);
    if (v == nullptr) return fallback;
    const T* typed = std::get_if<T>(v);
    return typed ? *typed : fallback;
  }

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  // "{transpose_a: false, transpose_b: false}": the IR dump form.
  std::string to_string() const;

 private:
  const AttrValue* find(std::string_view name) const;
  std::vector<std::pair<std::string, AttrValue>> items_;
};

// One value in the IR dump form: true, 3, 0.5, 1.0 (a double always has a point or exponent),
// same (a string, bare), (1, 2), Float32.
std::string attr_to_string(const AttrValue& value);

}  // namespace cleave::ir
