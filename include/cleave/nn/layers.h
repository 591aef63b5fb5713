// Layers (mindspore.nn): Dense, Conv2d, pooling, activations, normalisation, Dropout, Embedding,
// SequentialCell. Parameter names and shapes follow MindSpore (and PyTorch): Dense weight is
// (out_channels, in_channels), Conv2d weight is (out, in / group, kH, kW).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cleave/nn/cell.h"
#include "cleave/nn/init.h"

namespace cleave::nn {

struct DenseOptions {
  Initializer weight_init = "normal";
  Initializer bias_init = "zeros";
  bool has_bias = true;
  // Activation applied to the output: "" (none), "relu", "gelu", "sigmoid", "tanh".
  std::string activation;
};
// y = x · Wᵀ + b for x (N, in_channels).
class Dense : public Cell {
 public:
  Dense(int64_t in_channels, int64_t out_channels, DenseOptions options = {});
  Tensor construct(const Tensor& x) override;
  // Its operators, for shard() / place() (MindSpore's names).
  ir::Primitive matmul{"MatMul", {{"transpose_b", true}}}, bias_add{"BiasAdd"};
  Tensor weight, bias;  // bias undefined when has_bias is false

 private:
  int64_t in_channels_, out_channels_;
  std::string activation_;
};

struct Conv2dOptions {
  std::vector<int64_t> stride = {1, 1};
  std::string pad_mode = "same";                // MindSpore's default; "valid" | "same" | "pad"
  std::vector<int64_t> padding = {0, 0, 0, 0};  // top, bottom, left, right (pad_mode "pad")
  std::vector<int64_t> dilation = {1, 1};
  int64_t group = 1;
  bool has_bias = false;
  Initializer weight_init = "normal";
  Initializer bias_init = "zeros";
};
class Conv2d : public Cell {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
         Conv2dOptions options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {})
      : Conv2d(in_channels, out_channels, {kernel_size, kernel_size}, std::move(options)) {}
  Tensor construct(const Tensor& x) override;
  ir::Primitive conv2d{"Conv2D"}, bias_add{"BiasAdd"};  // for shard() / place()
  Tensor weight, bias;

 private:
  int64_t in_channels_, out_channels_;
  std::vector<int64_t> kernel_size_;
  Conv2dOptions options_;  // normalised: 2 strides and dilations, 4 paddings
};

class MaxPool2d : public Cell {
 public:
  MaxPool2d(int64_t kernel_size = 1, int64_t stride = 1, std::string pad_mode = "valid");
  Tensor construct(const Tensor& x) override;
  ir::Primitive max_pool{"MaxPool2D"};  // for shard() / place()

 private:
  int64_t kernel_size_, stride_;
  std::string pad_mode_;
};
class AvgPool2d : public Cell {
 public:
  AvgPool2d(int64_t kernel_size = 1, int64_t stride = 1, std::string pad_mode = "valid");
  Tensor construct(const Tensor& x) override;
  ir::Primitive avg_pool{"AvgPool2D"};  // for shard() / place()

 private:
  int64_t kernel_size_, stride_;
  std::string pad_mode_;
};

class ReLU : public Cell {
 public:
  ReLU();
  Tensor construct(const Tensor& x) override;
  ir::Primitive relu{"ReLU"};  // for shard() / place()
};
class GELU : public Cell {
 public:
  GELU();
  Tensor construct(const Tensor& x) override;
  ir::Primitive gelu{"GeLU"};  // for shard() / place()
};
class Sigmoid : public Cell {
 public:
  Sigmoid();
  Tensor construct(const Tensor& x) override;
  ir::Primitive sigmoid{"Sigmoid"};  // for shard() / place()
};
class Tanh : public Cell {
 public:
  Tanh();
  Tensor construct(const Tensor& x) override;
  ir::Primitive tanh{"Tanh"};  // for shard() / place()
};
class Softmax : public Cell {
 public:
  explicit Softmax(int64_t axis = -1);
  Tensor construct(const Tensor& x) override;
  ir::Primitive softmax{"Softmax"};  // for shard() / place()

 private:
  int64_t axis_;
};
// (N, ...) -> (N, prod(...)).
class Flatten : public Cell {
 public:
  Flatten();
  Tensor construct(const Tensor& x) override;
  ir::Primitive flatten{"Flatten"};  // for shard() / place()
};

// Normalises each channel of (N, C, H, W); in training it uses batch statistics and updates
// moving_mean/moving_variance: moving = momentum * moving + (1 - momentum) * batch (MindSpore's
// convention, momentum 0.9).
struct BatchNorm2dOptions {
  double eps = 1e-5;
  // MindSpore's convention: moving = momentum * moving + (1 - momentum) * batch, so 0.9 keeps 90%
  // of the old statistic (PyTorch's momentum = 1 - this; its 0.1 is 0.9 here). A value below 0.5
  // is accepted with a warning on stderr, printed once per process.
  double momentum = 0.9;
  Initializer gamma_init = "ones";
  Initializer beta_init = "zeros";
};
class BatchNorm2d : public Cell {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNorm2dOptions options = {});
  Tensor construct(const Tensor& x) override;
  ir::Primitive batch_norm{"BatchNorm"};             // for shard() / place()
  Tensor gamma, beta, moving_mean, moving_variance;  // the moving statistics are not trainable

 private:
  int64_t num_features_;
  double eps_, momentum_;
};

// Normalises over the trailing dims given by `normalized_shape`.
class LayerNorm : public Cell {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double epsilon = 1e-5);
  Tensor construct(const Tensor& x) override;
  ir::Primitive layer_norm{"LayerNorm"};  // for shard() / place()
  Tensor gamma, beta;

 private:
  std::vector<int64_t> normalized_shape_;
  double epsilon_;
};

// Drops each element with probability p (0 <= p < 1) in training; identity in evaluation.
class Dropout : public Cell {
 public:
  explicit Dropout(double p = 0.5);
  Tensor construct(const Tensor& x) override;
  ir::Primitive dropout{"Dropout"};  // for shard() / place()

 private:
  double p_;
};

// Integer ids (any shape) -> vectors: out shape ids.shape + (embedding_size).
class Embedding : public Cell {
 public:
  Embedding(int64_t vocab_size, int64_t embedding_size,
            Initializer embedding_table_init = "normal");
  Tensor construct(const Tensor& ids) override;
  ir::Primitive gather{"Gather"};  // for shard() / place()
  Tensor embedding_table;

 private:
  int64_t vocab_size_, embedding_size_;
};

// Runs its cells in order; children are named "0", "1", ...
class SequentialCell : public Cell {
 public:
  explicit SequentialCell(std::vector<CellPtr> cells);
  Tensor construct(const Tensor& x) override;
  void append(CellPtr cell);
};

}  // namespace cleave::nn
