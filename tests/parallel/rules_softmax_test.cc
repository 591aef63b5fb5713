// The Softmax and LogSoftmax rules (src/parallel/rules/softmax.cc): every valid strategy on 1, 2,
// 3, 4, 6 and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one
// device (NOTE [Sharded operator check] in tests/testing/op_sharding.h).
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;

std::vector<OpCase> softmax_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    cases.push_back({op, {{"axis", int64_t{-1}}}, {f64({6, 4}, 43)}});
    cases.push_back({op, {{"axis", int64_t{0}}}, {f64({6, 4}, 44)}});
  }
  cases.push_back({"SoftmaxGrad", {{"axis", int64_t{-1}}}, {f64({6, 4}, 45), f64({6, 4}, 46)}});
  return cases;
}

TEST(OpSharding, SoftmaxEqualsOneDevice) { testing::expect_all_equal_one_device(softmax_cases()); }

}  // namespace
}  // namespace cleave
