// Losses (mindspore.nn): cells taking (logits or predictions, labels).
#pragma once

#include <string>

#include "cleave/nn/cell.h"

namespace cleave::nn {

// reduction: "mean" | "sum" | "none"; anything else throws Error naming the accepted values.
class LossBase : public Cell {
 public:
  LossBase(std::string cls_name, std::string reduction);
  const std::string& reduction() const { return reduction_; }
  // The reduction's operators, for shard() / place() (MindSpore's names).
  ir::Primitive reduce_mean{"ReduceMean"}, reduce_sum{"ReduceSum"};

 protected:
  // Applies the reduction to a per-element loss.
  Tensor reduce(const Tensor& loss) const;

 private:
  std::string reduction_;
};

// Softmax cross entropy of logits (N, C). sparse: labels are class ids (N) of Int32/Int64;
// otherwise labels are probabilities (N, C). MindSpore's default reduction is "none".
class SoftmaxCrossEntropyWithLogits : public LossBase {
 public:
  explicit SoftmaxCrossEntropyWithLogits(bool sparse = false, std::string reduction = "none");
  Tensor construct(const Tensor& logits, const Tensor& labels) override;
  // SoftmaxCrossEntropyWithLogits, or SparseSoftmaxCrossEntropyWithLogits when sparse.
  ir::Primitive softmax_cross_entropy;

 private:
  bool sparse_;
};

// Cross entropy of logits (N, C) with class ids (N); reduction default "mean".
class CrossEntropyLoss : public LossBase {
 public:
  explicit CrossEntropyLoss(std::string reduction = "mean");
  Tensor construct(const Tensor& logits, const Tensor& labels) override;
  ir::Primitive softmax_cross_entropy{"SparseSoftmaxCrossEntropyWithLogits"};
};

class MSELoss : public LossBase {
 public:
  explicit MSELoss(std::string reduction = "mean");
  Tensor construct(const Tensor& prediction, const Tensor& target) override;
  ir::Primitive mse{"MSE"};
};

class L1Loss : public LossBase {
 public:
  explicit L1Loss(std::string reduction = "mean");
  Tensor construct(const Tensor& prediction, const Tensor& target) override;
};

// network + loss as one cell: construct(data, label) = loss(network(data), label).
class WithLossCell : public Cell {
 public:
  WithLossCell(CellPtr backbone, CellPtr loss_fn);
  Tensor construct(const Tensor& data, const Tensor& label) override;
  const CellPtr& backbone() const { return backbone_; }

 private:
  CellPtr backbone_;
  CellPtr loss_fn_;
};

}  // namespace cleave::nn
