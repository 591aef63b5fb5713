// Dense, Conv2d, pooling, activations, Flatten, Dropout, Embedding, SequentialCell.
#include "cleave/nn/layers.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/gradcheck.h"

namespace cleave::nn {
namespace {

using testing::all_close;
using testing::random_f64;

std::vector<std::string> names_of(const Cell& cell) {
  std::vector<std::string> names;
  for (const auto& [name, value] : cell.parameters_and_names()) names.push_back(name);
  return names;
}

// ---- Dense ----

TEST(Dense, ParametersAndOutputShapeFollowMindSpore) {
  Dense fc(400, 120);
  EXPECT_EQ(names_of(fc), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(fc.weight.shape(), (Shape{120, 400}));
  EXPECT_EQ(fc.bias.shape(), (Shape{120}));
  EXPECT_EQ(fc(Tensor::zeros({32, 400})).shape(), (Shape{32, 120}));
  Dense no_bias(4, 2, {.has_bias = false});
  EXPECT_EQ(names_of(no_bias), (std::vector<std::string>{"weight"}));
  EXPECT_FALSE(no_bias.bias.defined());
}

// y[n][o] = sum_i x[n][i] · w[o][i] + b[o], computed with loops.
TEST(Dense, ForwardMatchesHandComputation) {
  Dense fc(3, 4);
  fc.weight = random_f64({4, 3}, -1, 1, 21);
  fc.bias = random_f64({4}, -1, 1, 22);
  const Tensor x = random_f64({5, 3}, -1, 1, 23);
  std::vector<double> expected(20);
  for (int n = 0; n < 5; ++n)
    for (int o = 0; o < 4; ++o) {
      double s = fc.bias.at({o});
      for (int i = 0; i < 3; ++i) s += x.at({n, i}) * fc.weight.at({o, i});
      expected[n * 4 + o] = s;
    }
  const Tensor want = Tensor::from_vector<double>(expected, {5, 4});
  EXPECT_TRUE(all_close(fc(x), want, 1e-12));

  // Leading dims are batch dims.
  const Tensor x3 = ops::reshape(x, {5, 1, 3});
  EXPECT_TRUE(all_close(fc(x3), ops::reshape(want, {5, 1, 4}), 1e-12));

  // The activation applies to the output.
  Dense relu(3, 4, {.activation = "relu"});
  relu.weight = fc.weight;
  relu.bias = fc.bias;
  std::vector<double> rectified = expected;
  for (double& v : rectified) v = std::max(v, 0.0);
  EXPECT_TRUE(all_close(relu(x), Tensor::from_vector<double>(rectified, {5, 4}), 1e-12));
}

TEST(Dense, GradientsThroughTheLayer) {
  for (const char* activation : {"", "tanh", "sigmoid", "gelu"}) {
    Dense fc(3, 2, {.activation = activation});
    const auto fn = [&](const std::vector<Tensor>& in) {
      fc.weight = in[1];
      fc.bias = in[2];
      return fc(in[0]);
    };
    EXPECT_TRUE(testing::gradcheck(fn, {random_f64({4, 3}, -1, 1, 24),
                                        random_f64({2, 3}, -1, 1, 25), random_f64({2}, -1, 1, 26)}))
        << "activation '" << activation << "'";
  }
}

TEST(Dense, BadInputIsReported) {
  Dense fc(400, 120);
  EXPECT_ERROR(fc(Tensor::zeros({32, 300})),
               "Dense(in_channels=400, out_channels=120): expected a 2-D input (N, 400); got shape "
               "(32, 300), whose dim 1 (300) is not in_channels (400)");
  EXPECT_ERROR(fc(Tensor::zeros({400})),
               "Dense(in_channels=400, out_channels=120): expected a 2-D input (N, 400); got shape "
               "(400) (rank 1)",
               "needs its batch dim");
  EXPECT_ERROR(Dense(3, 4, {.activation = "swish"}), "Dense: activation 'swish' is not supported",
               "\"relu\"");
  EXPECT_ERROR(Dense(0, 4), "Dense: in_channels 0 and out_channels 4 must both be > 0");
}

// A convolution's output (N, C, H, W) given to Dense without Flatten: the error names the rank
// Dense expects and the fix, not only the mismatching last dim.
TEST(Dense, FourDimensionalInputIsToldToFlattenFirst) {
  Dense fc(512, 10);
  EXPECT_ERROR(fc(Tensor::zeros({32, 8, 8, 8})),
               "Dense(in_channels=512, out_channels=10): expected a 2-D input (N, 512); got a 4-D "
               "input of shape (32, 8, 8, 8): flatten it first (nn::Flatten or ops::flatten), "
               "which gives (32, 512).");
  EXPECT_ERROR(fc(Tensor::zeros({32, 3, 8, 8})), "flatten it first",
               "which gives (32, 192), "
               "whose dim 1 is not 512 either");
  // With the features last, more dims are taken: a sequence (N, T, in_channels).
  EXPECT_EQ(fc(Tensor::zeros({2, 7, 512})).shape(), Shape({2, 7, 10}));
}

// ---- Conv2d ----

// Direct convolution of x (N, C, H, W) with w (O, C, kH, kW), zero padding top/left = pad,
// stride s, plus bias.
Tensor conv_by_hand(const Tensor& x, const Tensor& w, const Tensor& b, int64_t pad, int64_t s,
                    int64_t out_h, int64_t out_w) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  const int64_t o = w.dim(0), kh = w.dim(2), kw = w.dim(3);
  std::vector<double> out;
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oy = 0; oy < out_h; ++oy)
        for (int64_t ox = 0; ox < out_w; ++ox) {
          double acc = b.at({oc});
          for (int64_t ic = 0; ic < c; ++ic)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * s + ky - pad, ix = ox * s + kx - pad;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += x.at({bi, ic, iy, ix}) * w.at({oc, ic, ky, kx});
              }
          out.push_back(acc);
        }
  return Tensor::from_vector<double>(out, {n, o, out_h, out_w});
}

TEST(Conv2d, ParametersAndOutputShapes) {
  Conv2d same(3, 6, 3);  // MindSpore's defaults: pad_mode "same", no bias
  EXPECT_EQ(names_of(same), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(same.weight.shape(), (Shape{6, 3, 3, 3}));
  EXPECT_EQ(same(Tensor::zeros({2, 3, 8, 8})).shape(), (Shape{2, 6, 8, 8}));
  Conv2d valid(1, 6, 5, {.pad_mode = "valid"});
  EXPECT_EQ(valid(Tensor::zeros({2, 1, 32, 32})).shape(), (Shape{2, 6, 28, 28}));
  Conv2d strided(3, 4, {3, 1}, {.stride = {2}, .has_bias = true});
  EXPECT_EQ(strided.weight.shape(), (Shape{4, 3, 3, 1}));
  EXPECT_EQ(strided(Tensor::zeros({1, 3, 7, 7})).shape(), (Shape{1, 4, 4, 4}));
  Conv2d grouped(4, 6, 3, {.group = 2});
  EXPECT_EQ(grouped.weight.shape(), (Shape{6, 2, 3, 3}));
  EXPECT_EQ(grouped(Tensor::zeros({1, 4, 5, 5})).shape(), (Shape{1, 6, 5, 5}));
}

TEST(Conv2d, ForwardMatchesDirectConvolution) {
  Conv2d conv(2, 3, 3, {.stride = {2, 2}, .pad_mode = "pad", .padding = {1}, .has_bias = true});
  conv.weight = random_f64({3, 2, 3, 3}, -1, 1, 27);
  conv.bias = random_f64({3}, -1, 1, 28);
  const Tensor x = random_f64({2, 2, 7, 6}, -1, 1, 29);
  const Tensor y = conv(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4, 3}));
  EXPECT_TRUE(all_close(y, conv_by_hand(x, conv.weight, conv.bias, 1, 2, 4, 3), 1e-12));

  // Float32 (oneDNN) agrees with the Float64 reference.
  Conv2d conv32(2, 3, 3, {.stride = {2, 2}, .pad_mode = "pad", .padding = {1}, .has_bias = true});
  conv32.weight = ops::cast(conv.weight, DType::kFloat32);
  conv32.bias = ops::cast(conv.bias, DType::kFloat32);
  EXPECT_TRUE(
      all_close(ops::cast(conv32(ops::cast(x, DType::kFloat32)), DType::kFloat64), y, 1e-5, 1e-5));
}

TEST(Conv2d, GradientsThroughTheLayer) {
  Conv2d conv(2, 3, 3, {.pad_mode = "pad", .padding = {1, 0, 2, 1}, .has_bias = true});
  const auto fn = [&](const std::vector<Tensor>& in) {
    conv.weight = in[1];
    conv.bias = in[2];
    return conv(in[0]);
  };
  EXPECT_TRUE(
      testing::gradcheck(fn, {random_f64({2, 2, 4, 5}, -1, 1, 30),
                              random_f64({3, 2, 3, 3}, -1, 1, 31), random_f64({3}, -1, 1, 32)}));
}

TEST(Conv2d, BadInputIsReported) {
  Conv2d conv(3, 6, 5);
  EXPECT_ERROR(conv(Tensor::zeros({2, 1, 28, 28})),
               "Conv2d(in_channels=3, out_channels=6, kernel_size=(5, 5)): expected a 4-D input "
               "(N, 3, H, W); got shape (2, 1, 28, 28), whose dim 1 (1) is not in_channels");
  EXPECT_ERROR(conv(Tensor::zeros({3, 28, 28})),
               "expected a 4-D input (N, 3, H, W); got shape (3, 28, 28) (rank 3)");
  EXPECT_ERROR(Conv2d(3, 6, 3, {.padding = {1}}), "Conv2d: padding (1, 1, 1, 1)",
               "pad_mode \"same\"", "unless pad_mode is \"pad\"");
  EXPECT_ERROR(Conv2d(3, 6, 3, {.pad_mode = "full"}), "Conv2d: pad_mode 'full' is not supported",
               "\"valid\", \"same\" or \"pad\"");
  EXPECT_ERROR(Conv2d(3, 6, 3, {.group = 2}), "Conv2d: group 2 must be >= 1 and divide",
               "in_channels 3");
  EXPECT_ERROR(Conv2d(3, 6, {3, 3, 3}), "Conv2d: kernel_size has 3 values (3, 3, 3)");
  EXPECT_ERROR(Conv2d(3, 6, 3, {.stride = {0}}), "Conv2d: stride (0) has a value below 1");
}

// ---- pooling ----

TEST(Pool2d, MaxAndAverageOverWindows) {
  const Tensor x = Tensor::arange(0, 16, 1, DType::kFloat64).view({1, 1, 4, 4});
  MaxPool2d max_pool(2, 2);
  AvgPool2d avg_pool(2, 2);
  EXPECT_EQ(max_pool(x).to_vector<double>(), (std::vector<double>{5, 7, 13, 15}));
  EXPECT_EQ(avg_pool(x).to_vector<double>(), (std::vector<double>{2.5, 4.5, 10.5, 12.5}));
  EXPECT_EQ(MaxPool2d(3, 1)(x).shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(MaxPool2d(3, 2, "SAME")(x).shape(), (Shape{1, 1, 2, 2}));
  EXPECT_ERROR(MaxPool2d(2, 2, "pad"), "MaxPool2d: pad_mode 'pad' is not supported");
  EXPECT_ERROR(AvgPool2d(0, 1), "AvgPool2d: kernel_size 0 and stride 1 must both be >= 1");
}

// ---- activations and Flatten ----

TEST(Activations, ValuesAtKnownPoints) {
  const Tensor x = Tensor::from_vector<double>({-2.0, 0.0, 1.0});
  EXPECT_EQ(ReLU()(x).to_vector<double>(), (std::vector<double>{0, 0, 1}));
  EXPECT_TRUE(all_close(
      Sigmoid()(x),
      Tensor::from_vector<double>({1 / (1 + std::exp(2.0)), 0.5, 1 / (1 + std::exp(-1.0))}),
      1e-12));
  EXPECT_TRUE(all_close(Tanh()(x),
                        Tensor::from_vector<double>({std::tanh(-2.0), 0, std::tanh(1.0)}), 1e-12));
  EXPECT_TRUE(all_close(GELU()(x),
                        Tensor::from_vector<double>({-2.0 * 0.5 * std::erfc(2.0 / std::sqrt(2.0)),
                                                     0, 0.5 * std::erfc(-1.0 / std::sqrt(2.0))}),
                        1e-12));
  const Tensor s = Softmax(0)(Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}));
  const double e = std::exp(2.0);
  EXPECT_TRUE(all_close(
      s, Tensor::from_vector<double>({1 / (1 + e), 1 / (1 + e), e / (1 + e), e / (1 + e)}, {2, 2}),
      1e-12));
  EXPECT_EQ(Flatten()(Tensor::zeros({2, 3, 4, 5})).shape(), (Shape{2, 60}));
}

// ---- Dropout ----

TEST(Dropout, IdentityInEvaluationAndWithPZero) {
  Dropout dropout(0.5);
  const Tensor x = Tensor::ones({100});
  EXPECT_TRUE(dropout(x).shares_storage_with(x));
  Dropout none(0.0);
  none.set_train();
  EXPECT_TRUE(none(x).shares_storage_with(x));
}

TEST(Dropout, TrainingZeroesAboutPAndRescalesTheRest) {
  Dropout dropout(0.3);
  dropout.set_train();
  set_seed(5);
  const Tensor y = dropout(Tensor::ones({20000}));
  int64_t zeros = 0;
  for (float v : y.to_vector<float>()) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      ASSERT_FLOAT_EQ(v, 1.0f / 0.7f);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 20000.0, 0.3, 0.015);
  set_seed(5);
  EXPECT_EQ(dropout(Tensor::ones({20000})).to_vector<float>(), y.to_vector<float>());
}

TEST(Dropout, BadProbabilityIsReported) {
  EXPECT_ERROR(Dropout(1.0), "Dropout: p is 1; expected 0 <= p < 1");
  EXPECT_ERROR(Dropout(-0.1), "Dropout: p is -0.1");
}

// ---- Embedding ----

TEST(Embedding, LooksUpRowsAndAccumulatesTheirGradients) {
  Embedding emb(10, 4);
  EXPECT_EQ(names_of(emb), (std::vector<std::string>{"embedding_table"}));
  emb.embedding_table = random_f64({10, 4}, -1, 1, 33).set_requires_grad(true);
  const Tensor ids = Tensor::from_vector<int32_t>({3, 0, 3, 9, 1, 2}, {2, 3});
  const Tensor y = emb(ids);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(y.at({1, 0, k}), emb.embedding_table.at({9, k}));
    EXPECT_EQ(y.at({0, 2, k}), emb.embedding_table.at({3, k}));
  }
  autodiff::backward(ops::reduce_sum(y));
  const Tensor g = emb.embedding_table.grad();
  EXPECT_EQ(g.at({3, 0}), 2.0);  // id 3 is used twice
  EXPECT_EQ(g.at({9, 1}), 1.0);
  EXPECT_EQ(g.at({5, 2}), 0.0);
  EXPECT_EQ(emb(Tensor::from_vector<int64_t>({7})).shape(), (Shape{1, 4}));
}

TEST(Embedding, BadInputIsReported) {
  Embedding emb(10, 4);
  EXPECT_ERROR(emb(Tensor::zeros({3})),
               "Embedding(vocab_size=10, embedding_size=4): ids have dtype Float32; expected Int32 "
               "or Int64");
  EXPECT_ERROR(Embedding(0, 4), "Embedding: vocab_size 0 and embedding_size 4 must both be > 0");
}

// ---- SequentialCell ----

TEST(SequentialCell, RunsCellsInOrderAndNamesThemByIndex) {
  auto fc1 = std::make_shared<Dense>(3, 5);
  auto fc2 = std::make_shared<Dense>(5, 2);
  SequentialCell seq({fc1, std::make_shared<ReLU>()});
  seq.append(fc2);
  EXPECT_EQ(names_of(seq), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  const Tensor x = Tensor::normal({4, 3});
  EXPECT_TRUE(all_close(seq(x), (*fc2)(ops::relu((*fc1)(x)))));
  EXPECT_ERROR(seq.append(nullptr), "SequentialCell: child cell '3' is null");
}

// A small convolutional network, Float64 end to end, checked by finite differences with
// respect to its input and every parameter.
TEST(SequentialCell, GradientsThroughAConvolutionalNetwork) {
  auto conv = std::make_shared<Conv2d>(1, 2, 3, Conv2dOptions{.has_bias = true});
  auto fc = std::make_shared<Dense>(8, 3);
  SequentialCell net({conv, std::make_shared<Tanh>(), std::make_shared<AvgPool2d>(2, 2),
                      std::make_shared<Flatten>(), fc});
  const auto fn = [&](const std::vector<Tensor>& in) {
    conv->weight = in[1];
    conv->bias = in[2];
    fc->weight = in[3];
    fc->bias = in[4];
    return net(in[0]);
  };
  EXPECT_TRUE(testing::gradcheck(
      fn, {random_f64({2, 1, 4, 4}, -1, 1, 34), random_f64({2, 1, 3, 3}, -1, 1, 38),
           random_f64({2}, -1, 1, 35), random_f64({3, 8}, -1, 1, 36), random_f64({3}, -1, 1, 37)}));
}

}  // namespace
}  // namespace cleave::nn
