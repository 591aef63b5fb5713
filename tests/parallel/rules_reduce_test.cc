// The reduction and ArgMax/ArgMin rules (src/parallel/rules/reduce.cc): every valid strategy on 1,
// 2, 3, 4, 6 and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one
// device (NOTE [Sharded operator check] in tests/testing/op_sharding.h).
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;
using testing::positive;

std::vector<OpCase> reduce_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"}) {
    for (bool keep : {false, true}) {
      cases.push_back({op,
                       {{"axis", std::vector<int64_t>{1}}, {"keep_dims", keep}},
                       {positive({6, 4, 2}, 40)}});
    }
    cases.push_back({op, {{"axis", std::vector<int64_t>{}}}, {positive({6, 4}, 41)}});
  }
  for (const char* op : {"ArgMax", "ArgMin"}) {
    cases.push_back({op, {{"axis", int64_t{1}}}, {f64({6, 4}, 42)}});
  }
  return cases;
}

TEST(OpSharding, ReductionsEqualOneDevice) { testing::expect_all_equal_one_device(reduce_cases()); }

}  // namespace
}  // namespace cleave
