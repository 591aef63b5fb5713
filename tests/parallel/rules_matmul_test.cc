// The MatMul, BatchMatMul and BiasAdd rules (src/parallel/rules/matmul.cc): every valid strategy on
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

std::vector<OpCase> matmul_cases() {
  std::vector<OpCase> cases;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{4, 6} : Shape{6, 4};
      const Shape b = tb ? Shape{12, 4} : Shape{4, 12};
      cases.push_back(
          {"MatMul", {{"transpose_a", ta}, {"transpose_b", tb}}, {f64(a, 30), f64(b, 31)}});
    }
  }
  cases.push_back({"BatchMatMul", {}, {f64({2, 6, 4}, 32), f64({2, 4, 6}, 33)}});
  cases.push_back({"BatchMatMul", {}, {f64({2, 6, 4}, 34), f64({4, 6}, 35)}});  // broadcast batch
  cases.push_back({"BiasAdd", {}, {f64({6, 4}, 36), f64({4}, 37)}});
  cases.push_back({"BiasAdd", {}, {f64({2, 6, 2, 2}, 38), f64({6}, 39)}});
  return cases;
}

TEST(OpSharding, MatMulEqualsOneDevice) { testing::expect_all_equal_one_device(matmul_cases()); }

}  // namespace
}  // namespace cleave
