// The tokens of the IR text (NOTE [IR text] in cleave/ir/parse.h): a cursor over one line and
// the readers of its pieces (metas, attributes, strategies), shared by ir::parse_text. Internal to
// the ir layer.
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/attrs.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/op_def.h"

namespace cleave::ir::text {

// A cursor over one line: each expect_* consumes a token or throws Error naming the source, line,
// column, what was expected and what is there.
class Cursor {
 public:
  Cursor(std::string_view line, int line_no, std::string_view source)
      : line_(line), line_no_(line_no), source_(source) {}

  [[noreturn]] void fail(const std::string& expected) const {
    const std::string_view rest = line_.substr(pos_, 24);
    CLEAVE_FAIL("{}:{}:{}: expected {}, got {}", source_, line_no_, pos_ + 1, expected,
                rest.empty() ? std::string("the end of the line") : fmt::format("'{}'", rest));
  }
  [[noreturn]] void fail_here(const std::string& what) const {
    CLEAVE_FAIL("{}:{}:{}: {}", source_, line_no_, pos_ + 1, what);
  }
  size_t position() const { return pos_; }
  void rewind(size_t pos) { pos_ = pos; }
  void skip_space() {
    while (pos_ < line_.size() && line_[pos_] == ' ') ++pos_;
  }
  bool accept(std::string_view token) {
    skip_space();
    if (line_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  void expect(std::string_view token) {
    if (!accept(token)) fail(fmt::format("'{}'", token));
  }
  bool at_end() {
    skip_space();
    return pos_ == line_.size();
  }
  void expect_end() {
    if (!at_end()) fail("the end of the line");
  }
  bool peek(char c) {
    skip_space();
    return pos_ < line_.size() && line_[pos_] == c;
  }
  int64_t integer() {
    skip_space();
    const size_t begin = pos_;
    if (pos_ < line_.size() && line_[pos_] == '-') ++pos_;
    while (pos_ < line_.size() && std::isdigit(static_cast<unsigned char>(line_[pos_]))) ++pos_;
    const std::string digits(line_.substr(begin, pos_ - begin));
    // from_chars, not stoll: a value beyond int64 is this parser's error, not std::out_of_range.
    int64_t value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) {
      pos_ = begin;
      fail("an integer from -9223372036854775808 to 9223372036854775807");
    }
    return value;
  }
  // The text up to (not including) the first character of `stops`, or to the end.
  std::string until(std::string_view stops) {
    skip_space();
    const size_t end = std::min(line_.find_first_of(stops, pos_), line_.size());
    std::string out(line_.substr(pos_, end - pos_));
    pos_ = end;
    return out;
  }
  // The text up to the last occurrence of `c` on the line (not included).
  std::string until_last(char c) {
    const size_t end = line_.rfind(c);
    if (end == std::string_view::npos || end < pos_) fail(fmt::format("'{}'", c));
    std::string out(line_.substr(pos_, end - pos_));
    pos_ = end;
    return out;
  }
  std::string_view rest() const { return line_.substr(pos_); }

 private:
  std::string_view line_;
  int line_no_;
  std::string_view source_;
  size_t pos_ = 0;
};

// Each reads its piece at the cursor or throws Error (Cursor::fail) naming what was expected.
DType parse_dtype(Cursor& in);                     // Float32, ...
std::vector<int64_t> parse_int_tuple(Cursor& in);  // (2, 4), (1), ()
TensorMeta parse_meta(Cursor& in);                 // <Tensor[Float32], (2, 4)>
std::vector<TensorMeta> parse_metas(Cursor& in);   // (<...>, <...>) or ()
Attrs parse_attrs(Cursor& in);                     // {key: value, ...}
Strategy parse_strategy_at(Cursor& in);            // ((2, 4), (4, 1))
// layout(dev=(2, 2), alias=(dp, mp), map=(dp, None)) (TensorLayout::to_string)
TensorLayout parse_layout_at(Cursor& in);
std::vector<TensorLayout> parse_layouts_at(Cursor& in);  // (layout(...), ...) or ()
// Whether `s` is a whole number; *is_double says whether it has a point or an exponent.
bool is_number(const std::string& s, bool* is_double);
// A tensor of `meta` holding `values` (one for every element, or one for all; none: zeros);
// throws at `in` when their count does not fit.
Tensor constant_tensor(const TensorMeta& meta, const std::vector<double>& values, Cursor& in);

}  // namespace cleave::ir::text
