// The layout and redistribution planner: random device matrices, tensor shapes and layouts (tensor
// maps, partial axes) given to Layout and plan_redistribution. Each gives a cleave::Error or
// layouts and a plan that are right:
//   - every layout that accepts the shape tiles it exactly: all ranks hold slices of one shape,
//     inside the tensor, and every element is held by the same number of ranks (the replicas);
//   - every step of a plan leaves a layout that tiles the tensor on the same device count, and the
//     last one puts on every rank the slice the target layout gives it (partial as the target is).
// A broken rule stops the process (fuzz::fail) with the layouts that broke it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "cleave/core/shape.h"
#include "cleave/parallel/layout.h"
#include "cleave/parallel/redistribution.h"
#include "fuzz_util.h"

namespace {

using cleave::DType;
using cleave::Shape;
using cleave::fuzz::ByteReader;
using cleave::fuzz::fail;
using cleave::parallel::DeviceMatrix;
using cleave::parallel::Layout;
using cleave::parallel::PartialOp;

constexpr int64_t kMaxDevices = 64;
constexpr int64_t kMaxElements = 2048;

// A device matrix of 1 to 4 axes of sizes 1..8 and at most kMaxDevices devices.
DeviceMatrix make_matrix(ByteReader& in) {
  DeviceMatrix dev;
  int64_t count = 1;
  const int64_t axes = in.in_range(1, 4);
  for (int64_t i = 0; i < axes; ++i) {
    const int64_t size = in.in_range(1, 8);
    if (count * size > kMaxDevices) break;
    dev.push_back(size);
    count *= size;
  }
  if (dev.empty()) dev.push_back(1);
  return dev;
}

// Another matrix of `count` devices: its axes split `count` into factors picked from the input.
DeviceMatrix refactor(ByteReader& in, int64_t count) {
  DeviceMatrix dev;
  int64_t left = count;
  while (left > 1 && dev.size() < 4) {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= left; ++d) {
      if (left % d == 0) divisors.push_back(d);
    }
    const int64_t d =
        divisors[static_cast<size_t>(in.in_range(0, static_cast<int64_t>(divisors.size()) - 1))];
    dev.push_back(d);
    left /= d;
  }
  if (left > 1) dev.push_back(left);
  if (dev.empty()) dev.push_back(1);
  return dev;
}

// A layout on `dev` of a tensor of rank `rank`: each axis goes to no dimension, to one, or is
// partial. Axes within a dimension are ascending, except when the input asks for the reverse
// (which Layout must refuse with an Error).
std::optional<Layout> make_layout(ByteReader& in, const DeviceMatrix& dev, int64_t rank) {
  std::vector<Layout::DimAxes> map(static_cast<size_t>(rank));
  std::vector<int> partial;
  for (int axis = 0; axis < static_cast<int>(dev.size()); ++axis) {
    const int64_t where = in.in_range(-2, rank - 1);  // -2: replica, -1: partial
    if (where == -1) {
      partial.push_back(axis);
    } else if (where >= 0) {
      map[static_cast<size_t>(where)].push_back(axis);
    }
  }
  if (in.in_range(0, 15) == 0) {
    for (auto& axes : map) std::reverse(axes.begin(), axes.end());
  }
  const auto op = static_cast<PartialOp>(in.in_range(0, 2));
  try {
    return Layout(dev, map, partial, op);
  } catch (const cleave::Error&) {
    return std::nullopt;
  }
}

std::string describe(const Layout& l, const Shape& global) {
  return l.to_string() + " of shape " + global.to_string();
}

// Checks that `l` tiles `global` exactly (the file's first rule).
void check_tiles(const Layout& l, const Shape& global, const std::string& what) {
  const Shape slice = l.slice_shape(global);
  const int64_t devices = l.num_devices();
  int64_t slices = 1;
  for (int64_t d = 0; d < global.rank(); ++d) {
    slices *= l.splits(d);
    if (slice[d] * l.splits(d) != global[d]) {
      fail(what + ": dim " + std::to_string(d) + " has slices of " + std::to_string(slice[d]) +
           " split " + std::to_string(l.splits(d)) + " ways: " + describe(l, global));
    }
  }
  if (devices % slices != 0) fail(what + ": more slices than devices: " + describe(l, global));
  std::vector<int64_t> held(static_cast<size_t>(global.numel()), 0);
  const std::vector<int64_t> strides = global.strides();
  for (int64_t rank = 0; rank < devices; ++rank) {
    const std::vector<int64_t> offset = l.slice_offset(global, rank);
    if (static_cast<int64_t>(offset.size()) != global.rank()) {
      fail(what + ": offset of rank " + std::to_string(rank) +
           " has the wrong length: " + describe(l, global));
    }
    for (int64_t d = 0; d < global.rank(); ++d) {
      if (offset[d] < 0 || offset[d] + slice[d] > global[d]) {
        fail(what + ": rank " + std::to_string(rank) + "'s slice leaves the tensor on dim " +
             std::to_string(d) + ": " + describe(l, global));
      }
    }
    // Every element of the slice, in row-major order.
    std::vector<int64_t> index(static_cast<size_t>(global.rank()), 0);
    for (int64_t e = 0; e < slice.numel(); ++e) {
      int64_t flat = 0;
      for (int64_t d = 0; d < global.rank(); ++d) flat += (offset[d] + index[d]) * strides[d];
      ++held[static_cast<size_t>(flat)];
      for (int64_t d = global.rank() - 1; d >= 0; --d) {
        if (++index[d] < slice[d]) break;
        index[d] = 0;
      }
    }
  }
  for (int64_t count : held) {
    if (count != devices / slices) {
      fail(what + ": an element is held by " + std::to_string(count) + " ranks; expected " +
           std::to_string(devices / slices) + ": " + describe(l, global));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  const DeviceMatrix from_dev = make_matrix(in);
  const int64_t devices = cleave::parallel::device_count(from_dev);
  const DeviceMatrix to_dev = in.in_range(0, 1) == 0 ? from_dev : refactor(in, devices);
  const int64_t rank = in.in_range(0, 3);
  Shape global;
  for (int64_t d = 0; d < rank; ++d) global.dims().push_back(in.in_range(1, 16));
  if (global.numel() > kMaxElements) return 0;
  const std::optional<Layout> from = make_layout(in, from_dev, rank);
  const std::optional<Layout> to = make_layout(in, to_dev, rank);
  if (!from || !to) return 0;
  const DType dtype = static_cast<DType>(in.in_range(0, 4));

  for (const Layout* l : {&*from, &*to}) {
    if (l->check_shape(global).empty()) check_tiles(*l, global, "layout");
  }
  const cleave::parallel::RedistributionPlan* plan = nullptr;
  try {
    plan = &cleave::parallel::plan_redistribution(*from, *to, global, dtype);
  } catch (const cleave::Error&) {
    return 0;
  }
  if (!from->check_shape(global).empty() || !to->check_shape(global).empty()) {
    fail("plan_redistribution planned for a shape a layout refuses: " + describe(*from, global) +
         " -> " + to->to_string());
  }
  const std::string route =
      describe(*from, global) + " -> " + to->to_string() + ": " + plan->to_string();
  const Layout* last = &*from;
  for (const auto& step : plan->steps) {
    if (step.after.num_devices() != devices) fail("a step changes the device count: " + route);
    if (!step.after.check_shape(global).empty()) {
      fail("step " + step.to_string() + " leaves a layout that does not fit: " + route);
    }
    check_tiles(step.after, global, "after step " + step.to_string() + " of " + route);
    last = &step.after;
  }
  // Normalized: a pending reduction over axes of size 1 is already complete.
  if (last->normalized().is_partial() != to->normalized().is_partial())
    fail("the plan ends partial or not as the target is not: " + route);
  const Shape want = to->slice_shape(global);
  if (last->slice_shape(global) != want)
    fail("the plan ends with slices of another shape: " + route);
  for (int64_t r = 0; r < devices; ++r) {
    if (last->slice_offset(global, r) != to->slice_offset(global, r)) {
      fail("the plan leaves rank " + std::to_string(r) +
           " another slice than the target's: " + route);
    }
  }
  return 0;
}
