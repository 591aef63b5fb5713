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

// What `cleave-ckpt transform --plan` prints: for each destination rank, the source ranks whose
// files hold a part of what it needs (the source slices meeting its block of each tensor, one
// rank of each set of replicas, chosen as NOTE [Reading only what a rank needs] in
// sharded_checkpoint.cc says: a tensor whole in the source comes from a file read already, or
// from rank d % (source ranks)). load_distributed_checkpoint reads the same files.
struct TransformPlan {
  // Per destination rank: the source ranks it reads, ascending.
  std::vector<std::vector<int64_t>> reads;
};
TransformPlan plan_transform(const std::vector<std::string>& tensor_names,
                             const parallel::ParameterLayouts& source,
                             const parallel::ParameterLayouts& destination);

// merge_checkpoints of the .ckpt `files` (one per rank, in rank order) written to the .ckpt
// `output`, and the same followed by split_checkpoint for every destination rank d of
// `destination`, written to `output_dir`/<d>/`file_name`: the same checks and the same files,
// made without decoding the sources into tensors (NOTE [Merging without copies] in
// src/train/sharded_checkpoint.cc): what cleave-ckpt merge and transform run.
struct MergeSummary {
  size_t tensors = 0;      // written
  size_t from_slices = 0;  // of them assembled from slices
};
MergeSummary merge_checkpoint_files(const std::vector<std::string>& files,
                                    const parallel::ParameterLayouts& layouts,
                                    const std::string& output);
void transform_checkpoint_files(const std::vector<std::string>& files,
                                const parallel::ParameterLayouts& source,
                                const parallel::ParameterLayouts& destination,
                                const std::string& output_dir, const std::string& file_name);
// `output_dir`/<rank>/`file_name`, the folder made first: where a transform writes destination
// rank `rank`'s file. Throws Error naming the folder when it cannot be made.
std::string transform_output_path(const std::string& output_dir, int64_t rank,
                                  const std::string& file_name);

// Each rank's checkpoint in `directory`: the folder "<r>" or "rank_<r>" of rank r, for r below
// device_num. When the folders hold commit markers (NOTE [Checkpoint sets] in
// cleave/train/checkpoint_set.h), the files of the newest set committed on every rank (of
// `prefix` when given); every marker must be its folder's rank's, of one job of device_num ranks,
// and, with `layouts` given, of a job that laid its parameters out as `layouts` does. Folders
// without markers give their one checkpoint, or the newest of several written by ModelCheckpoint
// with one prefix (or with `prefix`). Throws Error naming the folder when one is missing, empty
// or ambiguous, when no set is complete on every rank (naming the ranks whose files are missing
// or from another step), and naming the files when they are another job's.
std::vector<std::string> rank_checkpoint_files(const std::string& directory, int64_t device_num,
                                               const std::string& prefix = "",
                                               const parallel::ParameterLayouts* layouts = nullptr);

// Restores, at the start of a job, the training state a job saved under `strategy_file` (its
// strategy_ckpt_save_file; "" for a job that sharded nothing, e.g. DATA_PARALLEL) into `net` and
// `optimizer` (null: the parameters only), whatever the device count and strategy of the job
// that loads it, from the newest committed set of `directory` (rank_checkpoint_files). Each rank
// reads only the files holding a part of what it needs (NOTE [Reading only what a rank needs] in
// sharded_checkpoint.cc; plan_transform prints the same choice), each once, and assembles its
// blocks from them:
//   - after this job's step is compiled (Model::build: the parameters hold this rank's slices,
//     NOTE [Sharded parameters]), its slices of the parameters and of the optimizer state laid
//     out like them: a job resumed under its own strategy reads its own rank's file only;
//   - before, the whole tensors (compiling the step then slices them): one file of each set of
//     replicas the source holds.
// The files' names go to `files_read` when given. Returns the progress saved (the next
// Model::train continues after it: Model::load_distributed_checkpoint). Throws Error as
// rank_checkpoint_files and restore_train_state do, and naming the file for a slice of another
// shape than the strategy file gives; changes nothing then.
TrainProgress load_distributed_checkpoint(nn::Cell& net, optim::Optimizer* optimizer,
                                          const std::string& directory,
                                          const std::string& strategy_file,
                                          const std::string& prefix = "",
                                          std::vector<std::string>* files_read = nullptr);

}  // namespace cleave::train
