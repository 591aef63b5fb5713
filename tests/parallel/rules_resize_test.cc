// The resizing rules (src/parallel/rules/resize.cc): every valid strategy on 1, 2, 3, 4, 6 and 8
// devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one device (NOTE
// [Sharded operator check] in tests/testing/op_sharding.h). Every kernel here has a
// Float64 path, so the inputs are Float64.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;
using testing::with;
using Dims = std::vector<int64_t>;

std::vector<OpCase> resize_cases() {
  std::vector<OpCase> cases;
  for (bool align : {false, true}) {
    const ir::Attrs resize{{"size", Dims{5, 4}}, {"align_corners", align}};
    const ir::Attrs grad = with(resize, "input_shape", Dims{6, 4, 3, 3});
    cases.push_back({"ResizeBilinear", resize, {f64({6, 4, 3, 3}, 27)}});
    cases.push_back({"ResizeNearest", resize, {f64({6, 4, 3, 3}, 28)}});
    cases.push_back({"ResizeBilinearGrad", grad, {f64({6, 4, 5, 4}, 29)}});
    cases.push_back({"ResizeNearestGrad", grad, {f64({6, 4, 5, 4}, 30)}});
  }
  return cases;
}

TEST(OpSharding, ResizingEqualsOneDevice) { testing::expect_all_equal_one_device(resize_cases()); }

}  // namespace
}  // namespace cleave
