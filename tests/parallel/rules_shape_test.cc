// The shape rules (src/parallel/rules/shape.cc): every valid strategy on 1, 2, 3, 4, 6 and 8
// devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one device (NOTE
// [Sharded operator check] in tests/testing/op_sharding.h).
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;

std::vector<OpCase> shape_cases() {
  std::vector<OpCase> cases;
  cases.push_back({"Reshape", {{"shape", std::vector<int64_t>{6, 8}}}, {f64({6, 2, 4}, 50)}});
  cases.push_back({"Reshape", {{"shape", std::vector<int64_t>{12, 4}}}, {f64({6, 8}, 51)}});
  cases.push_back({"Reshape", {{"shape", std::vector<int64_t>{-1}}}, {f64({4, 3, 2}, 52)}});
  cases.push_back({"Flatten", {}, {f64({6, 4, 2, 1}, 53)}});
  cases.push_back({"ExpandDims", {{"axis", int64_t{1}}}, {f64({6, 4}, 54)}});
  cases.push_back({"Squeeze", {{"axis", std::vector<int64_t>{1}}}, {f64({6, 1, 4}, 55)}});
  cases.push_back({"Transpose", {{"perm", std::vector<int64_t>{1, 2, 0}}}, {f64({2, 6, 4}, 56)}});
  cases.push_back({"Tile", {{"multiples", std::vector<int64_t>{1, 2}}}, {f64({6, 4}, 57)}});
  cases.push_back({"BroadcastTo", {{"shape", std::vector<int64_t>{2, 6, 4}}}, {f64({6, 1}, 58)}});
  return cases;
}

TEST(OpSharding, ShapeOpsEqualOneDevice) { testing::expect_all_equal_one_device(shape_cases()); }

}  // namespace
}  // namespace cleave
