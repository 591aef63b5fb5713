#include "cleave/core/shape.h"

#include "cleave/core/error.h"

namespace cleave {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) {
    // A shape read from a file can hold any sizes: their product must not overflow.
    CLEAVE_CHECK_ARG(!__builtin_mul_overflow(n, d, &n),
                     "shape {} has more elements than an int64 holds; expected a smaller shape",
                     to_string());
  }
  return n;
}

int64_t Shape::dim(int64_t axis) const { return dims_[normalize_axis(axis, rank(), "Shape::dim")]; }

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims_.size());
  int64_t acc = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims_[i];
  }
  return s;
}

std::string Shape::to_string() const {
  std::string out = "(";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[i]);
  }
  return out + ")";
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what) {
  CLEAVE_CHECK_ARG(
      axis >= -rank && axis < rank,
      "{}: axis {} is out of range for a tensor of rank {}; expected an axis in [{}, {}]", what,
      axis, rank, -rank, rank - 1);
  return axis < 0 ? axis + rank : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int64_t rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.rank() ? 1 : a[i - (rank - a.rank())];
    const int64_t db = i < rank - b.rank() ? 1 : b[i - (rank - b.rank())];
    CLEAVE_CHECK_ARG(da == db || da == 1 || db == 1,
                     "{}: shapes {} and {} cannot be broadcast: dim {} (from the right) is {} and "
                     "{}; they must be equal or one of them 1",
                     op, a.to_string(), b.to_string(), rank - i, da, db);
    out[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

}  // namespace cleave
