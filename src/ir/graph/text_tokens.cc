// The tokens of the IR text (src/ir/graph/text_tokens.h).
#include "ir/graph/text_tokens.h"

#include <fmt/format.h>

#include <string>

#include "cleave/core/error.h"

namespace cleave::ir::text {
DType parse_dtype(Cursor& in) {
  in.skip_space();
  const size_t begin = in.position();
  const std::string name = in.until(",]>)}");
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool}) {
    if (dtype_name(d) == name) return d;
  }
  in.rewind(begin);
  in.fail("a dtype (Float32, Float64, Int32, Int64 or Bool)");
}

// "(2, 4)", "(1)", "()".
std::vector<int64_t> parse_int_tuple(Cursor& in) {
  std::vector<int64_t> out;
  in.expect("(");
  if (in.accept(")")) return out;
  do {
    out.push_back(in.integer());
  } while (in.accept(","));
  in.expect(")");
  return out;
}

// "<Tensor[Float32], (2, 4)>"
TensorMeta parse_meta(Cursor& in) {
  in.expect("<Tensor[");
  TensorMeta m;
  m.dtype = parse_dtype(in);
  in.expect("],");
  m.shape = Shape(parse_int_tuple(in));
  in.expect(">");
  return m;
}

// "(<...>, <...>)" or "()".
std::vector<TensorMeta> parse_metas(Cursor& in) {
  std::vector<TensorMeta> out;
  in.expect("(");
  if (in.accept(")")) return out;
  do {
    out.push_back(parse_meta(in));
  } while (in.accept(","));
  in.expect(")");
  return out;
}

bool is_number(const std::string& s, bool* is_double) {
  if (s.empty()) return false;
  size_t used = 0;
  try {
    if (s.find_first_of(".eEn") != std::string::npos) {
      if (s.find_first_not_of("0123456789+-.eEinfa") != std::string::npos) return false;
      (void)std::stod(s, &used);
      *is_double = true;
    } else {
      (void)std::stoll(s, &used);
      *is_double = false;
    }
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size();
}

namespace {

AttrValue parse_attr_value(Cursor& in) {
  if (in.peek('(')) return parse_int_tuple(in);
  const std::string token = in.until(",}");
  if (token.empty()) in.fail("an attribute value");
  if (token == "true" || token == "false") return token == "true";
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool}) {
    if (dtype_name(d) == token) return d;
  }
  bool is_double = false;
  if (is_number(token, &is_double)) {
    if (is_double) return std::stod(token);
    return static_cast<int64_t>(std::stoll(token));
  }
  return token;
}

}  // namespace

// "{key: value, ...}"
Attrs parse_attrs(Cursor& in) {
  Attrs attrs;
  in.expect("{");
  if (in.accept("}")) return attrs;
  do {
    const std::string key = in.until(":,}");
    if (key.empty()) in.fail("an attribute name");
    in.expect(":");
    attrs.set(key, parse_attr_value(in));
  } while (in.accept(","));
  in.expect("}");
  return attrs;
}

Strategy parse_strategy_at(Cursor& in) {
  Strategy s;
  in.expect("(");
  if (in.accept(")")) return s;
  do {
    s.push_back(parse_int_tuple(in));
  } while (in.accept(","));
  in.expect(")");
  return s;
}

namespace {

std::vector<std::string> parse_names(Cursor& in) {
  std::vector<std::string> out;
  in.expect("(");
  if (in.accept(")")) return out;
  do {
    in.skip_space();
    std::string name = in.until(",)");
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (name.empty()) in.fail("a name");
    out.push_back(std::move(name));
  } while (in.accept(","));
  in.expect(")");
  return out;
}

}  // namespace

TensorLayout parse_layout_at(Cursor& in) {
  in.expect("layout(dev=");
  std::vector<int64_t> dev = parse_int_tuple(in);
  in.expect(", alias=");
  std::vector<std::string> alias = parse_names(in);
  in.expect(", map=(");
  std::vector<std::vector<std::string>> map;
  if (!in.accept(")")) {
    do {
      if (in.peek('(')) {
        map.push_back(parse_names(in));
      } else {
        in.skip_space();
        std::string name = in.until(",)");
        while (!name.empty() && name.back() == ' ') name.pop_back();
        if (name.empty()) in.fail("an axis name, a tuple of them, or None");
        map.push_back({std::move(name)});
      }
    } while (in.accept(","));
    in.expect(")");
  }
  in.expect(")");
  const size_t at = in.position();
  try {
    return TensorLayout(std::move(dev), std::move(alias), std::move(map));
  } catch (const Error& e) {
    in.rewind(at);
    in.fail_here(e.what());
  }
}

std::vector<TensorLayout> parse_layouts_at(Cursor& in) {
  std::vector<TensorLayout> out;
  in.expect("(");
  if (in.accept(")")) return out;
  do {
    out.push_back(parse_layout_at(in));
  } while (in.accept(","));
  in.expect(")");
  return out;
}

Tensor constant_tensor(const TensorMeta& m, const std::vector<double>& values, Cursor& in) {
  Tensor t;
  try {
    t = Tensor::zeros(m.shape, m.dtype);  // a shape too large for memory is an Error
  } catch (const Error& e) {
    in.fail_here(e.what());
  }
  if (values.empty()) return t;
  const int64_t n = m.shape.numel();
  if (values.size() != 1 && static_cast<int64_t>(values.size()) != n) {
    in.fail_here(
        fmt::format("the constant has {} elements but {} values are given", n, values.size()));
  }
  for (int64_t i = 0; i < n; ++i) {
    const double v = values.size() == 1 ? values[0] : values[static_cast<size_t>(i)];
    switch (m.dtype) {
      case DType::kFloat32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kFloat64:
        t.data<double>()[i] = v;
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kInt64:
        t.data<int64_t>()[i] = static_cast<int64_t>(v);
        break;
      case DType::kBool:
        t.data<bool>()[i] = v != 0;
        break;
    }
  }
  return t;
}

}  // namespace cleave::ir::text
