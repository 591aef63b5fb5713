// Checkpoints: save_checkpoint, load_checkpoint, load_param_into_net (mindspore.train), in
// MindSpore's .ckpt layout or in safetensors, and the ModelCheckpoint callback.
//
// The format follows the file name's extension: ".ckpt" is MindSpore's protobuf layout
// (src/train/checkpoint.proto: Checkpoint { repeated Value { tag; TensorProto { dims;
// tensor_type ("Float32", "Int32", ...); tensor_content (raw little-endian row-major bytes) } } }),
// ".safetensors" is Hugging Face's (an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data). Any other extension is an error.
//
// NOTE [Checkpoint checksums]
// Every save stores a CRC32C (Castagnoli) of the checkpoint's content: for each tensor in name
// order, its name, its dtype's name, its dims (int64, little-endian) and its raw bytes, each name
// ended by a NUL. A .ckpt stores it as the field `crc32c` (number 100, fixed32) of the Checkpoint
// message, written first in the file so that a file cut anywhere still carries it; other readers
// of the protobuf layout (MindSpore) skip the unknown field. A .safetensors stores it as the hex
// string "cleave.crc32c" of "__metadata__", so other safetensors readers still read the file.
// load_checkpoint recomputes it and throws naming the file when it differs (a flipped bit, a lost
// tensor). Files without a checksum (written before cleave had one, or by another tool) load
// without the check: only their structure is checked then.
//
// NOTE [Atomic checkpoint writes]
// Every save writes a temporary file in the destination's folder, fsyncs it, renames it over the
// destination and fsyncs the folder. A crash at any point leaves either the previous file or the
// new one, complete; never a mix. A failed save removes its temporary file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/nn/cell.h"
#include "cleave/optim/optimizer.h"
#include "cleave/train/callback.h"

namespace cleave::train {

// Tensors by name, in the order they are written.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// Tensors by name, as load_checkpoint returns them.
using ParamMap = std::map<std::string, Tensor>;

enum class CheckpointFormat { kCkpt, kSafetensors };
// The format of `path` by its extension; throws Error for another extension.
CheckpointFormat checkpoint_format(const std::string& path);

// Writes every parameter of `cell` (dotted names, as parameters_and_names()) to `path`.
void save_checkpoint(const nn::Cell& cell, const std::string& path);
// Writes `tensors` (unique, non-empty names; defined tensors) to `path`, with a checksum (NOTE
// [Checkpoint checksums]). `metadata` goes to the safetensors "__metadata__", or to a .ckpt's
// field `metadata` (number 101, which MindSpore's reader skips); its key "cleave.crc32c" is
// reserved. The checksum covers the tensors, not the metadata.
void save_checkpoint(const NamedTensors& tensors, const std::string& path,
                     const std::map<std::string, std::string>& metadata = {});

// What load_checkpoint does with a NaN or an infinity in a floating-point tensor.
enum class NonFinite {
  kAllow,   // load it (MindSpore's behaviour)
  kRefuse,  // throw Error naming the file, the tensor, the element and the value
};
struct LoadCheckpointOptions {
  NonFinite non_finite = NonFinite::kAllow;
};

// Reads every tensor of the checkpoint at `path`. Throws Error naming the file when it is
// missing, empty (0 bytes), truncated or corrupt (a bad header, an unknown dtype, data that does
// not match its shape, a duplicate name, a checksum that does not match: NOTE [Checkpoint
// checksums]), and, with NonFinite::kRefuse, when a tensor holds a NaN or an infinity.
ParamMap load_checkpoint(const std::string& path, const LoadCheckpointOptions& options = {});
// The metadata save_checkpoint stored (a safetensors file's "__metadata__" without cleave's
// checksum; a .ckpt's field 101; empty for a file written without any).
std::map<std::string, std::string> load_checkpoint_metadata(const std::string& path);

// Copies params[name] into every parameter of `net` (by dotted name). Every parameter must be
// present with the same shape and dtype; otherwise nothing is copied and one Error lists every
// missing name and every mismatch. Returns the names in `params` that are not parameters of `net`
// (e.g. the optimizer state of a training checkpoint), sorted.
std::vector<std::string> load_param_into_net(nn::Cell& net, const ParamMap& params);

// ---- training state (resume) ----

// Where a training run stands: epochs fully done and steps done in all.
struct TrainProgress {
  int64_t epoch_num = 0;  // the epoch the last step belongs to (1-based; 0 before training)
  int64_t step_num = 0;   // steps done in all
};

// Everything a checkpoint needs to resume training, named as MindSpore names it: the network's
// parameters; the optimizer state (Optimizer::state() "moments.3" becomes "moments.<name of
// parameter 3>" when that parameter belongs to `net`, otherwise "optimizer.moments.3"); its
// counters "optimizer.<name>" (Optimizer::counters(), e.g. Adam's "optimizer.param_steps"); the
// optimizer's step count "global_step" (Int32 (1)); "epoch_num" and "step_num" (Int64 scalars).
// `optimizer` may be null (parameters and progress only).
NamedTensors train_state_tensors(const nn::Cell& net, const optim::Optimizer* optimizer,
                                 TrainProgress progress);
// Restores what train_state_tensors saved into `net` and `optimizer` (not null) and returns the
// progress. Checks everything first and throws one Error listing every missing or mismatched
// tensor; copies nothing then.
TrainProgress restore_train_state(nn::Cell& net, optim::Optimizer& optimizer,
                                  const ParamMap& params);

// The newest checkpoint ModelCheckpoint wrote with `prefix` in `directory`:
// "<directory>/<prefix>-<epoch>_<step>.<ckpt|safetensors>" with the largest (epoch, step) among
// those with a commit marker (NOTE [Checkpoint sets] in cleave/train/checkpoint_set.h; among all
// when none has one). Throws Error naming the folder when it is missing or holds none (to resume
// a run: Model::load_train_state(latest_checkpoint(dir, prefix)); in a job of several ranks each
// rank gives its own folder, and load_train_state checks that every rank loaded the same step).
std::string latest_checkpoint(const std::string& directory, const std::string& prefix);

// ---- ModelCheckpoint ----

struct CheckpointConfig {
  // Save every this many steps (>= 1), counted over all epochs; the last step of training is
  // always saved.
  int64_t save_checkpoint_steps = 1;
  // Keep at most this many files of this prefix in the folder (>= 1); older ones are deleted.
  int64_t keep_checkpoint_max = 5;
  // "ckpt" or "safetensors".
  std::string format = "ckpt";
};

// Saves the training state (train_state_tensors: parameters, optimizer state, epoch and step) to
// "<directory>/<prefix>-<epoch>_<step in epoch>.<format>", creating the folder if needed, with
// its commit marker "<file>.commit", and deletes the oldest files "<prefix>-<e>_<s>.<format>" of
// the folder (by epoch, then step) beyond keep_checkpoint_max (at least 2 are kept in a job of
// several ranks). In a job, rank r gives its own folder; the files of one step on every rank are
// one set (NOTE [Checkpoint sets] in cleave/train/checkpoint_set.h). Throws Error, writing
// nothing, when the folder holds another job's checkpoints of this prefix. A run that starts
// over where this job's earlier run saved later steps saves as '<prefix>_<N>' and says so,
// leaving the earlier files (NOTE [A run after another] in src/train/checkpoint_state.cc).
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(CheckpointConfig config = {}, std::string prefix = "CKP",
                           std::string directory = ".");
  void on_train_begin(RunContext& ctx) override;
  void on_step_end(RunContext& ctx) override;
  void on_train_end(RunContext& ctx) override;
  // The file saved last ("" before the first save).
  const std::string& latest_checkpoint() const { return latest_; }

 private:
  void save(const RunContext& ctx);
  CheckpointConfig config_;
  std::string prefix_;
  std::string directory_;
  std::string latest_;
  int64_t last_saved_step_ = -1;
  bool folder_checked_ =
      false;  // whether the folder holds no other job's set (NOTE [Checkpoint sets])
};

}  // namespace cleave::train
