// Vision and common transforms against hand-computed values.
#include "cleave/data/transforms.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "cleave/data/dataset.h"
#include "cleave/ops/nn.h"
#include "cleave/ops/shape.h"
#include "data/data_files.h"
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

// The bilinear Resize as it was written before its per-thread tap tables and one-channel path
// (one tap computed per output row and column, a channel loop per pixel): the faster code must
// give the same floats, bit for bit.
std::vector<float> previous_bilinear(const Tensor& x, int64_t oh, int64_t ow) {
  const int64_t h = x.dim(0), w = x.dim(1), c = x.rank() == 3 ? x.dim(2) : 1;
  struct Tap {
    int64_t i0, i1;
    float w1;
  };
  auto tap = [](int64_t i, int64_t in, int64_t out) {
    double s = static_cast<double>((2 * i + 1) * in - out) / static_cast<double>(2 * out);
    s = std::max(s, 0.0);
    Tap t;
    t.i0 = std::min(static_cast<int64_t>(std::floor(s)), in - 1);
    t.i1 = std::min(t.i0 + 1, in - 1);
    t.w1 = static_cast<float>(s - static_cast<double>(t.i0));
    return t;
  };
  const std::vector<float> v = x.to_vector<float>();
  const float* in = v.data();
  std::vector<float> y(static_cast<size_t>(oh * ow * c));
  std::vector<Tap> cols(static_cast<size_t>(ow));
  for (int64_t j = 0; j < ow; ++j) cols[j] = tap(j, w, ow);
  std::vector<float> row(static_cast<size_t>(w * c));
  for (int64_t i = 0; i < oh; ++i) {
    const Tap r = tap(i, h, oh);
    const float* r0 = in + r.i0 * w * c;
    const float* r1 = in + r.i1 * w * c;
    const float b = r.w1, a = 1.0f - b;
    for (int64_t k = 0; k < w * c; ++k) row[k] = a * r0[k] + b * r1[k];
    float* o = y.data() + i * ow * c;
    for (int64_t j = 0; j < ow; ++j) {
      const Tap& t = cols[j];
      const float w1 = t.w1, w0 = 1.0f - w1;
      for (int64_t ch = 0; ch < c; ++ch) {
        o[j * c + ch] = w0 * row[t.i0 * c + ch] + w1 * row[t.i1 * c + ch];
      }
    }
  }
  return y;
}

// An (h, w, c) image of random bytes, as the sources give.
Tensor random_image(int64_t h, int64_t w, int64_t c, std::mt19937& gen) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<float> v(static_cast<size_t>(h * w * c));
  for (float& e : v) e = static_cast<float>(byte(gen));
  return Tensor::from_vector(v, Shape{h, w, c});
}

TEST(Resize, BilinearIsBitIdenticalToThePreviousLoops) {
  std::mt19937 gen(2);
  struct Case {
    int64_t h, w, c, oh, ow;
  };
  // Seed 000's 28 -> 32 first (several images, so that the per-thread tables are reused), then
  // other sizes and channel counts (the tables recomputed; one-channel upsampling takes the
  // permute path, downsampling and widths not a multiple of 8 the gathers), then 28 -> 32 again.
  const Case cases[] = {{28, 28, 1, 32, 32}, {28, 28, 1, 32, 32}, {28, 28, 3, 32, 32},
                        {32, 32, 3, 24, 40}, {7, 5, 2, 13, 3},    {1, 1, 1, 4, 4},
                        {5, 9, 1, 5, 9},     {10, 12, 1, 16, 24}, {16, 16, 1, 8, 8},
                        {28, 28, 1, 32, 32}};
  for (const Case& k : cases) {
    const Tensor x = random_image(k.h, k.w, k.c, gen);
    const Tensor y = vision::Resize({k.oh, k.ow})(x);
    ASSERT_EQ(y.shape(), (Shape{k.oh, k.ow, k.c}));
    EXPECT_EQ(y.to_vector<float>(), previous_bilinear(x, k.oh, k.ow))
        << k.h << "x" << k.w << "x" << k.c << " -> " << k.oh << "x" << k.ow;
  }
  // (H, W) images too.
  const Tensor x = Tensor::uniform(Shape{28, 28}, 0, 1);
  EXPECT_EQ(vision::Resize({32, 32})(x).to_vector<float>(), previous_bilinear(x, 32, 32));
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

// NOTE [Reusing a transform's input] (src/data/nodes.h): Rescale and Normalize run in place only
// on a tensor that map() handed over and nothing else holds.
TEST(Rescale, InPlaceOnlyOnATensorNothingElseHolds) {
  // Called directly: the caller's tensor is not changed, even when it holds the only handle.
  Tensor x = Tensor::from_vector<float>({1, 2, 3}, Shape{1, 3, 1});
  const Tensor y = vision::Rescale(2.0, 1.0)(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 5, 7}));
  EXPECT_NE(y.raw_data(), x.raw_data());
  const Tensor n = vision::Normalize({1}, {2})(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(n.to_vector<float>(), (std::vector<float>{0, 0.5, 1}));

  // In a pipeline: the source's rows are kept by the user (a cache it returns handles of), and a
  // user transform calls Rescale on its input and then reads that input again.
  std::vector<Tensor> cache;
  for (int i = 0; i < 6; ++i) cache.push_back(Tensor::full({2, 2, 1}, i));
  auto ds = GeneratorDataset([&cache](int64_t i) -> Row { return {cache[i]}; }, 6, {"x"});
  Transform user = [](const Tensor& t) {
    const Tensor scaled = vision::Rescale(10.0, 0.0)(t);
    return Tensor::from_vector<float>({t.to_vector<float>()[0], scaled.to_vector<float>()[0]});
  };
  const std::vector<Row> kept =
      testing::collect(ds->map({vision::Rescale(1.0, 1.0), vision::Normalize({1}, {0.5})}, {"x"}));
  const std::vector<Row> composed = testing::collect(ds->map({user}, {"x"}));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(cache[i].to_vector<float>(), std::vector<float>(4, i)) << i;
    EXPECT_EQ(kept[i][0].to_vector<float>(), std::vector<float>(4, 2 * i)) << i;
    EXPECT_EQ(composed[i][0].to_vector<float>(), (std::vector<float>{1.0f * i, 10.0f * i})) << i;
  }

  // A fresh tensor from the source, handed over by map: reused, the values as allocating gives.
  auto fresh = GeneratorDataset(
      [](int64_t i) -> Row {
        return {Tensor::full({3, 3, 1}, static_cast<double>(i))};
      },
      4, {"x"});
  const std::vector<Row> rescaled = testing::collect(fresh->map(
      {vision::Resize({4, 4}), vision::Rescale(1 / 0.3081, -0.1307 / 0.3081), vision::HWC2CHW()},
      {"x"}));
  for (int i = 0; i < 4; ++i) {
    const Tensor direct = vision::HWC2CHW()(vision::Rescale(
        1 / 0.3081, -0.1307 / 0.3081)(vision::Resize({4, 4})(Tensor::full({3, 3, 1}, i))));
    EXPECT_EQ(rescaled[i][0].shape(), (Shape{1, 4, 4}));
    EXPECT_EQ(rescaled[i][0].to_vector<float>(), direct.to_vector<float>()) << i;
  }
}

TEST(Rescale, InAMapWritesIntoTheBufferHandedOver) {
  // The first operation makes a fresh tensor and remembers only where its values live.
  std::vector<const void*> made;
  Transform fresh_copy = [&made](const Tensor& t) {
    Tensor copy = t.clone();
    made.push_back(copy.raw_data());
    return copy;
  };
  auto ds = GeneratorDataset(
      [](int64_t i) -> Row {
        return {Tensor::full({2, 2, 1}, static_cast<double>(i))};
      },
      3, {"x"});
  const std::vector<Row> rows =
      testing::collect(ds->map({fresh_copy, vision::Rescale(2.0, 0.0)}, {"x"}));
  ASSERT_EQ(made.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i][0].raw_data(), made[i]) << i;
    EXPECT_EQ(rows[i][0].to_vector<float>(), std::vector<float>(4, 2 * i)) << i;
  }
}

TEST(HWC2CHW, OneChannelIsAViewOfTheSameBytes) {
  const Tensor x = ramp(3, 4, 1);
  const Tensor y = vision::HWC2CHW()(x);
  EXPECT_EQ(y.shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(vision::HWC2CHW()(ramp(3, 4, 2)).at({1, 2, 3}), 200 + 30 + 1);
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
