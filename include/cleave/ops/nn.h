// Neural-network primitives, computed with oneDNN where it has them.
#pragma once

#include <string>
#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::ops {

struct MatMulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
};
// 2-D: (M, K) x (K, N) -> (M, N), with optional transposes.
Tensor matmul(const Tensor& a, const Tensor& b, const MatMulOptions& options = {});
// Batched over leading dims (broadcast): (..., M, K) x (..., K, N) -> (..., M, N).
Tensor batch_matmul(const Tensor& a, const Tensor& b, const MatMulOptions& options = {});
// Adds a 1-D bias along the channel axis (dim 1 for NCHW, the last dim for 2-D).
Tensor bias_add(const Tensor& x, const Tensor& bias);

struct Conv2DOptions {
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> dilation = {1, 1};
  std::string pad_mode = "valid";           // "valid" | "same" | "pad"
  std::vector<int64_t> pad = {0, 0, 0, 0};  // top, bottom, left, right (pad_mode "pad")
  int64_t group = 1;
};
// x (N, C, H, W), weight (O, C/group, kH, kW) -> (N, O, H', W').
Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2DOptions& options = {});

struct Pool2DOptions {
  std::vector<int64_t> kernel_size = {1, 1};
  std::vector<int64_t> stride = {1, 1};
  std::string pad_mode = "valid";  // "valid" | "same"
};
Tensor max_pool2d(const Tensor& x, const Pool2DOptions& options);
Tensor avg_pool2d(const Tensor& x, const Pool2DOptions& options);

Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);

struct BatchNormOptions {
  bool is_training = true;
  double epsilon = 1e-5;
};
struct BatchNormResult {
  Tensor y;
  Tensor batch_mean;  // per channel; in inference mode the running mean passed in
  Tensor batch_var;   // per channel, biased (divides by N·H·W)
};
// x (N, C, ...) normalised per channel. In training the batch statistics are used (and returned
// so the caller can update running statistics); in inference running_mean/var are used.
BatchNormResult batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           const Tensor& running_mean, const Tensor& running_var,
                           const BatchNormOptions& options);

// Normalises over the dims from `begin_norm_axis` on; gamma/beta have those dims' shape.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  int64_t begin_norm_axis = -1, double epsilon = 1e-5);

// Zeroes each element with probability 1 - keep_prob and scales the rest by 1/keep_prob, drawing
// from the global generator (set_seed). keep_prob in (0, 1].
Tensor dropout(const Tensor& x, double keep_prob);

// Per-sample loss of logits (N, C) against dense probabilities (N, C) -> (N).
Tensor softmax_cross_entropy_with_logits(const Tensor& logits, const Tensor& labels);
// Per-sample loss of logits (N, C) against integer class ids (N) in [0, C) -> (N).
Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& logits, const Tensor& labels);
// Elementwise (a - b)^2 (reduction is the caller's).
Tensor mse(const Tensor& a, const Tensor& b);

// x (N, C, H, W) -> (N, C, size[0], size[1]).
Tensor resize_bilinear(const Tensor& x, const std::vector<int64_t>& size,
                       bool align_corners = false);
Tensor resize_nearest(const Tensor& x, const std::vector<int64_t>& size,
                      bool align_corners = false);

}  // namespace cleave::ops
