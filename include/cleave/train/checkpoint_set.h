// A job's checkpoints as one set: the job each file belongs to, and the commit markers that say
// which sets are complete.
//
// NOTE [Checkpoint sets]
// In a job of several ranks, the files ModelCheckpoint writes at one step on every rank (rank r
// into its own folder) are one set; it counts only once every rank's file is complete. Each save
// (ModelCheckpoint::save):
//   1. writes the rank's file "<prefix>-<epoch>_<step>.<format>" atomically (NOTE [Atomic
//      checkpoint writes] in cleave/train/checkpoint.h), its metadata naming the job;
//   2. then writes its commit marker "<file>.commit" (atomically, a few hundred bytes of JSON:
//      the job, the step, the file);
//   3. then deletes the rank's files (and markers) beyond keep_checkpoint_max, keeping at least
//      the two newest in a job of several ranks.
// A set is committed when every rank's folder holds the marker of that step and its file. The
// ranks of a job meet at every step's collectives (the gradient reduction, the gathers of a
// placed step), so no rank can start the save of step t before every other rank finished the
// previous save: when a rank deletes its files older than the previous save, the previous set is
// committed on every rank. A job killed at any moment (SIGKILL, a lost host) therefore leaves its
// newest committed set whole on every rank, and a newer, partial set is never taken. The strategy
// file (strategy_ckpt_save_file) is written atomically when the step compiles, before any save.
// No barrier is needed, so a program that saves on rank 0 only (a common MindSpore pattern)
// does not hang; such a folder is one rank's, not a set.
//
// Every file and marker records its job (CheckpointJob): the device count, the rank, and the
// fingerprint of the sharded parameters' layouts. ModelCheckpoint refuses to write into a folder
// whose markers of its prefix belong to another job (a one-process run into the folder of rank 0
// of an 8-rank job: the files would replace each other's); rank_checkpoint_files refuses a
// folder whose markers are another rank's or another job's. Both errors say which job each file
// is from. Folders without markers (files written before cleave had them, or by another tool)
// are read as before: the newest file of each folder.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "cleave/nn/cell.h"
#include "cleave/parallel/strategy_file.h"

namespace cleave::train {

// The job a checkpoint file belongs to (NOTE [Checkpoint sets]).
struct CheckpointJob {
  int64_t device_num = 1;  // ranks in the job
  int64_t rank = 0;        // the rank that wrote the file
  // layouts_fingerprint() of the job's sharded parameters; "" when none is sharded (one device,
  // DATA_PARALLEL, a placed network).
  std::string layouts;

  // Whether `other` is a file of the same job (the same device count and layouts; any rank).
  bool same_job(const CheckpointJob& other) const {
    return device_num == other.device_num && layouts == other.layouts;
  }
  // "a job of 8 ranks (layouts 3f09c2a1d4b5e6f7)", "one process".
  std::string describe() const;
};

// A fingerprint (16 hex digits) of the layouts of `layouts`' sharded parameters: their global
// shapes and layouts, as a sorted list, so that the strategy file of a job and the parameters of
// its compiled step give the same fingerprint; names are left out (the traced step's names carry
// a prefix the network's do not). "" when no parameter is sharded.
std::string layouts_fingerprint(const parallel::ParameterLayouts& layouts);

// The layouts of `net`'s sharded parameters (NOTE [Sharded parameters]), by the network's names,
// over the world group's size: what the strategy file of this job records once its step is
// compiled (none before, and none in a job that shards nothing).
parallel::ParameterLayouts sharded_parameter_layouts(const nn::Cell& net);

// This process's job: the world group's size and rank (1 and 0 standalone) and the fingerprint of
// sharded_parameter_layouts(net).
CheckpointJob current_job(const nn::Cell& net);

// The metadata save_checkpoint stores for `job` ("cleave.device_num", "cleave.rank",
// "cleave.layouts") and the job read back from a file's metadata (nothing for a file without it).
std::map<std::string, std::string> job_metadata(const CheckpointJob& job);
std::optional<CheckpointJob> job_from_metadata(const std::map<std::string, std::string>& metadata);

// A commit marker: written after its checkpoint file is complete.
struct CommitMarker {
  CheckpointJob job;
  int64_t epoch_num = 0;      // as in the file
  int64_t step_in_epoch = 0;  // the file name's step
  int64_t step_num = 0;       // steps done in all
};
// "<file>.commit".
std::string commit_marker_path(const std::string& checkpoint_file);
// Writes the marker of `checkpoint_file` atomically.
void write_commit_marker(const std::string& checkpoint_file, const CommitMarker& marker);
// The marker of `checkpoint_file`, or nothing when there is none. Throws Error naming the marker
// when it exists but cannot be read.
std::optional<CommitMarker> read_commit_marker(const std::string& checkpoint_file);

}  // namespace cleave::train
