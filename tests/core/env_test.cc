// The table of CLEAVE_* variables (NOTE [Environment variables] in cleave/core/env.h): values are
// checked against what each variable accepts, errors say what was wrong and what is expected, and
// docs/environment.md lists exactly the table's rows.
#include "cleave/core/env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <regex>
#include <string>

#include "cleave/core/error.h"
#include "testing/env.h"

namespace cleave::env {
namespace {

using testing::ScopedEnv;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Env, UnsetOrEmptyGivesTheDefault) {
  ScopedEnv spin("CLEAVE_RPC_SPIN_US", std::nullopt);
  EXPECT_EQ(integer("CLEAVE_RPC_SPIN_US", 0, 1'000'000), 2000);
  EXPECT_FALSE(is_set("CLEAVE_RPC_SPIN_US"));
  spin.set("CLEAVE_RPC_SPIN_US", "");
  EXPECT_EQ(integer("CLEAVE_RPC_SPIN_US", 0, 1'000'000), 2000);
  EXPECT_TRUE(flag("CLEAVE_RPC_SHM"));
  EXPECT_EQ(choice("CLEAVE_BIND_CORES", {"auto", "1", "0"}), 0u);
  EXPECT_EQ(text("CLEAVE_JOB_TOKEN"), "");
}

TEST(Env, AcceptedValuesAreRead) {
  ScopedEnv spin("CLEAVE_RPC_SPIN_US", "0");
  ScopedEnv shm("CLEAVE_RPC_SHM", "0");
  ScopedEnv bind("CLEAVE_BIND_CORES", "1");
  EXPECT_EQ(integer("CLEAVE_RPC_SPIN_US", 0, 1'000'000), 0);
  EXPECT_FALSE(flag("CLEAVE_RPC_SHM"));
  EXPECT_EQ(choice("CLEAVE_BIND_CORES", {"auto", "1", "0"}), 1u);
}

TEST(Env, AValueOutsideTheAcceptedOnesNamesTheVariableAndWhatIsExpected) {
  {
    ScopedEnv bad("CLEAVE_RPC_SPIN_US", "20ms");
    EXPECT_EQ(error_of([] { integer("CLEAVE_RPC_SPIN_US", 0, 1'000'000); }),
              "CLEAVE_RPC_SPIN_US='20ms' is invalid; expected microseconds from 0 to 1000000 (how "
              "long a placed graph's wait for a message polls, yielding the core, before it "
              "sleeps; default 2000)");
  }
  for (const char* value : {"-1", "1000001", "99999999999999999999", " 5", "5 "}) {
    ScopedEnv bad("CLEAVE_RPC_SPIN_US", value);
    EXPECT_NE(error_of([] {
                integer("CLEAVE_RPC_SPIN_US", 0, 1'000'000);
              }).find(std::string("CLEAVE_RPC_SPIN_US='") + value + "' is invalid"),
              std::string::npos)
        << value;
  }
  {
    ScopedEnv bad("CLEAVE_RPC_SHM", "yes");
    EXPECT_NE(error_of([] {
                flag("CLEAVE_RPC_SHM");
              }).find("CLEAVE_RPC_SHM='yes' is invalid; expected 0 or 1"),
              std::string::npos);
  }
  {
    ScopedEnv bad("CLEAVE_BIND_CORES", "always");
    EXPECT_NE(error_of([] {
                choice("CLEAVE_BIND_CORES", {"auto", "1", "0"});
              }).find("CLEAVE_BIND_CORES='always' is invalid; expected auto, 1 or 0"),
              std::string::npos);
  }
}

TEST(Env, TheTableIsSortedAndComplete) {
  std::string previous;
  for (const Variable& v : variables()) {
    EXPECT_LT(previous, v.name);
    EXPECT_EQ(v.name.rfind("CLEAVE_", 0), 0u) << v.name;
    EXPECT_FALSE(v.accepted.empty()) << v.name;
    EXPECT_FALSE(v.meaning.empty()) << v.name;
    previous = v.name;
  }
}

TEST(Env, TheDocsListEveryVariableOfTheTable) {
  std::ifstream in(std::string(CLEAVE_TESTS_DIR) + "/../docs/environment.md");
  ASSERT_TRUE(in.good()) << "docs/environment.md is missing";
  // | `NAME` | accepted | `default` or unset | meaning |
  const std::regex row(R"(^\| `(CLEAVE_[A-Z0-9_]+)` \| (.*) \| (?:`(.*)`|unset) \| (.*) \|$)");
  std::vector<std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    documented.push_back(m[1]);
    auto it = std::find_if(variables().begin(), variables().end(),
                           [&](const Variable& v) { return v.name == m[1].str(); });
    if (it == variables().end()) continue;  // reported below
    const Variable& v = *it;
    EXPECT_EQ(m[2].str(), v.accepted) << v.name;
    EXPECT_EQ(m[3].str(), v.fallback) << v.name;
    EXPECT_EQ(m[4].str(), v.meaning) << v.name;
  }
  std::vector<std::string> table;
  for (const Variable& v : variables()) table.emplace_back(v.name);
  EXPECT_EQ(documented, table) << "docs/environment.md must list the rows of src/core/env.cc, in "
                                  "order";
}

}  // namespace
}  // namespace cleave::env
