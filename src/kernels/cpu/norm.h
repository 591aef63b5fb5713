// Batch and layer normalisation kernels: forward and backward. Float32 runs on oneDNN, Float64 on
// reference loops.
//
// Both normalise x as x̂ = (x − mean)·rstd with rstd = 1/sqrt(var + epsilon) and the biased
// variance (divided by the count m of the elements averaged), then y = gamma·x̂ + beta.
#pragma once

#include <cstdint>
#include <string>

#include "cleave/core/tensor.h"

namespace cleave::kernels::cpu {

// x viewed as (n, c, spatial): statistics per channel c over m = n·spatial elements.
struct BatchNormGeometry {
  int64_t n = 0, c = 0, spatial = 1;
  double epsilon = 1e-5;
  // Training: statistics of this batch (returned in mean/var). Inference: the given running
  // statistics.
  bool training = true;

  std::string key() const;
};

// Training: writes y and the batch mean/var (biased) into mean_out/var_out. Inference: normalises
// with running_mean/running_var and copies them into mean_out/var_out. gamma, beta and the four
// statistics tensors have c elements.
void batch_norm_forward(const BatchNormGeometry& g, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& y, const Tensor& mean_out, const Tensor& var_out);

// Gradients of sum(y · dy) where y = batch_norm_forward(...), given the mean/var used by the
// forward (the batch statistics in training, the running ones in inference):
//   dx (shape of x); dgamma, dbeta (c).
//   dmean, dvar (c): in inference the gradients for the running statistics (y depends on them);
//   in training zeros (y depends on the batch statistics only, whose dependence on x is in dx).
void batch_norm_backward(const BatchNormGeometry& g, const Tensor& dy, const Tensor& x,
                         const Tensor& gamma, const Tensor& mean, const Tensor& var,
                         const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                         const Tensor& dmean, const Tensor& dvar);

// x viewed as (rows, cols): statistics per row over its cols elements; gamma and beta have cols
// elements, mean and var rows elements.
struct LayerNormGeometry {
  int64_t rows = 0, cols = 0;
  double epsilon = 1e-5;

  std::string key() const;
};

void layer_norm_forward(const LayerNormGeometry& g, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, const Tensor& y, const Tensor& mean, const Tensor& var);
// Gradients of sum(y · dy) with respect to x, gamma and beta, given the forward's mean and var.
void layer_norm_backward(const LayerNormGeometry& g, const Tensor& dy, const Tensor& x,
                         const Tensor& gamma, const Tensor& mean, const Tensor& var,
                         const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta);

}  // namespace cleave::kernels::cpu
