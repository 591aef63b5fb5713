// Dense, Conv2d, pooling, activations, Softmax, Flatten, Dropout, Embedding, SequentialCell.
// Normalisation layers live in normalization.cc.
#include "cleave/nn/layers.h"

#include <algorithm>
#include <cctype>

#include "cleave/core/error.h"
#include "cleave/ops/elementwise.h"
#include "cleave/ops/nn.h"
#include "cleave/ops/reduce.h"
#include "cleave/ops/shape.h"

namespace cleave::nn {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A vector attribute of Conv2d given with 1 value (used for every entry) or `n` values.
std::vector<int64_t> expand(const std::vector<int64_t>& v, size_t n, const std::string& who,
                            const char* what, int64_t min_value) {
  CLEAVE_CHECK_ARG(v.size() == 1 || v.size() == n, "{}: {} has {} values {}; expected 1 or {}", who,
                   what, v.size(), Shape(v).to_string(), n);
  for (int64_t x : v) {
    CLEAVE_CHECK_ARG(x >= min_value, "{}: {} {} has a value below {}", who, what,
                     Shape(v).to_string(), min_value);
  }
  return v.size() == n ? v : std::vector<int64_t>(n, v[0]);
}

std::string pool_pad_mode(const std::string& cls, const std::string& pad_mode, int64_t kernel_size,
                          int64_t stride) {
  const std::string mode = lower(pad_mode);
  CLEAVE_CHECK_ARG(mode == "valid" || mode == "same",
                   "{}: pad_mode '{}' is not supported; expected \"valid\" or \"same\"", cls,
                   pad_mode);
  CLEAVE_CHECK_ARG(kernel_size >= 1 && stride >= 1,
                   "{}: kernel_size {} and stride {} must both be >= 1", cls, kernel_size, stride);
  return mode;
}

}  // namespace

// ---- Dense ----

Dense::Dense(int64_t in_channels, int64_t out_channels, DenseOptions options)
    : Cell("Dense"),
      in_channels_(in_channels),
      out_channels_(out_channels),
      activation_(lower(options.activation)) {
  CLEAVE_CHECK_ARG(in_channels > 0 && out_channels > 0,
                   "Dense: in_channels {} and out_channels {} must both be > 0", in_channels,
                   out_channels);
  CLEAVE_CHECK_ARG(activation_.empty() || activation_ == "relu" || activation_ == "gelu" ||
                       activation_ == "sigmoid" || activation_ == "tanh",
                   "Dense: activation '{}' is not supported; expected one of \"\" (none), "
                   "\"relu\", \"gelu\", \"sigmoid\", \"tanh\"",
                   options.activation);
  weight = register_parameter("weight", options.weight_init({out_channels, in_channels}));
  if (options.has_bias) bias = register_parameter("bias", options.bias_init({out_channels}));
}

namespace {

// Why Dense cannot take an input of shape `s`: the expected rank first, then what to do. An input
// of more than 2 dims with other features than in_channels last is most often a convolution's
// output (N, C, H, W) that was not flattened.
[[noreturn]] void fail_dense_input(const std::string& who, const Shape& s, int64_t in_channels) {
  if (s.rank() < 2) {
    CLEAVE_FAIL("{}: expected a 2-D input (N, {}); got shape {} (rank {}){}", who, in_channels,
                s.to_string(), s.rank(),
                s.rank() == 1 && s[0] == in_channels
                    ? "; a single sample needs its batch dim: ops::reshape(x, {1, in_channels})"
                    : "");
  }
  if (s.rank() == 2) {
    CLEAVE_FAIL(
        "{}: expected a 2-D input (N, {}); got shape {}, whose dim 1 ({}) is not "
        "in_channels ({})",
        who, in_channels, s.to_string(), s[1], in_channels);
  }
  const int64_t per_sample = s[0] == 0 ? 0 : s.numel() / s[0];
  CLEAVE_FAIL(
      "{}: expected a 2-D input (N, {}); got a {}-D input of shape {}: flatten it first "
      "(nn::Flatten or ops::flatten), which gives {}{}. (An input of more than 2 dims is taken "
      "only "
      "with the features last, (..., {}), e.g. a sequence (N, T, {}).)",
      who, in_channels, s.rank(), s.to_string(), Shape({s[0], per_sample}).to_string(),
      per_sample == in_channels
          ? ""
          : fmt::format(", whose dim 1 is not {} either: check the layers before this one",
                        in_channels),
      in_channels, in_channels);
}

}  // namespace

Tensor Dense::construct(const Tensor& x) {
  if (x.rank() < 2 || x.dim(-1) != in_channels_) {
    fail_dense_input(
        fmt::format("Dense(in_channels={}, out_channels={})", in_channels_, out_channels_),
        x.shape(), in_channels_);
  }
  // Leading dims beyond the batch dim are folded into it for the 2-D MatMul.
  const Tensor x2 = x.rank() == 2 ? x : ops::reshape(x, {-1, in_channels_});
  Tensor y =
      with_annotations(matmul, [&] { return ops::matmul(x2, weight, {.transpose_b = true}); });
  if (bias.defined()) y = with_annotations(bias_add, [&] { return ops::bias_add(y, bias); });
  if (x.rank() != 2) {
    std::vector<int64_t> dims = x.shape().dims();
    dims.back() = out_channels_;
    y = ops::reshape(y, Shape(dims));
  }
  if (activation_ == "relu") return ops::relu(y);
  if (activation_ == "gelu") return ops::gelu(y);
  if (activation_ == "sigmoid") return ops::sigmoid(y);
  if (activation_ == "tanh") return ops::tanh(y);
  return y;
}

// ---- Conv2d ----

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
               Conv2dOptions options)
    : Cell("Conv2d"), in_channels_(in_channels), out_channels_(out_channels) {
  const std::string who = "Conv2d";
  CLEAVE_CHECK_ARG(in_channels > 0 && out_channels > 0,
                   "Conv2d: in_channels {} and out_channels {} must both be > 0", in_channels,
                   out_channels);
  kernel_size_ = expand(kernel_size, 2, who, "kernel_size", 1);
  options.stride = expand(options.stride, 2, who, "stride", 1);
  options.dilation = expand(options.dilation, 2, who, "dilation", 1);
  options.padding = expand(options.padding, 4, who, "padding", 0);
  options.pad_mode = lower(options.pad_mode);
  CLEAVE_CHECK_ARG(
      options.pad_mode == "valid" || options.pad_mode == "same" || options.pad_mode == "pad",
      "Conv2d: pad_mode '{}' is not supported; expected \"valid\", \"same\" or "
      "\"pad\"",
      options.pad_mode);
  const bool any_padding =
      std::any_of(options.padding.begin(), options.padding.end(), [](int64_t p) { return p != 0; });
  CLEAVE_CHECK_ARG(options.pad_mode == "pad" || !any_padding,
                   "Conv2d: padding {} is given with pad_mode \"{}\"; padding must be 0 unless "
                   "pad_mode is \"pad\"",
                   Shape(options.padding).to_string(), options.pad_mode);
  CLEAVE_CHECK_ARG(
      options.group >= 1 && in_channels % options.group == 0 && out_channels % options.group == 0,
      "Conv2d: group {} must be >= 1 and divide in_channels {} and out_channels {}", options.group,
      in_channels, out_channels);
  weight =
      register_parameter("weight", options.weight_init({out_channels, in_channels / options.group,
                                                        kernel_size_[0], kernel_size_[1]}));
  if (options.has_bias) bias = register_parameter("bias", options.bias_init({out_channels}));
  options_ = std::move(options);
}

Tensor Conv2d::construct(const Tensor& x) {
  CLEAVE_CHECK_ARG(x.rank() == 4 && x.dim(1) == in_channels_,
                   "Conv2d(in_channels={}, out_channels={}, kernel_size={}): expected a 4-D input "
                   "(N, {}, H, W); got shape {}{}",
                   in_channels_, out_channels_, Shape(kernel_size_).to_string(), in_channels_,
                   x.shape().to_string(),
                   x.rank() == 4 ? fmt::format(", whose dim 1 ({}) is not in_channels", x.dim(1))
                                 : fmt::format(" (rank {})", x.rank()));
  Tensor y = with_annotations(conv2d, [&] {
    return ops::conv2d(x, weight,
                       {.stride = options_.stride,
                        .dilation = options_.dilation,
                        .pad_mode = options_.pad_mode,
                        .pad = options_.padding,
                        .group = options_.group});
  });
  if (bias.defined()) y = with_annotations(bias_add, [&] { return ops::bias_add(y, bias); });
  return y;
}

// ---- pooling ----

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, std::string pad_mode)
    : Cell("MaxPool2d"),
      kernel_size_(kernel_size),
      stride_(stride),
      pad_mode_(pool_pad_mode("MaxPool2d", pad_mode, kernel_size, stride)) {}

Tensor MaxPool2d::construct(const Tensor& x) {
  return with_annotations(max_pool, [&] {
    return ops::max_pool2d(x, {.kernel_size = {kernel_size_, kernel_size_},
                               .stride = {stride_, stride_},
                               .pad_mode = pad_mode_});
  });
}

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, std::string pad_mode)
    : Cell("AvgPool2d"),
      kernel_size_(kernel_size),
      stride_(stride),
      pad_mode_(pool_pad_mode("AvgPool2d", pad_mode, kernel_size, stride)) {}

Tensor AvgPool2d::construct(const Tensor& x) {
  return with_annotations(avg_pool, [&] {
    return ops::avg_pool2d(x, {.kernel_size = {kernel_size_, kernel_size_},
                               .stride = {stride_, stride_},
                               .pad_mode = pad_mode_});
  });
}

// ---- activations ----

ReLU::ReLU() : Cell("ReLU") {}
Tensor ReLU::construct(const Tensor& x) {
  return with_annotations(relu, [&] { return ops::relu(x); });
}

GELU::GELU() : Cell("GELU") {}
Tensor GELU::construct(const Tensor& x) {
  return with_annotations(gelu, [&] { return ops::gelu(x); });
}

Sigmoid::Sigmoid() : Cell("Sigmoid") {}
Tensor Sigmoid::construct(const Tensor& x) {
  return with_annotations(sigmoid, [&] { return ops::sigmoid(x); });
}

Tanh::Tanh() : Cell("Tanh") {}
Tensor Tanh::construct(const Tensor& x) {
  return with_annotations(tanh, [&] { return ops::tanh(x); });
}

Softmax::Softmax(int64_t axis) : Cell("Softmax"), axis_(axis) {}
Tensor Softmax::construct(const Tensor& x) {
  return with_annotations(softmax, [&] { return ops::softmax(x, axis_); });
}

Flatten::Flatten() : Cell("Flatten") {}
Tensor Flatten::construct(const Tensor& x) {
  return with_annotations(flatten, [&] { return ops::flatten(x); });
}

// ---- Dropout ----

Dropout::Dropout(double p) : Cell("Dropout"), p_(p) {
  CLEAVE_CHECK_ARG(p >= 0 && p < 1, "Dropout: p is {}; expected 0 <= p < 1", p);
}

Tensor Dropout::construct(const Tensor& x) {
  if (!training() || p_ == 0) return x;
  return with_annotations(dropout, [&] { return ops::dropout(x, 1.0 - p_); });
}

// ---- Embedding ----

Embedding::Embedding(int64_t vocab_size, int64_t embedding_size, Initializer embedding_table_init)
    : Cell("Embedding"), vocab_size_(vocab_size), embedding_size_(embedding_size) {
  CLEAVE_CHECK_ARG(vocab_size > 0 && embedding_size > 0,
                   "Embedding: vocab_size {} and embedding_size {} must both be > 0", vocab_size,
                   embedding_size);
  embedding_table =
      register_parameter("embedding_table", embedding_table_init({vocab_size, embedding_size}));
}

Tensor Embedding::construct(const Tensor& ids) {
  CLEAVE_CHECK_ARG(is_integral(ids.dtype()),
                   "Embedding(vocab_size={}, embedding_size={}): ids have dtype {}; expected "
                   "Int32 or Int64",
                   vocab_size_, embedding_size_, dtype_name(ids.dtype()));
  return with_annotations(gather, [&] { return ops::gather(embedding_table, ids, 0); });
}

// ---- SequentialCell ----

SequentialCell::SequentialCell(std::vector<CellPtr> cells) : Cell("SequentialCell") {
  for (CellPtr& cell : cells) append(std::move(cell));
}

void SequentialCell::append(CellPtr cell) {
  register_module(std::to_string(children().size()), std::move(cell));
}

Tensor SequentialCell::construct(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, cell] : children()) y = (*cell)(y);
  return y;
}

}  // namespace cleave::nn
