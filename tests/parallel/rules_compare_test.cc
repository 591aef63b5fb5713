// The comparison, logic and Select rules (src/parallel/rules/compare.cc): every valid strategy on
// 1, 2, 3, 4, 6 and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals
// one device (NOTE [Sharded operator check] in tests/testing/op_sharding.h).
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;

std::vector<OpCase> compare_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"Equal", "Greater", "LessEqual"}) {
    cases.push_back({op, {}, {f64({6, 4}, 12), f64({6, 4}, 13)}});
  }
  cases.push_back(
      {"Select",
       {},
       {ops::greater(f64({6, 4}, 14), f64({6, 4}, 15)), f64({6, 4}, 16), f64({6, 4}, 17)}});
  return cases;
}

TEST(OpSharding, ComparisonsEqualOneDevice) {
  testing::expect_all_equal_one_device(compare_cases());
}

}  // namespace
}  // namespace cleave
