// Parameters of a SEMI_AUTO_PARALLEL step hold one rank's slice.
//
// NOTE [Sharded parameters]
// The step-parallel rewrite lays every parameter out as its first consumer needs it
// (cleave/parallel/step_parallel.h). When the step is compiled, each parameter tensor (and each
// optimizer state tensor shaped like it) is replaced in place by this rank's slice of it: the
// TensorImpl every holder shares (the Cell, the optimizer, a checkpoint's list) keeps its
// identity and gets the slice's storage and shape. Before slicing, rank 0's value is broadcast,
// so every rank slices the same global tensor and training equals one device's. The global shape
// and the layout are remembered, so the parameter is traced again with its global shape (another
// input signature, an evaluation graph) and gathered back (gather_parameter) for checking and
// saving whole tensors.
#pragma once

#include <optional>

#include "cleave/core/tensor.h"
#include "cleave/ir/op_def.h"
#include "cleave/parallel/layout.h"

namespace cleave::runtime {

struct ParameterShard {
  ir::TensorMeta global;    // the parameter as the model defines it
  parallel::Layout layout;  // how it is laid out over the devices
  int64_t rank = 0;         // whose slice this process holds
};

// The shard `param` holds, or nothing when it holds its whole value.
std::optional<ParameterShard> parameter_shard(const Tensor& param);

// Makes `param` hold rank `rank`'s slice of its global value (NOTE [Sharded parameters]); `like`
// are tensors of the same shape laid out alike (optimizer state). Collective over the world
// group when it has several ranks (the broadcast). A parameter sharded already with the same
// layout is left alone (its `like` tensors still of the global shape are sliced); with another
// layout it is an Error naming it.
void shard_parameter(const Tensor& param, const std::string& name, const parallel::Layout& layout,
                     int64_t rank, const std::vector<Tensor>& like = {});

// The whole value of a parameter: itself when it is not sharded; else its slices gathered from
// every rank of the world group (collective: every rank calls it for the same parameters in the
// same order).
Tensor gather_parameter(const Tensor& param);

// Rank `rank`'s slice of `whole` (a tensor of the global shape) under `layout`: a new tensor.
Tensor local_slice(const Tensor& whole, const parallel::Layout& layout, int64_t rank);
// The whole tensor (`global`) of which every rank of the world group holds its slice `local`
// under `layout` (collective over the world group, as gather_parameter). A replicated layout
// returns `local` itself.
Tensor gather_slices(const Tensor& local, const ir::TensorMeta& global,
                     const parallel::Layout& layout);

}  // namespace cleave::runtime
