// docs/design/adding_an_operator.md stays true: every file it quotes exists, every symbol it
// quotes is in one of those files (or is a registered primitive), and its worked example is a
// registered primitive of the family it names.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cleave/ir/registry.h"

namespace cleave::ir {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = CLEAVE_SOURCE_DIR;
const char* const kDoc = "docs/design/adding_an_operator.md";

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The text between backticks, in order.
std::vector<std::string> quoted(const std::string& doc) {
  std::vector<std::string> out;
  const std::regex code("`([^`]+)`");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), code); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1].str());
  }
  return out;
}

struct Example {
  std::string op, family;
};

// "The worked example is the primitive `Softmax`, of family `softmax`."
Example example_of(const std::string& doc) {
  std::smatch m;
  const std::regex sentence("worked example is the primitive `(\\w+)`, of family `(\\w+)`");
  if (!std::regex_search(doc, m, sentence)) return {};
  return {m[1].str(), m[2].str()};
}

// A quoted path: a file of the checkout, "<family>" standing for the example's family.
bool is_path(const std::string& q) {
  static const std::regex path("(src|include|tests|docs|bench|tools|examples)/[\\w./<>-]+");
  return std::regex_match(q, path);
}

// Whether `word` stands in `text` as a whole word (not as part of a longer name).
bool contains_word(const std::string& text, const std::string& word) {
  auto is_name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const size_t end = at + word.size();
    if ((at == 0 || !is_name_char(text[at - 1])) &&
        (end == text.size() || !is_name_char(text[end]))) {
      return true;
    }
  }
  return false;
}

std::string with_family(std::string path, const std::string& family) {
  const std::string placeholder = "<family>";
  for (size_t at; (at = path.find(placeholder)) != std::string::npos;) {
    path.replace(at, placeholder.size(), family);
  }
  return path;
}

TEST(AddingAnOperatorDoc, TheExampleIsRegisteredInItsFamily) {
  const std::string doc = read_text(kRoot / kDoc);
  ASSERT_FALSE(doc.empty()) << "cannot read " << kDoc;
  const Example example = example_of(doc);
  ASSERT_FALSE(example.op.empty())
      << kDoc << " must name its example as \"the worked example is the primitive `<Op>`, of "
      << "family `<family>`\"";
  const OpDef* op = Registry::global().find(example.op);
  ASSERT_NE(op, nullptr) << kDoc << ": the example '" << example.op << "' is not registered";
  EXPECT_EQ(op->family, example.family)
      << kDoc << ": the example '" << example.op << "' is of family '" << op->family << "'";
}

TEST(AddingAnOperatorDoc, QuotedFilesAndSymbolsExist) {
  const std::string doc = read_text(kRoot / kDoc);
  ASSERT_FALSE(doc.empty()) << "cannot read " << kDoc;
  const Example example = example_of(doc);
  std::vector<std::string> paths, symbols;
  for (const std::string& q : quoted(doc)) {
    if (is_path(q)) {
      paths.push_back(with_family(q, example.family));
    } else if (std::regex_match(q, std::regex("\\w+(::\\w+)*"))) {
      symbols.push_back(q);
    }
  }
  EXPECT_GE(paths.size(), 10u) << kDoc << " quotes too few files: is the walk-through there?";
  std::string sources;
  for (const std::string& p : paths) {
    EXPECT_TRUE(fs::is_regular_file(kRoot / p)) << kDoc << " names " << p << ", which is no file";
    sources += read_text(kRoot / p);
  }
  for (const std::string& s : symbols) {
    if (Registry::global().find(s) != nullptr) continue;  // a primitive's name
    const size_t colon = s.rfind(':');
    EXPECT_TRUE(contains_word(sources, colon == std::string::npos ? s : s.substr(colon + 1)))
        << kDoc << " quotes `" << s << "`, which none of the files it names holds";
  }
}

}  // namespace
}  // namespace cleave::ir
