// Accuracy, TopKCategoricalAccuracy, Loss and EvalResult.
#include "cleave/train/metrics.h"

#include <fmt/format.h>

#include "cleave/core/error.h"
#include "cleave/train/python_format.h"

namespace cleave::train {
namespace {

// Classification inputs as host values: scores (n, c) and one class id per sample.
struct Classification {
  int64_t n = 0;
  int64_t c = 0;
  std::vector<double> scores;
  std::vector<int64_t> labels;
};

int64_t arg_max(const double* row, int64_t c) {
  int64_t best = 0;
  for (int64_t j = 1; j < c; ++j) {
    if (row[j] > row[best]) best = j;
  }
  return best;
}

Classification classification_inputs(const char* metric, const std::vector<Tensor>& inputs) {
  CLEAVE_CHECK_ARG(inputs.size() == 2,
                   "{}: update got {} inputs; expected 2 (y_pred of shape (N, C), y of shape (N) "
                   "or (N, C))",
                   metric, inputs.size());
  const Tensor& y_pred = inputs[0];
  const Tensor& y = inputs[1];
  CLEAVE_CHECK_ARG(y_pred.defined() && y.defined(), "{}: an input is an undefined Tensor", metric);
  CLEAVE_CHECK_ARG(y_pred.rank() == 2,
                   "{}: y_pred (input 0) has shape {}; expected 2 dims (N, C): one row of class "
                   "scores per sample",
                   metric, y_pred.shape().to_string());
  Classification out;
  out.n = y_pred.dim(0);
  out.c = y_pred.dim(1);
  const bool ids = y.rank() == 1;
  CLEAVE_CHECK_ARG(
      (ids && y.dim(0) == out.n) || (y.rank() == 2 && y.dim(0) == out.n && y.dim(1) == out.c),
      "{}: y (input 1) has shape {} but y_pred has shape {}; expected y of shape "
      "({}) (class ids) or ({}, {}) (one-hot)",
      metric, y.shape().to_string(), y_pred.shape().to_string(), out.n, out.n, out.c);
  CLEAVE_CHECK_ARG(y.dtype() != DType::kBool, "{}: y (input 1) has dtype Bool; expected numbers",
                   metric);
  out.scores = y_pred.to_double_vector();
  const std::vector<double> y_values = y.to_double_vector();
  out.labels.resize(static_cast<size_t>(out.n));
  for (int64_t i = 0; i < out.n; ++i) {
    int64_t label = 0;
    if (ids) {
      label = static_cast<int64_t>(y_values[static_cast<size_t>(i)]);
      CLEAVE_CHECK_ARG(label >= 0 && label < out.c,
                       "{}: label {} of sample {} is out of range; expected a class id in [0, {}) "
                       "(y_pred has {} classes)",
                       metric, y_values[static_cast<size_t>(i)], i, out.c, out.c);
    } else {
      label = arg_max(&y_values[static_cast<size_t>(i * out.c)], out.c);
    }
    out.labels[static_cast<size_t>(i)] = label;
  }
  return out;
}

double fraction(const char* metric, int64_t correct, int64_t total) {
  CLEAVE_CHECK_ARG(total > 0,
                   "{}: can not be calculated because the number of samples is 0; call update() "
                   "with at least one batch first",
                   metric);
  return static_cast<double>(correct) / static_cast<double>(total);
}

}  // namespace

// ---- Metric ----

void Metric::set_sums(const std::vector<double>& sums) {
  CLEAVE_CHECK_ARG(sums.size() == this->sums().size(),
                   "Metric::set_sums: {} sums given; this metric has {}", sums.size(),
                   this->sums().size());
}

// ---- Accuracy ----

void Accuracy::clear() { correct_ = total_ = 0; }

void Accuracy::update(const std::vector<Tensor>& inputs) {
  const Classification in = classification_inputs("Accuracy", inputs);
  for (int64_t i = 0; i < in.n; ++i) {
    const double* row = &in.scores[static_cast<size_t>(i * in.c)];
    if (arg_max(row, in.c) == in.labels[static_cast<size_t>(i)]) ++correct_;
  }
  total_ += in.n;
}

double Accuracy::eval() const { return fraction("Accuracy", correct_, total_); }

std::vector<double> Accuracy::sums() const {
  return {static_cast<double>(correct_), static_cast<double>(total_)};
}

void Accuracy::set_sums(const std::vector<double>& sums) {
  Metric::set_sums(sums);
  correct_ = static_cast<int64_t>(sums[0]);
  total_ = static_cast<int64_t>(sums[1]);
}

// ---- TopKCategoricalAccuracy ----

TopKCategoricalAccuracy::TopKCategoricalAccuracy(int64_t k) : k_(k) {
  CLEAVE_CHECK_ARG(k >= 1, "TopKCategoricalAccuracy: k is {}; expected an integer >= 1", k);
}

void TopKCategoricalAccuracy::clear() { correct_ = total_ = 0; }

void TopKCategoricalAccuracy::update(const std::vector<Tensor>& inputs) {
  const Classification in = classification_inputs("TopKCategoricalAccuracy", inputs);
  for (int64_t i = 0; i < in.n; ++i) {
    const double* row = &in.scores[static_cast<size_t>(i * in.c)];
    const int64_t label = in.labels[static_cast<size_t>(i)];
    // The label's rank: classes scored higher, or equal with a lower index.
    int64_t ahead = 0;
    for (int64_t j = 0; j < in.c; ++j) {
      if (row[j] > row[label] || (row[j] == row[label] && j < label)) ++ahead;
    }
    if (ahead < k_) ++correct_;
  }
  total_ += in.n;
}

std::vector<double> TopKCategoricalAccuracy::sums() const {
  return {static_cast<double>(correct_), static_cast<double>(total_)};
}

void TopKCategoricalAccuracy::set_sums(const std::vector<double>& sums) {
  Metric::set_sums(sums);
  correct_ = static_cast<int64_t>(sums[0]);
  total_ = static_cast<int64_t>(sums[1]);
}

double TopKCategoricalAccuracy::eval() const {
  return fraction("TopKCategoricalAccuracy", correct_, total_);
}

// ---- Loss ----

void Loss::clear() {
  sum_ = 0.0;
  total_ = 0;
}

void Loss::update(const std::vector<Tensor>& inputs) {
  CLEAVE_CHECK_ARG(inputs.size() == 1, "Loss: update got {} inputs; expected 1 (the loss)",
                   inputs.size());
  const Tensor& loss = inputs[0];
  CLEAVE_CHECK_ARG(loss.defined(), "Loss: the loss is an undefined Tensor");
  CLEAVE_CHECK_ARG(loss.rank() <= 1 && loss.numel() >= 1,
                   "Loss: the loss has shape {}; expected a scalar or a non-empty 1-D tensor",
                   loss.shape().to_string());
  double sum = 0.0;
  for (double v : loss.to_double_vector()) sum += v;
  sum_ += sum / static_cast<double>(loss.numel());
  ++total_;
}

std::vector<double> Loss::sums() const { return {sum_, static_cast<double>(total_)}; }

void Loss::set_sums(const std::vector<double>& sums) {
  Metric::set_sums(sums);
  sum_ = sums[0];
  total_ = static_cast<int64_t>(sums[1]);
}

double Loss::eval() const {
  CLEAVE_CHECK_ARG(total_ > 0,
                   "Loss: can not be calculated because the number of batches is 0; call "
                   "update() with at least one loss first");
  return sum_ / static_cast<double>(total_);
}

// ---- EvalResult ----

double EvalResult::at(const std::string& name) const {
  for (const auto& [key, value] : values_) {
    if (key == name) return value;
  }
  std::string names;
  for (const auto& [key, value] : values_) names += (names.empty() ? "" : ", ") + key;
  CLEAVE_FAIL("eval result has no metric '{}'; it has: {}", name, names.empty() ? "(none)" : names);
}

bool EvalResult::contains(const std::string& name) const {
  for (const auto& entry : values_) {
    if (entry.first == name) return true;
  }
  return false;
}

std::string EvalResult::to_string() const {
  std::string out = "{";
  for (size_t i = 0; i < values_.size(); ++i) {
    if (i > 0) out += ", ";
    out += "'" + values_[i].first + "': " + python_float_repr(values_[i].second);
  }
  return out + "}";
}

std::ostream& operator<<(std::ostream& os, const EvalResult& result) {
  return os << result.to_string();
}

}  // namespace cleave::train
