// Vision and common transforms against hand-computed values.
#include "cleave/data/transforms.h"

#include <gtest/gtest.h>

#include <set>

#include "cleave/data/dataset.h"
#include "cleave/ops/nn.h"
#include "cleave/ops/shape.h"
#include "testing/gradcheck.h"

namespace cleave::dataset {
namespace {

// A (h, w, c) Float32 image with value 100 * i + 10 * j + ch.
Tensor ramp(int64_t h, int64_t w, int64_t c) {
  std::vector<float> v;
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t j = 0; j < w; ++j) {
      for (int64_t ch = 0; ch < c; ++ch) v.push_back(static_cast<float>(100 * i + 10 * j + ch));
    }
  }
  return Tensor::from_vector(v, Shape{h, w, c});
}

TEST(Rescale, ScalesAndShifts) {
  Tensor x = Tensor::from_vector<float>({0, 255, 51}, Shape{1, 3, 1});
  Tensor y = vision::Rescale(1.0 / 255.0, -0.5)(x);
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_NEAR(y.at({0, 0, 0}), -0.5, 1e-7);
  EXPECT_NEAR(y.at({0, 1, 0}), 0.5, 1e-7);
  EXPECT_NEAR(y.at({0, 2, 0}), -0.3, 1e-7);
  // Integer input becomes Float32.
  EXPECT_EQ(vision::Rescale(2, 1)(Tensor::from_vector<int32_t>({3})).to_vector<float>(),
            std::vector<float>{7});
}

TEST(Normalize, PerChannelMeanAndStd) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{1, 2, 3});
  Tensor y = vision::Normalize({1, 2, 3}, {1, 2, 4})(x);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 0, 0, 3, 1.5, 0.75}));
  Tensor one = vision::Normalize({0.5}, {0.25})(Tensor::from_vector<float>({1, 0}, Shape{2, 1, 1}));
  EXPECT_EQ(one.to_vector<float>(), (std::vector<float>{2, -2}));
  EXPECT_ERROR(vision::Normalize({1, 2}, {1, 1})(x), "Normalize", "3 channels", "2 values");
  EXPECT_ERROR(vision::Normalize({1}, {0}), "Normalize", "std value 0");
  EXPECT_ERROR(vision::Normalize({1, 2}, {1}), "mean has 2 values and std 1");
}

TEST(HWC2CHW, MovesChannelsFirst) {
  Tensor y = vision::HWC2CHW()(ramp(2, 3, 2));
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y.at({1, 1, 2}), 100 + 20 + 1);
  EXPECT_EQ(y.at({0, 0, 1}), 10);
  Tensor ints = vision::HWC2CHW()(Tensor::from_vector<int32_t>({1, 2, 3, 4}, Shape{2, 2}));
  EXPECT_EQ(ints.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(ints.dtype(), DType::kInt32);
  EXPECT_ERROR(vision::HWC2CHW()(Tensor::zeros(Shape{2, 2, 2, 2})), "HWC2CHW", "shape (2, 2, 2, 2)",
               "(H, W, C)");
}

TEST(Resize, BilinearByHand) {
  // 2 x 2 -> 4 x 4 with half-pixel centres: source coordinate s = (i + 0.5) / 2 - 0.5, clamped at
  // 0, so rows/cols map to 0, 0.25, 0.75, 1 (clamped at the far edge).
  Tensor x = Tensor::from_vector<float>({0, 4, 8, 12}, Shape{2, 2, 1});
  Tensor y = vision::Resize({4, 4})(x);
  ASSERT_EQ(y.shape(), (Shape{4, 4, 1}));
  const std::vector<double> t = {0, 0.25, 0.75, 1};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(y.at({i, j, 0}), 8 * t[i] + 4 * t[j], 1e-6) << i << "," << j;
    }
  }
}

TEST(Resize, NearestByHand) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{1, 6, 1});
  // Output j reads floor((j + 0.5) * 6 / 3) = 1, 3, 5.
  Tensor y = vision::Resize({1, 3}, vision::Inter::kNearest)(x);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

TEST(Resize, MatchesTheResizeOpsOnEveryChannel) {
  const Tensor x = Tensor::uniform(Shape{28, 28, 3}, 0, 255);
  const Tensor nchw = ops::reshape(ops::transpose(x, {2, 0, 1}), {1, 3, 28, 28});
  for (auto inter : {vision::Inter::kLinear, vision::Inter::kNearest}) {
    for (std::vector<int64_t> size : {std::vector<int64_t>{32, 32}, {13, 40}, {28, 28}}) {
      const Tensor y = vision::Resize(size, inter)(x);
      const Tensor ref = inter == vision::Inter::kLinear ? ops::resize_bilinear(nchw, size)
                                                         : ops::resize_nearest(nchw, size);
      const Tensor ref_hwc = ops::transpose(ops::reshape(ref, {3, size[0], size[1]}), {1, 2, 0});
      EXPECT_TRUE(testing::all_close(y, ref_hwc, 1e-4, 1e-5)) << size[0] << "x" << size[1];
    }
  }
}

TEST(Resize, OneValueResizesTheShorterSide) {
  EXPECT_EQ(vision::Resize({16})(ramp(8, 12, 1)).shape(), (Shape{16, 24, 1}));
  EXPECT_EQ(vision::Resize({6})(ramp(12, 8, 2)).shape(), (Shape{9, 6, 2}));
  EXPECT_ERROR(vision::Resize({0, 4}), "Resize", "size value 0");
  EXPECT_ERROR(vision::Resize({1, 2, 3}), "Resize", "size has 3 values");
}

TEST(RandomCrop, CropsAWindowOfThePaddedImage) {
  const Tensor x = ramp(4, 4, 1);
  // Without padding and the full size, the crop is the image.
  EXPECT_EQ(vision::RandomCrop({4, 4})(x).to_vector<float>(), x.to_vector<float>());
  // Every crop of the padded image: each output value is 0 (padding) or the source pixel at a
  // constant offset.
  transform_generator().seed(1);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int trial = 0; trial < 200; ++trial) {
    const Tensor y = vision::RandomCrop({4, 4}, {2})(x);
    ASSERT_EQ(y.shape(), (Shape{4, 4, 1}));
    // Find the offset from a non-padding pixel; every pixel must agree with it.
    int64_t di = 99, dj = 99;
    for (int64_t i = 0; i < 4 && di == 99; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        const double v = y.at({i, j, 0});
        if (v != 0) {
          di = static_cast<int64_t>(v) / 100 - i;
          dj = static_cast<int64_t>(v) % 100 / 10 - j;
          break;
        }
      }
    }
    if (di == 99) continue;  // the window held only padding and pixel (0, 0)
    offsets.insert({di, dj});
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t si = i + di, sj = j + dj;
        const bool inside = si >= 0 && si < 4 && sj >= 0 && sj < 4;
        EXPECT_EQ(y.at({i, j, 0}), inside ? 100 * si + 10 * sj : 0);
      }
    }
  }
  EXPECT_GT(offsets.size(), 15u);  // offsets in [-2, 2]^2: 25 in all
  // Four-value padding: left 1, top 0, right 0, bottom 0 and a crop as wide as the padded image.
  const Tensor y = vision::RandomCrop({4, 5}, {1, 0, 0, 0})(x);
  EXPECT_EQ(y.at({0, 0, 0}), 0);
  EXPECT_EQ(y.at({2, 3, 0}), 220);
  EXPECT_ERROR(vision::RandomCrop({5, 5})(x), "RandomCrop", "padded image is 4 x 4",
               "crop size 5 x 5");
  EXPECT_ERROR(vision::RandomCrop({4}, {1, 2, 3}), "RandomCrop", "padding has 3 values");
}

TEST(RandomHorizontalFlip, MirrorsWithTheGivenProbability) {
  const Tensor x = ramp(2, 3, 2);
  const Tensor flipped = vision::RandomHorizontalFlip(1.0)(x);
  EXPECT_EQ(flipped.at({1, 0, 1}), 100 + 20 + 1);
  EXPECT_EQ(flipped.at({0, 2, 0}), 0);
  EXPECT_EQ(vision::RandomHorizontalFlip(0.0)(x).to_vector<float>(), x.to_vector<float>());
  transform_generator().seed(3);
  int flips = 0;
  for (int i = 0; i < 1000; ++i) {
    flips += vision::RandomHorizontalFlip(0.3)(x).at({0, 0, 0}) != 0;
  }
  EXPECT_NEAR(flips, 300, 60);
  EXPECT_ERROR(vision::RandomHorizontalFlip(1.5), "RandomHorizontalFlip", "prob is 1.5");
}

TEST(TypeCast, ConvertsDtypes) {
  const Tensor x = Tensor::from_vector<float>({1.7f, -2.5f, 3.0f});
  const Tensor y = transforms::TypeCast(DType::kInt32)(x);
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(transforms::TypeCast(DType::kFloat64)(y).to_vector<double>(),
            (std::vector<double>{1, -2, 3}));
}

}  // namespace
}  // namespace cleave::dataset
