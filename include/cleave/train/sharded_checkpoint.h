// A sharded job's checkpoints merged into the single-device checkpoint (`cleave-ckpt merge`).
//
// NOTE [Merging sharded checkpoints]
// In SEMI_AUTO_PARALLEL and AUTO_PARALLEL each rank holds, and saves, its slices of the sharded
// parameters (NOTE [Sharded parameters] in cleave/runtime/sharded_parameters.h) and of the
// optimizer state laid out like them ("moments.fc1.weight"), and whole copies of everything
// else. The strategy file (strategy_ckpt_save_file) records each parameter's layout and global
// shape. merge_checkpoints assembles, for every tensor of rank 0's checkpoint:
//   - a tensor the strategy file lays out, or optimizer state of one ("<state>.<parameter>"):
//     every rank's slice copied to its place (Layout::slice_offset); ranks holding the same slice
//     (replicas) must hold the same bytes;
//   - any other tensor (a replicated parameter, a step counter): the same bytes on every rank,
//     rank 0's taken.
// A checkpoint is matched to a strategy-file parameter by name, allowing the prefix the traced
// step puts before the network's parameters ("_backbone." of WithLossCell) to be absent from the
// checkpoint's names. Any disagreement is an Error naming the tensor, the ranks and their files:
// a missing tensor, a slice of the wrong shape or dtype, replicas that differ, a checkpoint count
// that is not the strategy's device_num. Nothing is guessed: a set that does not fit its strategy
// is refused, never merged into wrong numbers.
#pragma once

#include <string>
#include <vector>

#include "cleave/parallel/strategy_file.h"
#include "cleave/train/checkpoint.h"

namespace cleave::train {

struct RankCheckpoint {
  ParamMap tensors;
  std::string source;  // for errors: the file it was read from
};

// The single-device checkpoint of `ranks` (one per rank, in rank order) saved under `layouts`
// (NOTE [Merging sharded checkpoints]), in rank 0's tensor order (by name). Throws Error as the
// NOTE says.
NamedTensors merge_checkpoints(const std::vector<RankCheckpoint>& ranks,
                               const parallel::ParameterLayouts& layouts);

// Rank `rank`'s checkpoint under `layouts` of the single-device checkpoint `whole`: its slice of
// every tensor the layouts lay out (and of optimizer state laid out like one), every other tensor
// whole (NOTE [Merging sharded checkpoints]). merge_checkpoints of every rank's gives `whole`
// back. Throws Error when a tensor's shape is not the one the layout was planned for.
NamedTensors split_checkpoint(const NamedTensors& whole, const parallel::ParameterLayouts& layouts,
                              int64_t rank);

// What `cleave-ckpt transform --plan` prints: for each destination rank, which source ranks hold
// a part of what it needs (for a tensor laid out in both, the source ranks whose slices meet its
// slice, one of each set of replicas; a tensor whole in the source comes from rank 0).
struct TransformPlan {
  // Per destination rank: the source ranks it reads, ascending.
  std::vector<std::vector<int64_t>> reads;
};
TransformPlan plan_transform(const std::vector<std::string>& tensor_names,
                             const parallel::ParameterLayouts& source,
                             const parallel::ParameterLayouts& destination);

// Each rank's checkpoint in `directory`: the folder "<r>" or "rank_<r>" of rank r, for r below
// device_num, holding one checkpoint, or several written by ModelCheckpoint with one prefix (the
// newest is taken), or with `prefix` given, the newest "<prefix>-<epoch>_<step>" one. Throws Error
// naming the folder when one is missing, empty or ambiguous.
std::vector<std::string> rank_checkpoint_files(const std::string& directory, int64_t device_num,
                                               const std::string& prefix = "");

}  // namespace cleave::train
