// Parameter initializers (mindspore.common.initializer).
#pragma once

#include <functional>
#include <string>

#include "cleave/core/tensor.h"

namespace cleave::nn {

// Makes a tensor of a given shape and dtype; draws from the global generator (set_seed).
class Initializer {
 public:
  using Fn = std::function<Tensor(const Shape&, DType)>;
  Initializer(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  // By MindSpore's names: "normal" (= Normal(0.01)), "truncatednormal" (= TruncatedNormal(0.01)),
  // "uniform", "he_uniform", "he_normal", "xavier_uniform", "zeros", "ones". Throws Error listing
  // the accepted names for anything else.
  Initializer(const char* name);         // NOLINT: implicit so that layers accept "normal"
  Initializer(const std::string& name);  // NOLINT

  Tensor operator()(const Shape& shape, DType dtype = DType::kFloat32) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  Fn fn_;
};

// N(mean, sigma²); sigma > 0.
Initializer Normal(double sigma = 0.01, double mean = 0.0);
// N(mean, sigma²) truncated to mean ± 2·sigma.
Initializer TruncatedNormal(double sigma = 0.01, double mean = 0.0);
// U(-scale, scale); scale > 0.
Initializer Uniform(double scale = 0.07);
// Kaiming: fan from the shape (mode "fan_in" | "fan_out"), nonlinearity "leaky_relu" | "relu".
Initializer HeUniform(double negative_slope = 0.0, const std::string& mode = "fan_in",
                      const std::string& nonlinearity = "leaky_relu");
Initializer HeNormal(double negative_slope = 0.0, const std::string& mode = "fan_in",
                     const std::string& nonlinearity = "leaky_relu");
Initializer XavierUniform(double gain = 1.0);
Initializer Zero();
Initializer One();

}  // namespace cleave::nn
