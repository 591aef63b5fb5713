// Transforms for Dataset::map (mindspore.dataset.vision and mindspore.dataset.transforms).
//
// Each is a callable object taking one tensor and returning a new one, so it converts to
// dataset::Transform. Vision transforms take images in HWC layout (H, W, C) -- or (H, W), read as
// one channel -- of any numeric dtype, as the sources produce them; HWC2CHW is normally last.
// Random transforms draw from dataset::transform_generator() (NOTE [Dataset randomness]).
// Bad input (a wrong rank, a size <= 0, ...) throws Error naming the transform and the value.
#pragma once

#include <cstdint>
#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::dataset {

namespace vision {

enum class Inter { kLinear, kNearest };

// Resizes to size = {h, w}, or with one value the shorter side to size[0] keeping the aspect
// ratio (MindSpore). kLinear: bilinear with half-pixel centres (align_corners false, as
// ops::resize_bilinear); kNearest as ops::resize_nearest. Output Float32.
class Resize {
 public:
  explicit Resize(std::vector<int64_t> size, Inter interpolation = Inter::kLinear);
  Tensor operator()(const Tensor& image) const;

 private:
  std::vector<int64_t> size_;
  Inter interpolation_;
};

// x * rescale + shift, as Float32.
class Rescale {
 public:
  Rescale(double rescale, double shift);
  Tensor operator()(const Tensor& image) const;

 private:
  double rescale_, shift_;
};

// (x - mean[c]) / std[c] per channel c of an HWC image, as Float32; mean and std have one value
// per channel (or one value for every channel); std > 0.
class Normalize {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& image) const;

 private:
  std::vector<double> mean_, std_;
};

// (H, W, C) -> (C, H, W), same dtype. With one channel the bytes do not move: the result is a
// view of the input (same storage, shape (1, H, W)).
class HWC2CHW {
 public:
  Tensor operator()(const Tensor& image) const;
};

// Pads the image with zeros (padding: {all}, {left/right, top/bottom} or {left, top, right,
// bottom}, as MindSpore), then crops a random size = {h, w} (or {s} for s x s) window. Same dtype.
class RandomCrop {
 public:
  explicit RandomCrop(std::vector<int64_t> size, std::vector<int64_t> padding = {});
  Tensor operator()(const Tensor& image) const;

 private:
  int64_t height_, width_;
  int64_t pad_left_ = 0, pad_top_ = 0, pad_right_ = 0, pad_bottom_ = 0;
};

// Mirrors the image left-right with probability prob in [0, 1]. Same dtype.
class RandomHorizontalFlip {
 public:
  explicit RandomHorizontalFlip(double prob = 0.5);
  Tensor operator()(const Tensor& image) const;

 private:
  double prob_;
};

}  // namespace vision

namespace transforms {

// Converts to `dtype` (a float to an integer truncates toward zero).
class TypeCast {
 public:
  explicit TypeCast(DType dtype);
  Tensor operator()(const Tensor& x) const;

 private:
  DType dtype_;
};

}  // namespace transforms

}  // namespace cleave::dataset
