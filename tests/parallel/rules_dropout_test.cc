// The Dropout rules (src/parallel/rules/dropout.cc): every valid strategy on 1, 2, 3, 4, 6 and 8
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

// Each rank draws its slice of the one-device mask, so the sharded outputs equal one device's.
TEST(OpSharding, DropoutEqualsOneDevice) {
  testing::expect_all_equal_one_device(
      {{"Dropout", {{"keep_prob", 0.7}, {"seed", int64_t{5}}}, {f64({6, 4}, 25)}, "", {}}});
}

}  // namespace
}  // namespace cleave
