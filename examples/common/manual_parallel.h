// Seed 002's network (examples/manual_parallel): a Dense 784-512-512-10 network that takes its
// rank's rows of the global batch inside construct, and the loss wrapper that all-reduces the
// local rows' mean loss and divides it by the device count. Shared by the example and the tests
// that compile its training step.
#pragma once

#include <memory>
#include <vector>

#include "cleave/cleave.h"

namespace cleave::examples {

// Rows [rank * n / size, (rank + 1) * n / size) of x along dim 0.
inline Tensor shard_rows(const Tensor& x, int rank, int size) {
  const int64_t n = x.dim(0);
  const int64_t begin = rank * n / size, end = (rank + 1) * n / size;
  std::vector<int64_t> starts(x.shape().dims().size(), 0);
  std::vector<int64_t> sizes = x.shape().dims();
  starts[0] = begin;
  sizes[0] = end - begin;
  return ops::slice(x, starts, sizes);
}

class Network : public nn::Cell {
 public:
  Network(int rank, int device_num) : Cell("Network"), rank_(rank), device_num_(device_num) {
    flatten = register_module("flatten", std::make_shared<nn::Flatten>());
    layer1 = register_module("layer1", std::make_shared<nn::Dense>(28 * 28, 512));
    relu1 = register_module("relu1", std::make_shared<nn::ReLU>());
    layer2 = register_module("layer2", std::make_shared<nn::Dense>(512, 512));
    relu2 = register_module("relu2", std::make_shared<nn::ReLU>());
    layer3 = register_module("layer3", std::make_shared<nn::Dense>(512, 10));
  }

  Tensor construct(const Tensor& input) override {
    Tensor x = shard_rows(input, rank_, device_num_);
    x = (*flatten)(x);
    x = (*layer1)(x);
    x = (*relu1)(x);
    x = (*layer2)(x);
    x = (*relu2)(x);
    return (*layer3)(x);
  }

  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Dense> layer1, layer2, layer3;
  std::shared_ptr<nn::ReLU> relu1, relu2;

 private:
  int rank_, device_num_;
};

// The network with seed 002's ReduceLoss: the local rows' mean loss, AllReduce'd and divided by
// the device count.
class NetWithReduceLoss : public nn::Cell {
 public:
  NetWithReduceLoss(std::shared_ptr<Network> net, int rank, int device_num)
      : Cell("NetWithReduceLoss"), rank_(rank), device_num_(device_num) {
    network = register_module("network", std::move(net));
    loss = register_module("loss", std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(
                                       /*sparse=*/true, "mean"));
  }

  Tensor construct(const Tensor& data, const Tensor& label) override {
    Tensor logits = (*network)(data);
    Tensor local_label = shard_rows(label, rank_, device_num_);
    Tensor loss_value = (*loss)(logits, local_label);
    return ops::all_reduce(loss_value) / static_cast<double>(device_num_);
  }

  std::shared_ptr<Network> network;
  std::shared_ptr<nn::SoftmaxCrossEntropyWithLogits> loss;

 private:
  int rank_, device_num_;
};

}  // namespace cleave::examples
