#include "cleave/nn/loss.h"

#include "cleave/core/error.h"
#include "cleave/ops/elementwise.h"
#include "cleave/ops/nn.h"
#include "cleave/ops/reduce.h"
#include "cleave/ops/shape.h"

namespace cleave::nn {

// ---- LossBase ----

LossBase::LossBase(std::string cls_name, std::string reduction)
    : Cell(std::move(cls_name)), reduction_(std::move(reduction)) {
  CLEAVE_CHECK_ARG(reduction_ == "mean" || reduction_ == "sum" || reduction_ == "none",
                   "{}: reduction '{}' is not supported; expected \"mean\", \"sum\" or \"none\"",
                   this->cls_name(), reduction_);
}

Tensor LossBase::reduce(const Tensor& loss) const {
  if (reduction_ == "mean")
    return with_annotations(reduce_mean, [&] { return ops::reduce_mean(loss); });
  if (reduction_ == "sum")
    return with_annotations(reduce_sum, [&] { return ops::reduce_sum(loss); });
  return loss;
}

// ---- softmax cross entropy ----

SoftmaxCrossEntropyWithLogits::SoftmaxCrossEntropyWithLogits(bool sparse, std::string reduction)
    : LossBase("SoftmaxCrossEntropyWithLogits", std::move(reduction)),
      softmax_cross_entropy(sparse ? "SparseSoftmaxCrossEntropyWithLogits"
                                   : "SoftmaxCrossEntropyWithLogits"),
      sparse_(sparse) {}

Tensor SoftmaxCrossEntropyWithLogits::construct(const Tensor& logits, const Tensor& labels) {
  if (sparse_) {
    CLEAVE_CHECK_ARG(is_integral(labels.dtype()),
                     "SoftmaxCrossEntropyWithLogits(sparse=true): labels have dtype {}; expected "
                     "class ids of Int32 or Int64 (use sparse=false for probabilities)",
                     dtype_name(labels.dtype()));
    return reduce(with_annotations(softmax_cross_entropy, [&] {
      return ops::sparse_softmax_cross_entropy_with_logits(logits, labels);
    }));
  }
  CLEAVE_CHECK_ARG(is_floating(labels.dtype()),
                   "SoftmaxCrossEntropyWithLogits(sparse=false): labels have dtype {}; expected "
                   "probabilities of the logits' shape (use sparse=true for class ids)",
                   dtype_name(labels.dtype()));
  return reduce(with_annotations(softmax_cross_entropy, [&] {
    return ops::softmax_cross_entropy_with_logits(logits, labels);
  }));
}

CrossEntropyLoss::CrossEntropyLoss(std::string reduction)
    : LossBase("CrossEntropyLoss", std::move(reduction)) {}

// Integer labels are class ids; floating labels of the logits' shape are probabilities (as in
// PyTorch's CrossEntropyLoss).
Tensor CrossEntropyLoss::construct(const Tensor& logits, const Tensor& labels) {
  return reduce(with_annotations(softmax_cross_entropy, [&] {
    return is_floating(labels.dtype())
               ? ops::softmax_cross_entropy_with_logits(logits, labels)
               : ops::sparse_softmax_cross_entropy_with_logits(logits, labels);
  }));
}

// ---- regression losses ----

MSELoss::MSELoss(std::string reduction) : LossBase("MSELoss", std::move(reduction)) {}

Tensor MSELoss::construct(const Tensor& prediction, const Tensor& target) {
  return reduce(with_annotations(mse, [&] { return ops::mse(prediction, target); }));
}

L1Loss::L1Loss(std::string reduction) : LossBase("L1Loss", std::move(reduction)) {}

Tensor L1Loss::construct(const Tensor& prediction, const Tensor& target) {
  return reduce(ops::abs(ops::sub(prediction, target)));
}

// ---- WithLossCell ----

WithLossCell::WithLossCell(CellPtr backbone, CellPtr loss_fn)
    : Cell("WithLossCell"), backbone_(std::move(backbone)), loss_fn_(std::move(loss_fn)) {
  CLEAVE_CHECK_ARG(backbone_ != nullptr && loss_fn_ != nullptr, "WithLossCell: the {} is null",
                   backbone_ == nullptr ? "backbone" : "loss_fn");
  // MindSpore's child names, so that parameter paths read "_backbone.fc1.weight".
  register_module("_backbone", backbone_);
  register_module("_loss_fn", loss_fn_);
}

Tensor WithLossCell::construct(const Tensor& data, const Tensor& label) {
  return (*loss_fn_)((*backbone_)(data), label);
}

}  // namespace cleave::nn
