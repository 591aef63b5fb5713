// Shapes: a list of non-negative dimension sizes, row-major.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace cleave {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  // Product of the dims; 1 for a scalar (rank 0).
  int64_t numel() const;
  int64_t operator[](int64_t i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int64_t i) { return dims_[static_cast<size_t>(i)]; }
  // Dim counted from the end when negative (-1 is the last). Throws if out of range.
  int64_t dim(int64_t axis) const;
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& dims() { return dims_; }
  // Row-major strides in elements.
  std::vector<int64_t> strides() const;

  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }

  // "(16, 32)", "()" for a scalar: the IR dump form.
  std::string to_string() const;

 private:
  std::vector<int64_t> dims_;
};

// Resolves a possibly negative axis against `rank`; throws Error naming `what` when outside
// [-rank, rank).
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what);

// NumPy broadcasting of two shapes; throws Error naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace cleave
