// Every registered primitive has a sharding rule (DESIGN.md "Layouts": no op is silently
// replicated), every rule belongs to a registered primitive, and each says in one line what it
// splits. The rules' behaviour is tested by the op_sharding_*_test.cc files.
#include <gtest/gtest.h>

#include <algorithm>

#include "cleave/ir/registry.h"
#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel {
namespace {

TEST(RuleCoverage, EveryRegisteredOpHasARule) {
  const std::vector<std::string> names = ir::Registry::global().names();
  ASSERT_GT(names.size(), 100u);
  std::vector<std::string> missing;
  for (const std::string& name : names) {
    const ShardingRule* rule = find_rule(ir::Registry::global().get(name));
    if (rule == nullptr) {
      missing.push_back(name);
    } else {
      EXPECT_FALSE(rule->summary().empty()) << name << "'s rule has no summary";
    }
  }
  EXPECT_TRUE(missing.empty()) << "ops without a sharding rule (add one in src/parallel/rules/): "
                               << ::testing::PrintToString(missing);
}

TEST(RuleCoverage, EveryRuleBelongsToARegisteredOp) {
  const std::vector<std::string> names = ir::Registry::global().names();
  for (const std::string& op : ops_with_rules()) {
    EXPECT_TRUE(std::find(names.begin(), names.end(), op) != names.end())
        << "a sharding rule for '" << op << "', which is not a registered primitive";
  }
}

TEST(RuleCoverage, AnOpWithoutARuleIsNamed) {
  ir::OpDef unknown;
  unknown.name = "MyCustomOp";
  EXPECT_EQ(find_rule(unknown), nullptr);
  try {
    rule_of(unknown);
    FAIL() << "rule_of accepted an op without a rule";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MyCustomOp"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::parallel
