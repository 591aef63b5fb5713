// Parameter initializers.
//
// NOTE [Fans]
// For a weight of shape (out, in, k0, k1, ...) the receptive field is k0 * k1 * ...,
// fan_in = in * receptive field and fan_out = out * receptive field (PyTorch's
// _calculate_fan_in_and_fan_out, which MindSpore follows). A Dense weight (out, in) has
// fan_in = in, fan_out = out; a Conv2d weight (out, in / group, kH, kW) has fan_in = in / group *
// kH * kW. Shapes of rank < 2 have no fans.
#include "cleave/nn/init.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "cleave/core/error.h"

namespace cleave::nn {
namespace {

struct Fans {
  int64_t fan_in = 0, fan_out = 0;
};

Fans compute_fans(const Shape& shape, const std::string& who) {
  CLEAVE_CHECK_ARG(shape.rank() >= 2,
                   "{}: cannot compute fan_in and fan_out of shape {} (rank {}); expected a "
                   "weight of rank >= 2 such as (out, in) or (out, in, kH, kW)",
                   who, shape.to_string(), shape.rank());
  int64_t receptive = 1;
  for (int64_t d = 2; d < shape.rank(); ++d) receptive *= shape[d];
  return {shape[1] * receptive, shape[0] * receptive};
}

int64_t select_fan(const Shape& shape, const std::string& mode, const std::string& who) {
  const Fans fans = compute_fans(shape, who);
  const int64_t fan = mode == "fan_in" ? fans.fan_in : fans.fan_out;
  CLEAVE_CHECK_ARG(fan > 0, "{}: {} of shape {} is 0; the weight has no elements", who, mode,
                   shape.to_string());
  return fan;
}

void check_mode(const std::string& mode, const std::string& who) {
  CLEAVE_CHECK_ARG(mode == "fan_in" || mode == "fan_out",
                   "{}: mode '{}' is not supported; expected \"fan_in\" or \"fan_out\"", who, mode);
}

// PyTorch's torch.nn.init.calculate_gain for the nonlinearities Kaiming init is used with.
double kaiming_gain(const std::string& nonlinearity, double negative_slope,
                    const std::string& who) {
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
  if (nonlinearity == "linear" || nonlinearity == "sigmoid") return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  CLEAVE_FAIL(
      "{}: nonlinearity '{}' is not supported; expected one of \"leaky_relu\", \"relu\", "
      "\"linear\", \"sigmoid\", \"tanh\"",
      who, nonlinearity);
}

Initializer by_name(const std::string& name) {
  std::string key = name;
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (key == "normal") return Normal(0.01);
  if (key == "truncatednormal") return TruncatedNormal(0.01);
  if (key == "uniform") return Uniform();
  if (key == "he_uniform") return HeUniform();
  if (key == "he_normal") return HeNormal();
  if (key == "xavier_uniform") return XavierUniform();
  if (key == "zeros") return Zero();
  if (key == "ones") return One();
  CLEAVE_FAIL(
      "unknown initializer '{}'; expected one of \"normal\", \"truncatednormal\", \"uniform\", "
      "\"he_uniform\", \"he_normal\", \"xavier_uniform\", \"zeros\", \"ones\"",
      name);
}

}  // namespace

Initializer::Initializer(const char* name) : Initializer(by_name(name)) {}
Initializer::Initializer(const std::string& name) : Initializer(by_name(name)) {}

Tensor Initializer::operator()(const Shape& shape, DType dtype) const {
  CLEAVE_CHECK_ARG(is_floating(dtype), "{}: dtype {} is not supported; expected Float32 or Float64",
                   name_, dtype_name(dtype));
  Tensor t = fn_(shape, dtype);
  CLEAVE_ASSERT(t.shape() == shape && t.dtype() == dtype, "initializer {} made {} {}", name_,
                dtype_name(t.dtype()), t.shape().to_string());
  return t;
}

Initializer Normal(double sigma, double mean) {
  CLEAVE_CHECK_ARG(sigma > 0, "Normal: sigma is {}; expected sigma > 0", sigma);
  return Initializer(fmt::format("Normal(sigma={}, mean={})", sigma, mean),
                     [sigma, mean](const Shape& shape, DType dtype) {
                       return Tensor::normal(shape, mean, sigma, dtype);
                     });
}

Initializer TruncatedNormal(double sigma, double mean) {
  CLEAVE_CHECK_ARG(sigma > 0, "TruncatedNormal: sigma is {}; expected sigma > 0", sigma);
  return Initializer(fmt::format("TruncatedNormal(sigma={}, mean={})", sigma, mean),
                     [sigma, mean](const Shape& shape, DType dtype) {
                       return Tensor::truncated_normal(shape, mean, sigma, dtype);
                     });
}

Initializer Uniform(double scale) {
  CLEAVE_CHECK_ARG(scale > 0, "Uniform: scale is {}; expected scale > 0", scale);
  return Initializer(fmt::format("Uniform(scale={})", scale),
                     [scale](const Shape& shape, DType dtype) {
                       return Tensor::uniform(shape, -scale, scale, dtype);
                     });
}

// Kaiming uniform: U(-bound, bound) with bound = gain * sqrt(3 / fan).
Initializer HeUniform(double negative_slope, const std::string& mode,
                      const std::string& nonlinearity) {
  const std::string name = fmt::format("HeUniform(negative_slope={}, mode={}, nonlinearity={})",
                                       negative_slope, mode, nonlinearity);
  check_mode(mode, "HeUniform");
  const double gain = kaiming_gain(nonlinearity, negative_slope, "HeUniform");
  return Initializer(name, [gain, mode](const Shape& shape, DType dtype) {
    const double fan = static_cast<double>(select_fan(shape, mode, "HeUniform"));
    const double bound = gain * std::sqrt(3.0 / fan);
    return Tensor::uniform(shape, -bound, bound, dtype);
  });
}

// Kaiming normal: N(0, std²) with std = gain / sqrt(fan).
Initializer HeNormal(double negative_slope, const std::string& mode,
                     const std::string& nonlinearity) {
  const std::string name = fmt::format("HeNormal(negative_slope={}, mode={}, nonlinearity={})",
                                       negative_slope, mode, nonlinearity);
  check_mode(mode, "HeNormal");
  const double gain = kaiming_gain(nonlinearity, negative_slope, "HeNormal");
  return Initializer(name, [gain, mode](const Shape& shape, DType dtype) {
    const double fan = static_cast<double>(select_fan(shape, mode, "HeNormal"));
    return Tensor::normal(shape, 0.0, gain / std::sqrt(fan), dtype);
  });
}

// Glorot uniform: U(-bound, bound) with bound = gain * sqrt(6 / (fan_in + fan_out)).
Initializer XavierUniform(double gain) {
  CLEAVE_CHECK_ARG(gain > 0, "XavierUniform: gain is {}; expected gain > 0", gain);
  return Initializer(fmt::format("XavierUniform(gain={})", gain), [gain](const Shape& shape,
                                                                         DType dtype) {
    const Fans fans = compute_fans(shape, "XavierUniform");
    CLEAVE_CHECK_ARG(fans.fan_in + fans.fan_out > 0, "XavierUniform: shape {} has no elements",
                     shape.to_string());
    const double bound = gain * std::sqrt(6.0 / static_cast<double>(fans.fan_in + fans.fan_out));
    return Tensor::uniform(shape, -bound, bound, dtype);
  });
}

Initializer Zero() {
  return Initializer("Zero",
                     [](const Shape& shape, DType dtype) { return Tensor::zeros(shape, dtype); });
}

Initializer One() {
  return Initializer("One",
                     [](const Shape& shape, DType dtype) { return Tensor::ones(shape, dtype); });
}

}  // namespace cleave::nn
