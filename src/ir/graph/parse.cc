// Reading the IR text form back (NOTE [IR text] in cleave/ir/parse.h).
#include "cleave/ir/parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "cleave/core/error.h"
#include "cleave/ir/passes.h"
#include "cleave/ir/registry.h"
#include "ir/graph/text_tokens.h"

namespace cleave::ir {
namespace {

using text::constant_tensor;
using text::Cursor;
using text::is_number;
using text::parse_attrs;
using text::parse_int_tuple;
using text::parse_layouts_at;
using text::parse_meta;
using text::parse_metas;
using text::parse_strategy_at;

// One node as written, before node indices are known.
struct Entry {
  int line = 0;
  Node node;
  int label = -1;                 // %K of an op, %constK of a constant; -1 for inputs, parameters
  std::vector<std::string> refs;  // the values an op reads, as written
  std::vector<TensorMeta> input_metas;
  std::vector<double> values;  // a constant's, when given
  std::string note;
  std::vector<std::string> op_notes;
  size_t num_outputs = 1;
};

// "%12" -> (12, 0); "%12[1]" -> (12, 1); anything else: the name itself.
struct Ref {
  std::string name;  // "%12", "%para3_w", "%const7"
  int output = 0;
};
// A number in the text ("12" of "%12[12]", "7" of "%const7"): digits only, at most 9 of them;
// nullopt for anything else (std::stoi would throw its own exception, or read "1x" as 1).
std::optional<int> small_index(std::string_view digits) {
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return std::stoi(std::string(digits));
}

// A reference whose "[...]" is not a small index stays a name, which then is not defined.
Ref split_ref(const std::string& text) {
  Ref r{text, 0};
  const size_t open = text.find('[');
  if (open != std::string::npos && text.back() == ']') {
    const std::optional<int> output =
        small_index(std::string_view(text).substr(open + 1, text.size() - open - 2));
    if (output) {
      r.name = text.substr(0, open);
      r.output = *output;
    }
  }
  return r;
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view source) : source_(source) {
    size_t begin = 0;
    while (begin <= text.size()) {
      const size_t end = std::min(text.find('\n', begin), text.size());
      lines_.push_back(text.substr(begin, end - begin));
      if (end == text.size()) break;
      begin = end + 1;
    }
  }

  ParsedGraph parse() {
    header();
    while (!done() && !starts("subgraph")) {
      if (current().empty()) {
        ++line_;
        continue;
      }
      value_line();
    }
    if (done()) cursor().fail("'subgraph @NAME(...) {'");
    {
      Cursor in = cursor();
      in.expect("subgraph");
      in.expect("@");
      in.until("(");
      in.until_last('{');
      in.expect("{");
      in.expect_end();
      ++line_;
    }
    while (!done() && starts("  %")) op_block();
    std::vector<std::string> returned;
    {
      Cursor in = cursor();
      in.expect("return(");
      if (!in.accept(")")) {
        do {
          returned.push_back(in.until(",)"));
        } while (in.accept(","));
        in.expect(")");
      }
      in.expect_end();
      ++line_;
      Cursor close = cursor();
      close.expect("}");
      close.expect_end();
    }
    return build(returned);
  }

 private:
  bool done() const { return line_ >= lines_.size(); }
  std::string_view current() const { return done() ? std::string_view() : lines_[line_]; }
  bool starts(std::string_view prefix) const {
    return current().substr(0, prefix.size()) == prefix;
  }
  Cursor cursor() const { return Cursor(current(), static_cast<int>(line_) + 1, source_); }

  void header() {
    Cursor in = cursor();
    in.expect("# IR entry: @");
    name_ = in.until(" ");
    if (name_.empty()) in.fail("the graph's name");
    in.expect_end();
    ++line_;
    while (starts("# Total ")) {
      Cursor total = cursor();
      total.expect("# Total ");
      const std::string what = total.until(":");
      total.expect(":");
      const int64_t n = total.integer();
      total.expect_end();
      if (what == "ops") total_ops_ = n;
      ++line_;
    }
  }

  // %para1_data: <Tensor[Float32], (2, 4)> : input
  void value_line() {
    Cursor in = cursor();
    Entry e;
    e.line = static_cast<int>(line_) + 1;
    in.expect("%");
    const std::string name = in.until(" ");
    if (name.empty() || name.back() != ':') in.fail("'%NAME: <Tensor[...]>'");
    const std::string value = "%" + name.substr(0, name.size() - 1);
    e.node.outputs = {parse_meta(in)};
    in.expect(":");
    const std::string kind = in.until(" =#");
    if (kind == "input" || kind == "parameter") {
      e.node.kind = kind == "input" ? NodeKind::kInput : NodeKind::kParameter;
      // %para<k>_<name>
      const size_t underscore = value.find('_');
      if (value.rfind("%para", 0) != 0 || underscore == std::string::npos) {
        in.fail_here(fmt::format("an {} must be named %para<k>_<name>, got '{}'", kind, value));
      }
      e.node.name = value.substr(underscore + 1);
      e.node.scope = "Default";
    } else if (kind == "constant") {
      e.node.kind = NodeKind::kConstant;
      const std::optional<int> label = value.rfind("%const", 0) == 0
                                           ? small_index(std::string_view(value).substr(6))
                                           : std::nullopt;
      if (!label) {
        in.fail_here(fmt::format("a constant must be named %const<K>, got '{}'", value));
      }
      e.label = *label;
      e.node.name = "const";
      e.node.literal = in.accept("(literal)");
      if (in.accept("=")) {
        if (in.accept("[")) {
          if (!in.accept("]")) {
            do {
              e.values.push_back(number(in));
            } while (in.accept(","));
            in.expect("]");
          }
        } else {
          e.values.push_back(number(in));
        }
      }
    } else {
      in.fail("input, parameter or constant");
    }
    if (in.accept("#")) {
      in.skip_space();
      e.note = std::string(in.rest());
    } else {
      in.expect_end();
    }
    define(value, entries_.size(), in);
    Cursor at = cursor();
    e.node.value = constant_tensor(e.node.outputs[0], e.values, at);
    entries_.push_back(std::move(e));
    ++line_;
  }

  double number(Cursor& in) {
    const std::string token = in.until(",]# ");
    bool is_double = false;
    if (!is_number(token, &is_double)) in.fail("a number");
    return std::stod(token);
  }

  void define(const std::string& name, size_t entry, Cursor& in) {
    if (!names_.emplace(name, entry).second) {
      in.fail_here(fmt::format("value {} is defined twice", name));
    }
  }

  //   %K(out) = OP(ARGS) {instance name: NAME} ...
  //       : (TYPES) -> (TYPES)
  //       # scope: (SCOPE)
  void op_block() {
    Entry e;
    e.line = static_cast<int>(line_) + 1;
    Cursor in = cursor();
    in.expect("%");
    const int64_t label = in.integer();
    if (label < 0 || label > std::numeric_limits<int>::max()) {
      in.fail_here(fmt::format("an op's number must be from 0 to {}, got %{}",
                               std::numeric_limits<int>::max(), label));
    }
    e.label = static_cast<int>(label);
    in.expect("(out)");
    in.expect("=");
    in.skip_space();
    const size_t op_at = in.position();
    const std::string op = in.until("(");
    const OpDef* def = Registry::global().find(op);
    if (def == nullptr) {
      in.rewind(op_at);
      in.fail_here(fmt::format("unknown primitive '{}'", op));
    }
    e.node.kind = NodeKind::kOp;
    e.node.op = def;
    in.expect("(");
    if (!in.accept(")")) {
      do {
        e.refs.push_back(in.until(",)"));
      } while (in.accept(","));
      in.expect(")");
    }
    in.expect("{instance name:");
    e.node.name = in.until("}");
    in.expect("}");
    if (in.accept("primitive_attrs:")) e.node.attrs = parse_attrs(in);
    bool side_effect = false;
    while (in.accept("{")) {
      if (in.accept("side_effect: true}")) {
        side_effect = true;
      } else if (in.accept("in_strategy:")) {
        e.node.strategy = parse_strategy_at(in);
        if (in.accept(",")) {
          in.expect("derived: true");
          e.node.strategy_derived = true;
        }
        in.expect("}");
      } else if (in.accept("in_layouts:")) {
        e.node.in_layouts = parse_layouts_at(in);
        in.expect("}");
      } else if (in.accept("out_strategy:")) {
        e.node.out_strategy = parse_strategy_at(in);
        in.expect("}");
      } else if (in.accept("out_layouts:")) {
        e.node.out_layouts = parse_layouts_at(in);
        in.expect("}");
      } else if (in.accept("placement: (role:")) {
        const std::string role = in.until(",");
        e.node.placement.role = role == "-" ? "" : role;
        in.expect(", rank:");
        e.node.placement.rank = in.integer();
        in.expect(")}");
      } else {
        in.fail("side_effect, in_strategy, in_layouts, out_strategy, out_layouts or placement");
      }
    }
    in.expect_end();
    (void)side_effect;  // printed from the primitive: nothing to keep
    if (!e.node.in_layouts.empty() && e.node.strategy.empty()) {
      // Named layouts alone: their splits are the strategy, as Primitive::shard sets it.
      for (const TensorLayout& l : e.node.in_layouts) e.node.strategy.push_back(l.splits());
    }
    ++line_;
    {
      Cursor types = cursor();
      types.expect(":");
      e.input_metas = parse_metas(types);
      types.expect("->");
      e.node.outputs = parse_metas(types);
      e.num_outputs = e.node.outputs.size();
      types.expect_end();
      ++line_;
    }
    {
      Cursor scope = cursor();
      scope.expect("# scope: (");
      e.node.scope = scope.until_last(')');
      scope.expect(")");
      scope.expect_end();
      ++line_;
    }
    while (!done() && starts("      # ")) {
      e.op_notes.emplace_back(current().substr(8));
      ++line_;
    }
    Cursor at(lines_[static_cast<size_t>(e.line - 1)], e.line, source_);
    define("%" + std::to_string(e.label), entries_.size(), at);
    entries_.push_back(std::move(e));
  }

  // Node indices (NOTE [IR text]): the text's numbers when they number every node once.
  std::vector<int> place() const {
    const size_t count = entries_.size();
    std::vector<int> index(count, -1);
    std::vector<bool> used(count, false);
    bool numbered = true;
    for (size_t k = 0; k < count && numbered; ++k) {
      const int label = entries_[k].label;
      if (label < 0) continue;
      numbered = label < static_cast<int>(count) && !used[static_cast<size_t>(label)];
      if (numbered) {
        used[static_cast<size_t>(label)] = true;
        index[k] = label;
      }
    }
    if (numbered) {
      size_t slot = 0;
      for (size_t k = 0; k < count; ++k) {
        if (index[k] >= 0) continue;
        while (used[slot]) ++slot;
        used[slot] = true;
        index[k] = static_cast<int>(slot);
      }
      return index;
    }
    int next = 0;  // non-op nodes first, then ops, in text order
    for (size_t k = 0; k < count; ++k) {
      if (!entries_[k].node.is_op()) index[k] = next++;
    }
    for (size_t k = 0; k < count; ++k) {
      if (entries_[k].node.is_op()) index[k] = next++;
    }
    return index;
  }

  ValueRef resolve(const std::string& text, const std::vector<int>& index, int user,
                   int line) const {
    const Ref r = split_ref(text);
    auto it = names_.find(r.name);
    Cursor at(lines_[static_cast<size_t>(line - 1)], line, source_);
    if (it == names_.end()) at.fail_here(fmt::format("value {} is not defined", text));
    const int node = index[it->second];
    if (user >= 0 && node >= user) {
      at.fail_here(fmt::format("value {} is used before it is defined", text));
    }
    const size_t outputs = entries_[it->second].num_outputs;
    if (r.output < 0 || r.output >= static_cast<int>(outputs)) {
      at.fail_here(fmt::format("{} has {} output{}", r.name, outputs, outputs == 1 ? "" : "s"));
    }
    return {node, r.output};
  }

  ParsedGraph build(const std::vector<std::string>& returned) {
    const std::vector<int> index = place();
    ParsedGraph out;
    Graph& g = out.graph;
    g.name = name_;
    g.nodes.resize(entries_.size());
    out.notes.assign(entries_.size(), "");
    std::vector<std::vector<ValueRef>> inputs(entries_.size());
    for (size_t k = 0; k < entries_.size(); ++k) {
      const Entry& e = entries_[k];
      for (const std::string& ref : e.refs)
        inputs[k].push_back(resolve(ref, index, index[k], e.line));
      if (e.input_metas.size() != inputs[k].size()) {
        Cursor line(lines_[static_cast<size_t>(e.line)], e.line + 1, source_);
        line.fail_here(fmt::format("{} input types are given for {} inputs", e.input_metas.size(),
                                   inputs[k].size()));
      }
    }
    int ops = 0;
    for (size_t k = 0; k < entries_.size(); ++k) {
      Entry& e = entries_[k];
      const int at = index[k];
      Node& n = g.nodes[static_cast<size_t>(at)];
      n = std::move(e.node);
      n.inputs = std::move(inputs[k]);
      std::string note = e.note;
      for (const std::string& line : e.op_notes) note += (note.empty() ? "" : "\n      # ") + line;
      out.notes[static_cast<size_t>(at)] = note;
      if (n.kind == NodeKind::kParameter) {
        n.value = Tensor::zeros(n.outputs[0].shape, n.outputs[0].dtype);
        // NOTE [IR text]: trainable, as far as the text can say.
        if (is_floating(n.value.dtype())) n.value.set_requires_grad(true);
      }
      if (n.is_op()) ++ops;
    }
    // Graph::inputs in text order (the argument order).
    for (size_t k = 0; k < entries_.size(); ++k) {
      if (g.nodes[static_cast<size_t>(index[k])].kind == NodeKind::kInput) {
        g.inputs.push_back(index[k]);
      }
    }
    const int return_line = static_cast<int>(line_);
    for (const std::string& r : returned) g.outputs.push_back(resolve(r, index, -1, return_line));
    if (total_ops_ >= 0 && total_ops_ != ops) {
      CLEAVE_FAIL("{}: the header says {} ops but the graph has {} (a truncated or edited dump?)",
                  source_, total_ops_, ops);
    }
    // The recorded input types against the values read.
    for (size_t k = 0; k < entries_.size(); ++k) {
      const Entry& e = entries_[k];
      const Node& n = g.nodes[static_cast<size_t>(index[k])];
      if (!n.is_op()) continue;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const TensorMeta& have = g.meta(n.inputs[i]);
        const TensorMeta& want = e.input_metas[i];
        if (have.shape != want.shape || have.dtype != want.dtype) {
          Cursor line(lines_[static_cast<size_t>(e.line)], e.line + 1, source_);
          line.fail_here(fmt::format("input {} of %{} is recorded as {} but {} is {}", i, e.label,
                                     meta_to_string(want), e.refs[i], meta_to_string(have)));
        }
      }
    }
    verify(g);
    return out;
  }

  std::string_view source_;
  std::vector<std::string_view> lines_;
  size_t line_ = 0;
  std::string name_;
  int64_t total_ops_ = -1;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> names_;
};

}  // namespace

ParsedGraph parse_text(std::string_view text, std::string_view source) {
  return Parser(text, source).parse();
}

ParsedGraph parse_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  CLEAVE_CHECK_ARG(in.good(), "cannot read IR dump '{}'", path.string());
  std::stringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  const std::string source = path.string();
  return parse_text(text, source);
}

Strategy parse_strategy(std::string_view text) {
  Cursor in(text, 1, "strategy");
  Strategy s = parse_strategy_at(in);
  in.expect_end();
  return s;
}

}  // namespace cleave::ir
