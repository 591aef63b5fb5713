// The parallel optimizer's plan (NOTE [Parallel optimizer] in
// cleave/parallel/parallel_optimizer.h).
#include "cleave/parallel/parallel_optimizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "cleave/core/error.h"

namespace cleave::parallel {

OptimizerShard optimizer_shard(const Layout& layout, const Shape& global, DType dtype,
                               const OptimizerShardOptions& options) {
  CLEAVE_CHECK_ARG(layout.check_shape(global).empty() && !layout.is_partial(),
                   "optimizer_shard: {} does not lay out a parameter of shape {}: {}",
                   layout.to_string(), global.to_string(),
                   layout.is_partial() ? "it is partial" : layout.check_shape(global));
  OptimizerShard out{.layout = layout};
  const std::vector<int> replicas = layout.replica_axes();
  const DeviceMatrix& dev = layout.device_matrix();
  int64_t replica_count = 1;
  for (int a : replicas) replica_count *= dev[static_cast<size_t>(a)];
  const auto bytes = static_cast<int64_t>(global.numel() * static_cast<int64_t>(dtype_size(dtype)));
  if (replica_count == 1 || bytes < options.threshold_bytes) return out;
  if (global.rank() == 0) {
    out.not_split = "it is a scalar (the parallel optimizer splits the first dimension)";
    return out;
  }
  std::vector<int> candidates;
  int64_t available = 1;
  for (int a : replicas) {
    if (dev[static_cast<size_t>(a)] > 1) {
      candidates.push_back(a);
      available *= dev[static_cast<size_t>(a)];
    }
  }
  int64_t want = available;
  if (options.shard_size > 0 && options.shard_size < available &&
      available % options.shard_size == 0) {
    want = options.shard_size;
  }
  // Take axes from the innermost: whole ones while `want` is a multiple of them, then the inner
  // part of one axis.
  std::vector<int> taken;  // old axis numbers, descending
  int cut = -1;            // an axis cut in two: its inner part (of size inner) is taken
  int64_t inner = 1, left = want;
  for (auto it = candidates.rbegin(); it != candidates.rend() && left > 1; ++it) {
    const int64_t size = dev[static_cast<size_t>(*it)];
    if (left % size == 0) {
      taken.push_back(*it);
      left /= size;
    } else if (size % left == 0) {
      cut = *it;
      inner = left;
      left = 1;
    } else {
      break;
    }
  }
  if (left != 1) {  // the innermost axes do not make `want`: every candidate then
    taken.assign(candidates.rbegin(), candidates.rend());
    cut = -1;
    want = available;
  }
  const int64_t slices = layout.splits(0) * want;
  if (global[0] % slices != 0) {
    out.not_split = fmt::format(
        "its first dimension {} is not divisible by the {} slices it would need ({} from its "
        "layout {}, {} for the optimizer)",
        global[0], slices, layout.splits(0), layout.to_string(), want);
    return out;
  }
  // The new device matrix: `cut` becomes (size / inner, inner); axes after it shift by one.
  DeviceMatrix new_dev;
  std::vector<int> renumber(dev.size());
  for (size_t a = 0; a < dev.size(); ++a) {
    renumber[a] = static_cast<int>(new_dev.size());
    if (static_cast<int>(a) == cut) {
      new_dev.push_back(dev[a] / inner);
      new_dev.push_back(inner);
    } else {
      new_dev.push_back(dev[a]);
    }
  }
  std::vector<Layout::DimAxes> map = layout.tensor_map();
  for (Layout::DimAxes& axes : map) {
    for (int& a : axes) a = renumber[static_cast<size_t>(a)];
  }
  std::vector<int> shard_axes;
  for (int a : taken) shard_axes.push_back(renumber[static_cast<size_t>(a)]);
  if (cut >= 0) shard_axes.push_back(renumber[static_cast<size_t>(cut)] + 1);
  std::sort(shard_axes.begin(), shard_axes.end());
  map[0].insert(map[0].end(), shard_axes.begin(), shard_axes.end());
  out.layout = Layout(new_dev, map);
  out.shard_axes = std::move(shard_axes);
  return out;
}

std::vector<int64_t> optimizer_shard_ranks(const OptimizerShard& shard, int64_t rank) {
  if (!shard.split()) return {rank};
  return ranks_along(rank, shard.layout.device_matrix(), shard.shard_axes);
}

}  // namespace cleave::parallel
