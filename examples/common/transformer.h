// A stack of pre-norm transformer encoder blocks (GPT/BERT style) for planning and benches: x
// (batch, seq, hidden) -> per block: LayerNorm -> Q, K, V projections (Dense) -> heads ->
// softmax(Q K^T / sqrt(d)) V (BatchMatMul) -> output projection -> residual Add -> LayerNorm ->
// Dense(4 hidden) -> GeLU -> Dense(hidden) -> residual Add; then a classifier Dense on the mean
// over the sequence. Built from cleave's layers and ops only, so its graph is what the strategy
// search and the step-parallel rewrite see for attention models.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cleave/cleave.h"

namespace cleave::examples {

struct TransformerConfig {
  int64_t layers = 2;
  int64_t hidden = 256;
  int64_t heads = 4;
  int64_t seq = 64;
  int64_t num_classes = 10;
};

class TransformerBlock : public nn::Cell {
 public:
  explicit TransformerBlock(const TransformerConfig& c) : Cell("TransformerBlock"), c_(c) {
    CLEAVE_CHECK_ARG(c.heads >= 1 && c.hidden % c.heads == 0,
                     "TransformerBlock: hidden {} is not divisible by heads {}", c.hidden, c.heads);
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(std::vector<int64_t>{c.hidden}));
    q = register_module("q", std::make_shared<nn::Dense>(c.hidden, c.hidden));
    k = register_module("k", std::make_shared<nn::Dense>(c.hidden, c.hidden));
    v = register_module("v", std::make_shared<nn::Dense>(c.hidden, c.hidden));
    proj = register_module("proj", std::make_shared<nn::Dense>(c.hidden, c.hidden));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(std::vector<int64_t>{c.hidden}));
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(c.hidden, 4 * c.hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(4 * c.hidden, c.hidden));
  }

  // x: (batch * seq, hidden), rows ordered by batch then position.
  Tensor construct(const Tensor& x) override {
    const int64_t d = c_.hidden / c_.heads;
    const int64_t b = x.dim(0) / c_.seq;
    const auto heads = [&](const Tensor& t) {  // (b*s, h) -> (b, heads, s, d)
      return ops::transpose(ops::reshape(t, {b, c_.seq, c_.heads, d}), {0, 2, 1, 3});
    };
    const Tensor h = (*ln1)(x);
    const Tensor qh = heads((*q)(h)), kh = heads((*k)(h)), vh = heads((*v)(h));
    Tensor scores = ops::batch_matmul(qh, kh, {.transpose_b = true});
    scores = ops::mul(scores, Tensor::scalar(1.0 / std::sqrt(static_cast<double>(d))));
    const Tensor attn = ops::batch_matmul(ops::softmax(scores, -1), vh);  // (b, heads, s, d)
    const Tensor merged = ops::reshape(ops::transpose(attn, {0, 2, 1, 3}), {b * c_.seq, c_.hidden});
    const Tensor x1 = ops::add(x, (*proj)(merged));
    const Tensor m = (*fc2)(ops::gelu((*fc1)((*ln2)(x1))));
    return ops::add(x1, m);
  }

  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::Dense> q, k, v, proj, fc1, fc2;

 private:
  TransformerConfig c_;
};

class Transformer : public nn::Cell {
 public:
  explicit Transformer(const TransformerConfig& c) : Cell("Transformer"), c_(c) {
    for (int64_t i = 0; i < c.layers; ++i) {
      blocks.push_back(
          register_module(fmt::format("block{}", i), std::make_shared<TransformerBlock>(c)));
    }
    head = register_module("head", std::make_shared<nn::Dense>(c.hidden, c.num_classes));
  }

  // x: (batch, seq, hidden) -> logits (batch, num_classes).
  Tensor construct(const Tensor& x) override {
    CLEAVE_CHECK_ARG(x.rank() == 3 && x.dim(1) == c_.seq && x.dim(2) == c_.hidden,
                     "Transformer: input of shape {}; expected (batch, {}, {})",
                     x.shape().to_string(), c_.seq, c_.hidden);
    const int64_t b = x.dim(0);
    Tensor h = ops::reshape(x, {b * c_.seq, c_.hidden});
    for (const auto& block : blocks) h = (*block)(h);
    const Tensor pooled = ops::reduce_mean(ops::reshape(h, {b, c_.seq, c_.hidden}), {.axes = {1}});
    return (*head)(pooled);
  }

  std::vector<std::shared_ptr<TransformerBlock>> blocks;
  std::shared_ptr<nn::Dense> head;

 private:
  TransformerConfig c_;
};

}  // namespace cleave::examples
