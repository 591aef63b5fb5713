#include "cleave/ir/attrs.h"

#include <fmt/format.h>

namespace cleave::ir {

Attrs& Attrs::set(std::string name, AttrValue value) {
  for (auto& [key, v] : items_) {
    if (key == name) {
      v = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(std::move(name), std::move(value));
  return *this;
}

const AttrValue* Attrs::find(std::string_view name) const {
  for (const auto& [key, v] : items_) {
    if (key == name) return &v;
  }
  return nullptr;
}

std::string attr_to_string(const AttrValue& value) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    // Always with a point or an exponent ("0.0", not "0"), so the text of a double attribute
    // reads back as a double (ir::parse_text).
    std::string operator()(double d) const {
      std::string text = fmt::format("{}", d);
      if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
      return text;
    }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::vector<int64_t>& v) const {
      return fmt::format("({})", fmt::join(v, ", "));
    }
    std::string operator()(DType d) const { return std::string(dtype_name(d)); }
  };
  return std::visit(Visitor{}, value);
}

std::string Attrs::to_string() const {
  std::string out = "{";
  for (size_t i = 0; i < items_.size(); ++i) {
    if (i) out += ", ";
    out += items_[i].first + ": " + attr_to_string(items_[i].second);
  }
  return out + "}";
}

}  // namespace cleave::ir
