// Metrics (mindspore.train.Accuracy, Loss, TopKCategoricalAccuracy) and the result of
// Model::eval.
//
// A metric accumulates over the batches of an evaluation: clear() resets it, update(inputs) adds
// one batch, eval() returns the value over everything since the last clear(). Model::eval gives
// each metric the evaluation outputs (loss, logits, label) selected by input_indexes(), in that
// order, as MindSpore's Metric.set_indexes does: classification metrics read (logits, label), Loss
// reads (loss).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::train {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void clear() = 0;
  // Adds one batch. Throws Error naming the metric when the inputs have the wrong count, rank or
  // shape.
  virtual void update(const std::vector<Tensor>& inputs) = 0;
  // The value so far; throws Error when no sample was seen since clear().
  virtual double eval() const = 0;
  // Which evaluation outputs update() takes: 0 = loss, 1 = logits, 2 = label.
  virtual std::vector<int> input_indexes() const { return {1, 2}; }
  // NOTE [Metrics over ranks]: the sums the value is computed from (Accuracy: correct and total),
  // which a data-parallel Model::eval adds over the ranks so that every rank reports the metric
  // of the whole evaluation set. Empty (the default) for a metric that cannot be combined by
  // adding: each rank then reports its own, and Model::eval says so once.
  virtual std::vector<double> sums() const { return {}; }
  // Replaces the sums by `sums`, as many as sums() gave.
  virtual void set_sums(const std::vector<double>& sums);
};

using MetricPtr = std::shared_ptr<Metric>;

// Fraction of samples whose arg-max prediction equals the label. Inputs: y_pred (N, C) scores and
// y either (N) class ids (any integer or floating dtype) or (N, C) one-hot / probabilities (the
// arg-max is the class).
class Accuracy : public Metric {
 public:
  void clear() override;
  void update(const std::vector<Tensor>& inputs) override;
  double eval() const override;
  std::vector<double> sums() const override;
  void set_sums(const std::vector<double>& sums) override;

 private:
  int64_t correct_ = 0;
  int64_t total_ = 0;
};

// Fraction of samples whose label is among the k highest scores (ties broken towards the lower
// class index). Same inputs as Accuracy; k >= 1.
class TopKCategoricalAccuracy : public Metric {
 public:
  explicit TopKCategoricalAccuracy(int64_t k);
  void clear() override;
  void update(const std::vector<Tensor>& inputs) override;
  double eval() const override;
  int64_t k() const { return k_; }
  std::vector<double> sums() const override;
  void set_sums(const std::vector<double>& sums) override;

 private:
  int64_t k_;
  int64_t correct_ = 0;
  int64_t total_ = 0;
};

// Mean of the per-batch losses (each batch's loss: a scalar, or a 1-D tensor averaged first).
class Loss : public Metric {
 public:
  void clear() override;
  void update(const std::vector<Tensor>& inputs) override;
  double eval() const override;
  std::vector<int> input_indexes() const override { return {0}; }
  std::vector<double> sums() const override;
  void set_sums(const std::vector<double>& sums) override;

 private:
  double sum_ = 0.0;
  int64_t total_ = 0;
};

// The metrics of a Model, by name. std::map's order is the order of the printed result.
using MetricMap = std::map<std::string, MetricPtr>;

// Model::eval's result: metric name -> value, printed like the Python dict MindSpore returns:
// {'Accuracy': 0.9888822115384616}.
class EvalResult {
 public:
  EvalResult() = default;
  explicit EvalResult(std::vector<std::pair<std::string, double>> values)
      : values_(std::move(values)) {}
  // The value of `name`; throws Error listing the names there are when it is absent.
  double at(const std::string& name) const;
  double operator[](const std::string& name) const { return at(name); }
  bool contains(const std::string& name) const;
  size_t size() const { return values_.size(); }
  auto begin() const { return values_.begin(); }
  auto end() const { return values_.end(); }
  // "{'Accuracy': 0.9888822115384616, 'Loss': 0.05}".
  std::string to_string() const;

 private:
  std::vector<std::pair<std::string, double>> values_;
};

std::ostream& operator<<(std::ostream& os, const EvalResult& result);

}  // namespace cleave::train
