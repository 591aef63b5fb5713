// Layouts: how a tensor is distributed over the devices of a job.
//
// NOTE [Layouts]
// The N devices (ranks) of a job are arranged in a *device matrix*, e.g. [2, 4, 1]: a rank's
// coordinate is its index in row-major order, the last axis varying fastest (rank 5 of [2, 4] is
// (1, 1)). A *layout* of a tensor on that matrix is
//   - a *tensor map*: for each tensor dimension the device axes it is split over, major first
//     (empty: not split). A dimension split over axes (a, b) has size(a) * size(b) slices; the
//     slice of a rank is its coordinates on (a, b) read as one mixed-radix number, a major;
//   - the *partial* axes: axes over which the local values are pending reductions (a sum, or a
//     max/min) that an AllReduce or ReduceScatter completes;
//   - every other axis holds *replicas*: ranks that differ only on those axes hold the same slice.
// An axis appears at most once in a layout. The axes of one dimension may come in any order:
// the planner's own layouts list them ascending (redistribution plans only those), and the
// parallel optimizer appends replica axes after a dimension's own, whatever their numbers
// (NOTE [Parallel optimizer] in cleave/parallel/parallel_optimizer.h). A
// dimension's size must be divisible by its number of slices (Layout::check_shape). The canonical
// text form, used in dumps and errors, reads layout(dev=[2, 4, 1], map=(0, -1), partial=(1));
// docs/design/sharding.md, section 1, has more examples.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cleave/core/shape.h"

namespace cleave::parallel {

// Sizes of the device axes; their product is the device count.
using DeviceMatrix = std::vector<int64_t>;

int64_t device_count(const DeviceMatrix& dev);
// Row-major, last axis fastest. An Error for a rank outside [0, device_count), a coordinate of
// the wrong length or out of range, and axes out of range or repeated (ranks_along).
std::vector<int64_t> rank_to_coordinate(int64_t rank, const DeviceMatrix& dev);
int64_t coordinate_to_rank(std::span<const int64_t> coordinate, const DeviceMatrix& dev);
// The ranks whose coordinates equal `rank`'s on every axis not in `axes`, ordered by their
// coordinates on `axes` read as one number with the first axis of `axes` major. With ascending
// `axes` this is ascending rank order. `rank` itself is among them.
std::vector<int64_t> ranks_along(int64_t rank, const DeviceMatrix& dev, std::span<const int> axes);
// "[2, 4, 1]".
std::string device_matrix_to_string(const DeviceMatrix& dev);

// How partial values combine.
enum class PartialOp { kSum, kMax, kMin };
// "sum", "max", "min": the AllReduce "op" attribute that completes it.
const char* partial_op_name(PartialOp op);

class Layout {
 public:
  using DimAxes = std::vector<int>;

  // A scalar layout on one device.
  Layout() : dev_{1} {}
  // Checks the NOTE's rules: an Error names the rule a layout breaks (an empty device matrix, an
  // axis of size < 1, an axis out of range or used twice).
  Layout(DeviceMatrix dev, std::vector<DimAxes> tensor_map, std::vector<int> partial = {},
         PartialOp partial_op = PartialOp::kSum);
  // Every rank holds the whole tensor of rank `tensor_rank`.
  static Layout replicated(DeviceMatrix dev, int64_t tensor_rank);

  const DeviceMatrix& device_matrix() const { return dev_; }
  const std::vector<DimAxes>& tensor_map() const { return map_; }
  const std::vector<int>& partial() const { return partial_; }
  PartialOp partial_op() const { return partial_op_; }
  int64_t tensor_rank() const { return static_cast<int64_t>(map_.size()); }
  int64_t num_devices() const { return device_count(dev_); }
  bool is_partial() const { return !partial_.empty(); }
  // Not split on any dimension and not partial.
  bool is_replicated() const;
  // The layout once its pending reduction is done: the partial axes become replica axes.
  Layout completed() const { return is_partial() ? Layout(dev_, map_) : *this; }

  // Number of slices of dimension `dim` (an Error for a dimension out of range, as in
  // slice_index; slice_shape and slice_offset throw for a shape check_shape() refuses).
  int64_t splits(int64_t dim) const;
  // Axes that hold replicas: neither in the map nor partial.
  std::vector<int> replica_axes() const;
  // Number of ranks holding each distinct slice (the product of the replica axes).
  int64_t replicas() const;

  // Empty when `global` can be laid out (rank matches, each dimension divisible by its slices);
  // else why not ("dim 1 of size 6 is split 4 ways").
  std::string check_shape(const Shape& global) const;
  // The shape every rank holds. Requires check_shape(global) to be empty.
  Shape slice_shape(const Shape& global) const;
  // Which slice of dimension `dim` rank `rank` holds (0-based).
  int64_t slice_index(int64_t dim, int64_t rank) const;
  // The first element of rank `rank`'s slice in global coordinates.
  std::vector<int64_t> slice_offset(const Shape& global, int64_t rank) const;

  // The same layout with device axes of size 1 removed (and the map renumbered): two layouts
  // that differ only by such axes distribute a tensor identically.
  Layout normalized() const;
  // Whether both distribute a tensor identically (equal normalized forms).
  bool same_distribution(const Layout& other) const;
  bool operator==(const Layout& other) const = default;

  // The canonical text form (NOTE [Layouts]).
  std::string to_string() const;
  // The inverse of to_string(): the layout written in `text` (spaces between tokens are free).
  // Throws Error saying what is wrong and where ("at column 17: expected ... , got ...") for text
  // that is not a layout, or a layout breaking the NOTE's rules (an axis out of range or used
  // twice, a device axis of size < 1).
  static Layout parse(std::string_view text);

 private:
  DeviceMatrix dev_;
  std::vector<DimAxes> map_;
  std::vector<int> partial_;  // ascending
  PartialOp partial_op_ = PartialOp::kSum;
};

}  // namespace cleave::parallel
