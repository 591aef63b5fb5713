// ResNet as in MindSpore's tutorial resnet.py (seed 001): bottleneck residual blocks of expansion
// 4 (1x1 -> 3x3 with the block's stride -> 1x1, each followed by BatchNorm, a 1x1 convolution
// and BatchNorm on the shortcut where the shape changes), a 7x7/2 stem with max pooling, four
// stages and a Dense classifier. resnet50(batch_size, num_classes) is the seed's 3-4-6-3 network
// on 224x224 images; the same code takes other depths and widths for tests and benches
// (ResNetConfig). The final pooling averages over the whole feature map, which is the seed's 7x7
// average pool at 224x224 and lets the network take smaller images (32x32 CIFAR-10 as it is).
// Shared by examples/resnet_data_parallel, the tests and bench/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cleave/cleave.h"

namespace cleave::examples {

struct ResNetConfig {
  std::vector<int64_t> blocks = {3, 4, 6, 3};  // bottleneck blocks per stage (ResNet-50)
  // Output channels of each stage (after the 4x expansion) and of the stem.
  std::vector<int64_t> channels = {256, 512, 1024, 2048};
  int64_t stem_channels = 64;
  int64_t num_classes = 10;
};

namespace resnet_detail {

// resnet.py's initialisation: XavierUniform convolution and Dense weights, BatchNorm with eps
// 1e-4, and the last BatchNorm of each block starting with gamma 0, so that every block starts
// as its shortcut (without it the seed's lr 0.01 with momentum 0.9 diverges in a few steps).
inline std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t kernel,
                                        int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(in, out, kernel,
                                      nn::Conv2dOptions{.stride = {stride, stride},
                                                        .pad_mode = "same",
                                                        .has_bias = false,
                                                        .weight_init = nn::XavierUniform()});
}

inline std::shared_ptr<nn::BatchNorm2d> bn(int64_t channels, bool last = false) {
  return std::make_shared<nn::BatchNorm2d>(
      channels, nn::BatchNorm2dOptions{.eps = 1e-4, .gamma_init = last ? "zeros" : "ones"});
}

}  // namespace resnet_detail

// The bottleneck block: out = relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x)))))))) + shortcut).
class ResidualBlock : public nn::Cell {
 public:
  ResidualBlock(int64_t in_channels, int64_t out_channels, int64_t stride) : Cell("ResidualBlock") {
    const int64_t mid = out_channels / 4;  // expansion 4
    conv1 = register_module("conv1", resnet_detail::conv(in_channels, mid, 1));
    bn1 = register_module("bn1", resnet_detail::bn(mid));
    conv2 = register_module("conv2", resnet_detail::conv(mid, mid, 3, stride));
    bn2 = register_module("bn2", resnet_detail::bn(mid));
    conv3 = register_module("conv3", resnet_detail::conv(mid, out_channels, 1));
    bn3 = register_module("bn3", resnet_detail::bn(out_channels, /*last=*/true));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
    if (stride != 1 || in_channels != out_channels) {
      conv_down = register_module("conv_down_sample",
                                  resnet_detail::conv(in_channels, out_channels, 1, stride));
      bn_down = register_module("bn_down_sample", resnet_detail::bn(out_channels));
    }
  }

  Tensor construct(const Tensor& x) override {
    Tensor out = (*relu)((*bn1)((*conv1)(x)));
    out = (*relu)((*bn2)((*conv2)(out)));
    out = (*bn3)((*conv3)(out));
    const Tensor identity = conv_down ? (*bn_down)((*conv_down)(x)) : x;
    return (*relu)(ops::add(out, identity));
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3, conv_down;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3, bn_down;
  std::shared_ptr<nn::ReLU> relu;
};

class ResNet : public nn::Cell {
 public:
  explicit ResNet(const ResNetConfig& config) : Cell("ResNet") {
    CLEAVE_CHECK_ARG(config.blocks.size() == config.channels.size() && !config.blocks.empty(),
                     "ResNet: {} stage block counts and {} stage widths; expected one width per "
                     "stage",
                     config.blocks.size(), config.channels.size());
    conv1 = register_module("conv1", resnet_detail::conv(3, config.stem_channels, 7, 2));
    bn1 = register_module("bn1", resnet_detail::bn(config.stem_channels));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
    maxpool = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, "same"));
    int64_t in = config.stem_channels;
    for (size_t s = 0; s < config.blocks.size(); ++s) {
      auto stage = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{});
      for (int64_t b = 0; b < config.blocks[s]; ++b) {
        const int64_t stride = b == 0 && s > 0 ? 2 : 1;
        stage->append(std::make_shared<ResidualBlock>(in, config.channels[s], stride));
        in = config.channels[s];
      }
      stages.push_back(register_module("layer" + std::to_string(s + 1), stage));
    }
    fc = register_module("end_point", std::make_shared<nn::Dense>(
                                          in, config.num_classes,
                                          nn::DenseOptions{.weight_init = nn::XavierUniform()}));
  }

  Tensor construct(const Tensor& x) override {
    Tensor out = (*maxpool)((*relu)((*bn1)((*conv1)(x))));
    for (const auto& stage : stages) out = (*stage)(out);
    // Global average pooling: (N, C, H, W) -> (N, C).
    out = ops::reduce_mean(out, {.axes = {2, 3}});
    return (*fc)(out);
  }

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> maxpool;
  std::vector<std::shared_ptr<nn::SequentialCell>> stages;
  std::shared_ptr<nn::Dense> fc;
};

// The seed's resnet50(batch_size, num_classes): batch_size is accepted as the seed passes it (the
// network itself takes any batch).
inline std::shared_ptr<ResNet> resnet50(int64_t /*batch_size*/, int64_t num_classes) {
  return std::make_shared<ResNet>(ResNetConfig{.num_classes = num_classes});
}

// A small ResNet for CIFAR-sized tests and benches: one bottleneck block per stage, a quarter of
// ResNet-50's widths.
inline std::shared_ptr<ResNet> resnet_small(int64_t num_classes) {
  return std::make_shared<ResNet>(ResNetConfig{.blocks = {1, 1, 1, 1},
                                               .channels = {64, 128, 256, 512},
                                               .stem_channels = 16,
                                               .num_classes = num_classes});
}

// The seed's loss: SoftmaxCrossEntropyWithLogits expanded into small operators exactly as its
// SoftmaxCrossEntropyExpand writes it (ReduceMax, Sub, Exp, ReduceSum keep_dims, Div, Log,
// OneHot for sparse labels, Mul, the scalar -1, ReduceMean).
class SoftmaxCrossEntropyExpand : public nn::Cell {
 public:
  explicit SoftmaxCrossEntropyExpand(bool sparse = false)
      : Cell("SoftmaxCrossEntropyExpand"), sparse_(sparse) {}

  Tensor construct(const Tensor& logit, const Tensor& label) override {
    const Tensor logit_max = ops::reduce_max(logit, {.axes = {-1}, .keep_dims = true});
    const Tensor exp = ops::exp(ops::sub(logit, logit_max));
    const Tensor exp_sum = ops::reduce_sum(exp, {.axes = {-1}, .keep_dims = true});
    const Tensor softmax_result = ops::div(exp, exp_sum);
    Tensor target = label;
    if (sparse_) {
      target = ops::one_hot(label, {.depth = logit.shape()[1], .on_value = 1.0, .off_value = 0.0});
    }
    const Tensor softmax_result_log = ops::log(softmax_result);
    Tensor loss = ops::reduce_sum(ops::mul(softmax_result_log, target), {.axes = {-1}});
    loss = ops::mul(Tensor::scalar(-1.0), loss);
    return ops::reduce_mean(loss, {.axes = {-1}});
  }

 private:
  bool sparse_;
};

}  // namespace cleave::examples
