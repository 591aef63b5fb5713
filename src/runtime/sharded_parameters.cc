// Sharded parameters (NOTE [Sharded parameters] in cleave/runtime/sharded_parameters.h).
#include "cleave/runtime/sharded_parameters.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cleave/ops/shape.h"

namespace cleave::runtime {
namespace {

struct Entry {
  std::weak_ptr<TensorImpl> owner;  // the entry is stale once its tensor is gone
  ParameterShard shard;
};
std::mutex g_mutex;
std::unordered_map<const TensorImpl*, Entry> g_shards;

// Copies the block `src` (contiguous, shape `block`) into `dst` (contiguous, shape `whole`) at
// `offset`, row by row.
void place_block(const Tensor& src, const Tensor& dst, const std::vector<int64_t>& offset) {
  const Shape& block = src.shape();
  const Shape& whole = dst.shape();
  const size_t esize = dtype_size(src.dtype());
  const int64_t rank = block.rank();
  if (rank == 0) {
    std::memcpy(dst.raw_data(), src.raw_data(), esize);
    return;
  }
  const int64_t row = block[rank - 1];
  const int64_t rows = block.numel() / std::max<int64_t>(row, 1);
  const std::vector<int64_t> strides = whole.strides();
  for (int64_t r = 0; r < rows && row > 0; ++r) {
    int64_t rest = r, at = offset[static_cast<size_t>(rank - 1)];
    for (int64_t d = rank - 2; d >= 0; --d) {
      at += (rest % block[d] + offset[static_cast<size_t>(d)]) * strides[static_cast<size_t>(d)];
      rest /= block[d];
    }
    std::memcpy(static_cast<char*>(dst.raw_data()) + static_cast<size_t>(at) * esize,
                static_cast<const char*>(src.raw_data()) + static_cast<size_t>(r * row) * esize,
                static_cast<size_t>(row) * esize);
  }
}

// Replaces t's storage and shape by its slice for `rank` (same TensorImpl).
void keep_slice(const Tensor& t, const parallel::Layout& layout, int64_t rank) {
  const Shape local = layout.slice_shape(t.shape());
  const std::vector<int64_t> begin = layout.slice_offset(t.shape(), rank);
  Tensor slice;
  {
    NoGradGuard no_grad;
    slice = ops::slice(t.detach(), begin, local.dims()).clone();
  }
  TensorImpl* impl = t.impl();
  impl->storage = slice.impl()->storage;
  impl->offset_bytes = slice.impl()->offset_bytes;
  impl->shape = local;
  impl->grad.reset();
}

}  // namespace

std::optional<ParameterShard> parameter_shard(const Tensor& param) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_shards.find(param.impl());
  if (it == g_shards.end() || it->second.owner.lock() != param.impl_ptr()) return std::nullopt;
  return it->second.shard;
}

void shard_parameter(const Tensor& param, const std::string& name, const parallel::Layout& layout,
                     int64_t rank, const std::vector<Tensor>& like) {
  const std::optional<ParameterShard> have = parameter_shard(param);
  if (have) {
    CLEAVE_CHECK_ARG(have->layout.same_distribution(layout),
                     "parameter '{}' (global shape {}) is laid out as {} by a step compiled "
                     "earlier, but this step needs {}; every parallel step of a network must lay "
                     "a parameter out the same way (give the operators using it the same "
                     "strategies)",
                     name, have->global.shape.to_string(), have->layout.to_string(),
                     layout.to_string());
  }
  const ir::TensorMeta global = have ? have->global : ir::TensorMeta{param.shape(), param.dtype()};
  CLEAVE_ASSERT(layout.check_shape(global.shape).empty(), "parameter '{}' {}: {}", name,
                global.shape.to_string(), layout.check_shape(global.shape));
  // The parameter unless an earlier step (an evaluation) sliced it already, and its state still
  // of the global shape.
  std::vector<Tensor> tensors;
  if (!have) tensors.push_back(param);
  for (const Tensor& t : like) {
    if (t.defined() && t.shape() == global.shape) tensors.push_back(t);
  }
  std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
  for (const Tensor& t : tensors) {
    if (world != nullptr && world->size() > 1) world->broadcast(t, 0);
    if (!layout.is_replicated()) keep_slice(t, layout, rank);
  }
  if (have) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::erase_if(g_shards, [](const auto& e) { return e.second.owner.expired(); });
  g_shards[param.impl()] = {param.impl_ptr(), {global, layout, rank}};
}

Tensor gather_parameter(const Tensor& param) {
  const std::optional<ParameterShard> shard = parameter_shard(param);
  if (!shard || shard->layout.is_replicated()) return param;
  return gather_slices(param, shard->global, shard->layout);
}

Tensor local_slice(const Tensor& whole, const parallel::Layout& layout, int64_t rank) {
  NoGradGuard no_grad;
  if (layout.is_replicated()) return whole.detach().clone();
  const Shape local = layout.slice_shape(whole.shape());
  const std::vector<int64_t> begin = layout.slice_offset(whole.shape(), rank);
  return ops::slice(whole.detach(), begin, local.dims()).clone();
}

Tensor gather_slices(const Tensor& local_in, const ir::TensorMeta& global,
                     const parallel::Layout& layout) {
  if (layout.is_replicated()) return local_in;
  std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
  const int64_t n = layout.num_devices();
  CLEAVE_CHECK_ARG(world != nullptr && world->size() == n,
                   "gather_parameter: the parameter is sharded over {} devices, but the world "
                   "group has {} ranks",
                   n, world == nullptr ? 1 : world->size());
  const Tensor local = local_in.detach().clone();
  Tensor all = Tensor::empty(Shape({n * local.numel()}), local.dtype());
  world->all_gather(all, local.view(Shape({local.numel()})));
  Tensor whole = Tensor::empty(global.shape, global.dtype);
  for (int64_t q = 0; q < n; ++q) {
    const Tensor block = all.view(Shape({n, local.numel()})).narrow_rows(q, 1).view(local.shape());
    place_block(block, whole, layout.slice_offset(global.shape, q));
  }
  return whole;
}

}  // namespace cleave::runtime
