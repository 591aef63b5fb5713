// Seed 000's LeNet-5 on MNIST, from MindSpore's "Distributed Graph Partition" tutorial (LeNet on
// MNIST with place()), shared by examples/lenet (one process) and examples/lenet_place (the same
// program with place() across workers): the seed's create_dataset pipeline, its LeNet with
// TruncatedNormal(0.02) weights, Momentum(0.01, 0.9) and SoftmaxCrossEntropyWithLogits(sparse,
// mean), written as the seed's lenet.py.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cleave/cleave.h"

namespace cleave::examples {

namespace ds = cleave::dataset;
namespace CV = cleave::dataset::vision;
namespace C = cleave::dataset::transforms;

// create dataset for train or test
inline ds::DatasetPtr create_dataset(const std::string& data_path, int64_t batch_size = 32,
                                     int64_t repeat_size = 1, int num_parallel_workers = 1) {
  // define dataset
  ds::DatasetPtr mnist_ds = ds::MnistDataset(data_path);

  const int64_t resize_height = 32, resize_width = 32;
  const double rescale = 1.0 / 255.0;
  const double shift = 0.0;
  const double rescale_nml = 1 / 0.3081;
  const double shift_nml = -1 * 0.1307 / 0.3081;

  // define map operations
  CV::Resize resize_op({resize_height, resize_width}, CV::Inter::kLinear);  // Bilinear mode
  CV::Rescale rescale_nml_op(rescale_nml, shift_nml);
  CV::Rescale rescale_op(rescale, shift);
  CV::HWC2CHW hwc2chw_op;
  C::TypeCast type_cast_op(DType::kInt32);

  // apply map operations on images
  mnist_ds = mnist_ds->map({type_cast_op}, {"label"}, num_parallel_workers);
  mnist_ds = mnist_ds->map({resize_op}, {"image"}, num_parallel_workers);
  mnist_ds = mnist_ds->map({rescale_op}, {"image"}, num_parallel_workers);
  mnist_ds = mnist_ds->map({rescale_nml_op}, {"image"}, num_parallel_workers);
  mnist_ds = mnist_ds->map({hwc2chw_op}, {"image"}, num_parallel_workers);

  // apply DatasetOps
  const int64_t buffer_size = 10000;
  mnist_ds = mnist_ds->shuffle(buffer_size);
  mnist_ds = mnist_ds->batch(batch_size, /*drop_remainder=*/true);
  mnist_ds = mnist_ds->repeat(repeat_size);
  return mnist_ds;
}

// weight initial for conv layer
inline std::shared_ptr<nn::Conv2d> conv(int64_t in_channels, int64_t out_channels,
                                        int64_t kernel_size, int64_t stride = 1,
                                        int64_t padding = 0) {
  return std::make_shared<nn::Conv2d>(
      in_channels, out_channels, std::vector<int64_t>{kernel_size, kernel_size},
      nn::Conv2dOptions{.stride = {stride, stride},
                        .pad_mode = "valid",
                        .padding = {padding, padding, padding, padding},
                        .has_bias = false,
                        .weight_init = nn::TruncatedNormal(0.02)});
}

// weight initial for fc layer
inline std::shared_ptr<nn::Dense> fc_with_initialize(int64_t input_channels, int64_t out_channels) {
  return std::make_shared<nn::Dense>(input_channels, out_channels,
                                     nn::DenseOptions{.weight_init = nn::TruncatedNormal(0.02),
                                                      .bias_init = nn::TruncatedNormal(0.02)});
}

class LeNet : public nn::Cell {
 public:
  explicit LeNet(int64_t num_class = 10, int64_t channel = 1) : Cell("LeNet") {
    conv1 = register_module("conv1", conv(channel, 6, 5));
    conv2 = register_module("conv2", conv(6, 16, 5));
    fc1 = register_module("fc1", fc_with_initialize(16 * 5 * 5, 120));
    fc2 = register_module("fc2", fc_with_initialize(120, 84));
    fc3 = register_module("fc3", fc_with_initialize(84, num_class));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
    max_pool2d = register_module("max_pool2d", std::make_shared<nn::MaxPool2d>(2, 2));
    flatten = register_module("flatten", std::make_shared<nn::Flatten>());
  }

  Tensor construct(const Tensor& input) override {
    Tensor x = (*conv1)(input);
    x = (*relu)(x);
    x = (*max_pool2d)(x);
    x = (*conv2)(x);
    x = (*relu)(x);
    x = (*max_pool2d)(x);
    x = (*flatten)(x);
    x = (*fc1)(x);
    x = (*relu)(x);
    x = (*fc2)(x);
    x = (*relu)(x);
    x = (*fc3)(x);
    return x;
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dense> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> max_pool2d;
  std::shared_ptr<nn::Flatten> flatten;
};

inline std::shared_ptr<optim::Optimizer> get_optimizer(const nn::Cell& net, double lr = 0.01) {
  const double momentum = 0.9;
  return std::make_shared<optim::Momentum>(net.trainable_params(), lr, momentum);
}

inline nn::CellPtr get_loss() {
  return std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean");
}

}  // namespace cleave::examples
