// Golden files: the text a test must produce (IR dumps), kept under tests/<layer>/golden and
// compared with what the test produces now. The one place that reads, compares and rewrites them.
//
// NOTE [Golden files]
// CLEAVE_UPDATE_GOLDEN=1 makes every test that compares with golden files write what it produced
// into them instead of comparing (review the diff before committing); CLEAVE_UPDATE_GOLDEN=new
// writes only the golden files that do not exist yet. Unset, empty or 0: compare. A test that
// only reads another test's goldens (as inputs, or to compare a single pass with the stage the
// whole pipeline wrote) reads them with read_text and leaves rewriting them to their owner.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace cleave::testing {

enum class GoldenUpdate {
  kCompare,  // CLEAVE_UPDATE_GOLDEN unset, empty or 0
  kAll,      // any other value: rewrite every golden file from this run
  kNew,      // "new": write the golden files that do not exist yet, compare the others
};

inline GoldenUpdate golden_update() {
  const char* v = std::getenv("CLEAVE_UPDATE_GOLDEN");
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "0") {
    return GoldenUpdate::kCompare;
  }
  return std::string_view(v) == "new" ? GoldenUpdate::kNew : GoldenUpdate::kAll;
}

// The whole text of `path`; empty when it cannot be read.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes `text` to `path`, making its folders.
inline void write_text(const std::filesystem::path& path, const std::string& text) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// Whether `got` equals the golden file `golden`; on a difference the message names the file and
// the first line that differs. With CLEAVE_UPDATE_GOLDEN (NOTE [Golden files]) it writes `got`
// into the file first (kNew: only a file that does not exist).
inline ::testing::AssertionResult matches_golden(const std::string& got,
                                                 const std::filesystem::path& golden) {
  const GoldenUpdate update = golden_update();
  if (update == GoldenUpdate::kAll ||
      (update == GoldenUpdate::kNew && !std::filesystem::exists(golden))) {
    write_text(golden, got);
  }
  if (!std::filesystem::exists(golden)) {
    return ::testing::AssertionFailure()
           << golden << " does not exist (CLEAVE_UPDATE_GOLDEN=new writes it)";
  }
  const std::string want = read_text(golden);
  if (got == want) return ::testing::AssertionSuccess();
  std::istringstream g(got), w(want);
  std::string gl, wl;
  int line = 0;
  while (true) {
    ++line;
    const bool more_g = static_cast<bool>(std::getline(g, gl));
    const bool more_w = static_cast<bool>(std::getline(w, wl));
    if (!more_g && !more_w) break;
    if (more_g != more_w || gl != wl) {
      return ::testing::AssertionFailure()
             << "the text differs from " << golden << " (CLEAVE_UPDATE_GOLDEN=1 rewrites it) at "
             << "line " << line << ":\n  got:  " << (more_g ? gl : "(end of text)")
             << "\n  want: " << (more_w ? wl : "(end of file)") << "\nthe whole text:\n"
             << got;
    }
  }
  return ::testing::AssertionFailure()
         << "the text differs from " << golden << " in its last line's end:\n"
         << got;
}

}  // namespace cleave::testing
