// Dropout: reproducibility, keep statistics, scaling, identity at keep_prob 1, gradient, errors.
#include <gtest/gtest.h>

#include "cleave/ops/nn.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

TEST(Dropout, SameSeedSameMaskOtherSeedOtherMask) {
  const Tensor x = Tensor::ones({1000});
  set_seed(7);
  const Tensor a = ops::dropout(x, 0.5);
  const Tensor b = ops::dropout(x, 0.5);  // the generator has moved on
  set_seed(7);
  const Tensor c = ops::dropout(x, 0.5);
  set_seed(8);
  const Tensor d = ops::dropout(x, 0.5);
  EXPECT_EQ(a.to_vector<float>(), c.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), d.to_vector<float>());
}

TEST(Dropout, KeepsAboutKeepProbAndScalesKeptElements) {
  const int64_t n = 200000;
  const Tensor x = random_f64({n}, 0.5, 1.5, 3);  // no zeros, so a zero output means dropped
  for (double keep_prob : {0.1, 0.5, 0.9}) {
    set_seed(11);
    const Tensor y = ops::dropout(x, keep_prob);
    const double* px = x.data<double>();
    const double* py = y.data<double>();
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (py[i] != 0.0) {
        ++kept;
        ASSERT_DOUBLE_EQ(py[i], px[i] / keep_prob) << "element " << i;
      }
    }
    // The binomial standard deviation is at most sqrt(0.25 / n) ~ 0.0011; allow 5 of them.
    EXPECT_NEAR(static_cast<double>(kept) / n, keep_prob, 0.0056) << "keep_prob " << keep_prob;
  }
}

TEST(Dropout, MaskDependsOnlyOnSeedNotDtype) {
  const Tensor x = random_f64({5000}, 0.5, 1.5, 4);
  set_seed(5);
  const Tensor y64 = ops::dropout(x, 0.3);
  set_seed(5);
  const Tensor y32 = ops::dropout(ops::cast(x, DType::kFloat32), 0.3);
  EXPECT_TRUE(all_close(y32, y64, 1e-6, 1e-6));
}

TEST(Dropout, KeepProbOneIsIdentity) {
  const Tensor x = random_f64({3, 1000}, -1, 1, 5);
  EXPECT_EQ(ops::dropout(x, 1.0).to_vector<double>(), x.to_vector<double>());
  const Tensor x32 = ops::cast(x, DType::kFloat32);
  EXPECT_EQ(ops::dropout(x32, 1.0).to_vector<float>(), x32.to_vector<float>());
}

TEST(Dropout, SecondOutputIsTheMaskOfFactors) {
  const Tensor x = random_f64({400}, 0.5, 1.5, 6);
  set_seed(9);
  const std::vector<Tensor> out = ir::call("Dropout", {x}, {{"keep_prob", 0.25}});
  ASSERT_EQ(out.size(), 2u);
  const double* m = out[1].data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_TRUE(m[i] == 0.0 || m[i] == 4.0) << "mask element " << i << " is " << m[i];
  }
  EXPECT_TRUE(all_close(out[0], x * out[1]));
}

TEST(Dropout, GradientIsTheMaskTimesDy) {
  // Reseeding inside fn gives every evaluation the same mask.
  for (const Shape& shape : {Shape{1}, Shape{7}, Shape{3, 4}}) {
    EXPECT_TRUE(gradcheck(
        [](const std::vector<Tensor>& in) {
          set_seed(21);
          return ops::dropout(in[0], 0.6);
        },
        {random_f64(shape, -1, 1, 7)}))
        << shape.to_string();
  }
  Tensor x = Tensor::ones({1000}, DType::kFloat64).set_requires_grad(true);
  set_seed(3);
  const Tensor y = ops::dropout(x, 0.5);
  const Tensor g = autodiff::grad(ops::reduce_sum(y), {x})[0];
  EXPECT_TRUE(all_close(g, y.detach()));  // d y_i / d x_i is the mask factor, here y_i itself
}

TEST(Dropout, RejectsBadKeepProbAndDtype) {
  const Tensor x = Tensor::ones({4});
  EXPECT_ERROR(ops::dropout(x, 0.0), "Dropout", "keep_prob is 0", "expected a value in (0, 1]");
  EXPECT_ERROR(ops::dropout(x, 1.5), "Dropout", "keep_prob is 1.5");
  EXPECT_ERROR(ops::dropout(x, -0.2), "keep_prob is -0.2");
  EXPECT_ERROR(ops::dropout(Tensor::ones({4}, DType::kInt32), 0.5), "Dropout",
               "input 0 has dtype Int32", "expected Float32 or Float64");
}

}  // namespace
}  // namespace cleave
