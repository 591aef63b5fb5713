// An op without a sharding rule is named when a parallel graph needs one. That every registered
// primitive has a rule (or says why not) is tests/ir/primitive_entries_test.cc; the rules'
// behaviour is tested by the rules_<family>_test.cc files.
#include <gtest/gtest.h>

#include "cleave/ir/registry.h"
#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel {
namespace {

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
