// load_param_into_net, the training state of a checkpoint, and ModelCheckpoint.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <tuple>
#include <vector>

#include "cleave/core/error.h"
#include "cleave/train/checkpoint.h"
#include "cleave/train/checkpoint_set.h"
#include "cleave/train/model.h"
#include "train/checkpoint_names.h"

namespace cleave::train {
namespace {

// Describes how `have` differs from `want`, or "" when it matches.
std::string mismatch(const std::string& name, const Tensor& have, const Tensor& want,
                     const char* want_what) {
  if (have.shape() == want.shape() && have.dtype() == want.dtype()) return "";
  return fmt::format("'{}' is {} {} in the checkpoint but {} {} in the {}", name,
                     dtype_name(have.dtype()), have.shape().to_string(), dtype_name(want.dtype()),
                     want.shape().to_string(), want_what);
}

std::string join_lines(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) {
    out.append("\n  ");
    out.append(item);
  }
  return out;
}

// Optimizer::state() names "moments.3": "moments.<name of parameter 3>" when parameter 3 is one
// of net's, otherwise "optimizer.moments.3".
NamedTensors named_optimizer_state(const nn::Cell& net, const optim::Optimizer& optimizer) {
  const auto params = net.parameters_and_names();
  NamedTensors out;
  for (const auto& [state_name, tensor] : optimizer.state()) {
    std::string name = fmt::format("optimizer.{}", state_name);
    const size_t dot = state_name.rfind('.');
    if (dot != std::string::npos) {
      const std::string index_text = state_name.substr(dot + 1);
      if (!index_text.empty() && std::all_of(index_text.begin(), index_text.end(), ::isdigit)) {
        const size_t index = std::stoul(index_text);
        if (index < optimizer.parameters().size()) {
          const Tensor& p = optimizer.parameters()[index];
          for (const auto& [param_name, param] : params) {
            if (param.impl() == p.impl()) {
              name = fmt::format("{}.{}", state_name.substr(0, dot), param_name);
              break;
            }
          }
        }
      }
    }
    out.emplace_back(std::move(name), tensor);
  }
  return out;
}

// One line per tensor of `wanted` that `params` lacks or holds with another dtype or shape
// (mismatch() says how, naming `what` the tensor belongs to).
std::vector<std::string> fit_problems(const NamedTensors& wanted, const ParamMap& params,
                                      const char* what) {
  std::vector<std::string> problems;
  for (const auto& [name, want] : wanted) {
    const auto it = params.find(name);
    if (it == params.end()) {
      problems.push_back(fmt::format("'{}' ({} {}) is missing from the checkpoint", name,
                                     dtype_name(want.dtype()), want.shape().to_string()));
      continue;
    }
    const std::string m = mismatch(name, it->second, want, what);
    if (!m.empty()) problems.push_back(m);
  }
  return problems;
}

}  // namespace

std::vector<std::string> load_param_into_net(nn::Cell& net, const ParamMap& params) {
  const auto net_params = net.parameters_and_names();
  const std::vector<std::string> problems = fit_problems(net_params, params, "network");
  CLEAVE_CHECK_ARG(problems.empty(),
                   "load_param_into_net: the checkpoint does not fit the network ({}); {} "
                   "problem(s), nothing was loaded:{}",
                   net.cls_name(), problems.size(), join_lines(problems));
  NoGradGuard no_grad;
  for (const auto& [name, param] : net_params) param.copy_from(params.at(name));
  std::vector<std::string> unused;
  for (const auto& [name, tensor] : params) {
    const bool used = std::any_of(net_params.begin(), net_params.end(),
                                  [&name = name](const auto& p) { return p.first == name; });
    if (!used) unused.push_back(name);
  }
  return unused;
}

NamedTensors train_state_tensors(const nn::Cell& net, const optim::Optimizer* optimizer,
                                 TrainProgress progress) {
  NamedTensors out = net.parameters_and_names();
  if (optimizer != nullptr) {
    for (auto& entry : named_optimizer_state(net, *optimizer)) out.push_back(std::move(entry));
    for (auto& [name, t] : optimizer->counters()) {
      out.emplace_back(fmt::format("optimizer.{}", name), std::move(t));
    }
    out.emplace_back("global_step", Tensor::full({1}, static_cast<double>(optimizer->step_count()),
                                                 DType::kInt32));
  }
  out.emplace_back("epoch_num",
                   Tensor::scalar(static_cast<double>(progress.epoch_num), DType::kInt64));
  out.emplace_back("step_num",
                   Tensor::scalar(static_cast<double>(progress.step_num), DType::kInt64));
  return out;
}

TrainProgress restore_train_state(nn::Cell& net, optim::Optimizer& optimizer,
                                  const ParamMap& params) {
  const NamedTensors wanted = train_state_tensors(net, &optimizer, {});
  const std::vector<std::string> problems = fit_problems(wanted, params, "model");
  CLEAVE_CHECK_ARG(problems.empty(),
                   "cannot resume training: the checkpoint does not fit the network ({}) and "
                   "optimizer ({}); {} problem(s), nothing was restored:{}",
                   net.cls_name(), optimizer.name(), problems.size(), join_lines(problems));
  const auto counter = [&](const char* name) {
    return static_cast<int64_t>(params.at(name).item());
  };
  const TrainProgress progress{.epoch_num = counter("epoch_num"), .step_num = counter("step_num")};
  CLEAVE_CHECK_ARG(progress.epoch_num >= 0 && progress.step_num >= 0 && counter("global_step") >= 0,
                   "cannot resume training: the checkpoint's epoch_num {}, step_num {} or "
                   "global_step {} is negative",
                   progress.epoch_num, progress.step_num, counter("global_step"));
  // The parameters and the optimizer's state tensors share storage with the model's own; the
  // counters are copies, restored through the optimizer.
  NoGradGuard no_grad;
  for (const auto& [name, param] : net.parameters_and_names()) param.copy_from(params.at(name));
  for (const auto& [name, t] : named_optimizer_state(net, optimizer)) t.copy_from(params.at(name));
  optimizer.set_step_count(counter("global_step"));
  std::vector<std::pair<std::string, Tensor>> counters;
  for (const auto& [name, t] : optimizer.counters()) {
    counters.emplace_back(name, params.at(fmt::format("optimizer.{}", name)));
  }
  optimizer.load_counters(counters);
  return progress;
}

// ---- ModelCheckpoint ----

ModelCheckpoint::ModelCheckpoint(CheckpointConfig config, std::string prefix, std::string directory)
    : config_(std::move(config)), prefix_(std::move(prefix)), directory_(std::move(directory)) {
  CLEAVE_CHECK_ARG(config_.save_checkpoint_steps >= 1,
                   "CheckpointConfig: save_checkpoint_steps is {}; expected an integer >= 1",
                   config_.save_checkpoint_steps);
  CLEAVE_CHECK_ARG(config_.keep_checkpoint_max >= 1,
                   "CheckpointConfig: keep_checkpoint_max is {}; expected an integer >= 1",
                   config_.keep_checkpoint_max);
  CLEAVE_CHECK_ARG(config_.format == "ckpt" || config_.format == "safetensors",
                   "CheckpointConfig: format is '{}'; expected \"ckpt\" or \"safetensors\"",
                   config_.format);
  CLEAVE_CHECK_ARG(!prefix_.empty() && prefix_.find('/') == std::string::npos,
                   "ModelCheckpoint: prefix '{}' must be a non-empty file name prefix without '/'",
                   prefix_);
  if (directory_.empty()) directory_.push_back('.');
}

namespace {

// (epoch, step, path) of a file "<prefix>-<epoch>_<step>.<format>".
using CheckpointFile = std::tuple<int64_t, int64_t, std::filesystem::path>;

// The files of `prefix` and `format` ("ckpt|safetensors" for both) in `directory`, oldest (by
// epoch, then step) first.
std::vector<CheckpointFile> checkpoint_files(const std::string& directory,
                                             const std::string& prefix, const std::string& format) {
  std::vector<CheckpointFile> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::optional<SavedName> saved = parse_saved_name(entry.path().filename().string());
    if (saved && saved->prefix == prefix &&
        (format == saved->format || format == "ckpt|safetensors")) {
      files.emplace_back(saved->epoch, saved->step, entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// ModelCheckpoint writes into a folder whose markers of its prefix are another job's (NOTE
// [Checkpoint sets]): the two jobs' files would replace each other's. Throws naming both jobs.
void refuse_another_job(const std::string& directory, const std::string& prefix,
                        const std::string& format, const CheckpointJob& job) {
  for (const auto& [epoch, step, path] : checkpoint_files(directory, prefix, format)) {
    const std::optional<CommitMarker> marker = read_commit_marker(path.string());
    if (!marker || marker->job.same_job(job)) continue;
    CLEAVE_FAIL(
        "ModelCheckpoint: the folder '{}' holds '{}', saved by rank {} of {}, but this run is "
        "{}: its checkpoints would replace that job's and the folder would mix two jobs' files. "
        "Give this run its own folder (or another prefix), or remove that job's files",
        directory, path.filename().string(), marker->job.rank, marker->job.describe(),
        job.describe());
  }
}

// NOTE [A run after another]
// A run that starts over (not resumed) in a folder holding this job's checkpoints from an
// earlier run would write the same names ('<prefix>-<epoch>_<step>') and, older by their
// numbers, be deleted by its own keep_checkpoint_max while the earlier run's newer files stay,
// and a loader would then take the earlier run's set. So, as MindSpore's ModelCheckpoint does
// when its prefix is taken, such a run saves under '<prefix>_<N>' (the first N whose files are not
// there) and says so once; the earlier files are left as they are. A run resumed from the
// folder's newest set saves after it (its first step is beyond every file there) and keeps the
// prefix. A file without a commit marker counts as newer: its step is not known.
std::string prefix_for_this_run(const std::string& directory, const std::string& prefix,
                                int64_t first_step) {
  bool newer = false;
  for (const auto& [epoch, step, path] : checkpoint_files(directory, prefix, "ckpt|safetensors")) {
    const std::optional<CommitMarker> marker = read_commit_marker(path.string());
    newer = newer || !marker || marker->step_num >= first_step;
  }
  if (!newer) return prefix;
  for (int n = 1;; ++n) {
    const std::string next = fmt::format("{}_{}", prefix, n);
    if (!checkpoint_files(directory, next, "ckpt|safetensors").empty()) continue;
    print_line(fmt::format(
        "ModelCheckpoint: the folder '{}' holds this job's '{}' checkpoints of an earlier run, "
        "at or after this run's step {}; this run saves as '{}-<epoch>_<step>' and leaves them",
        directory, prefix, first_step, next));
    return next;
  }
}

}  // namespace

std::string latest_checkpoint(const std::string& directory, const std::string& prefix) {
  std::error_code ec;
  CLEAVE_CHECK_ARG(std::filesystem::is_directory(directory, ec),
                   "latest_checkpoint: '{}' is not a folder; expected the folder a run saved its "
                   "checkpoints in (ModelCheckpoint's directory)",
                   directory);
  const std::vector<CheckpointFile> files = checkpoint_files(directory, prefix, "ckpt|safetensors");
  CLEAVE_CHECK_ARG(
      !files.empty(),
      "latest_checkpoint: the folder '{}' holds no checkpoint '{}-<epoch>_<step>.ckpt' "
      "or '.safetensors'",
      directory, prefix);
  // The newest committed one (NOTE [Checkpoint sets]): a file without its marker is a save that
  // did not complete; folders written without markers take the newest file.
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    if (read_commit_marker(std::get<2>(*it).string())) return std::get<2>(*it).string();
  }
  return std::get<2>(files.back()).string();
}

void ModelCheckpoint::on_train_begin(RunContext& ctx) {
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  CLEAVE_CHECK_ARG(std::filesystem::is_directory(directory_),
                   "ModelCheckpoint: cannot create the folder '{}': {}", directory_, ec.message());
  last_saved_step_ = ctx.cur_step_num;
}

void ModelCheckpoint::on_step_end(RunContext& ctx) {
  if (ctx.cur_step_num % config_.save_checkpoint_steps == 0) save(ctx);
}

void ModelCheckpoint::on_train_end(RunContext& ctx) {
  if (ctx.cur_step_num != last_saved_step_) save(ctx);
}

void ModelCheckpoint::save(const RunContext& ctx) {
  CLEAVE_ASSERT(ctx.network != nullptr);
  const NamedTensors state = train_state_tensors(
      *ctx.network, ctx.optimizer, {.epoch_num = ctx.cur_epoch_num, .step_num = ctx.cur_step_num});
  if (ctx.placed) {
    // Each worker holds the current values only of what its part updates: gather them first
    // (NOTE [Saving a placed network] in cleave/runtime/placed_state.h; collective, so every
    // worker must run this callback at the same steps). Every worker then writes the same file.
    CLEAVE_CHECK_ARG(ctx.train_step != nullptr,
                     "ModelCheckpoint: the network is placed over several workers (Cell::place) "
                     "but the run context names no training step to gather its parameters from");
    std::vector<Tensor> values;
    for (const auto& [name, t] : state) values.push_back(t);
    ctx.train_step->share_placed_state(values);
  }
  // NOTE [Checkpoint sets] in cleave/train/checkpoint_set.h: the file, then its commit marker,
  // then the deletions.
  const CheckpointJob job = current_job(*ctx.network);
  if (!folder_checked_) {
    refuse_another_job(directory_, prefix_, config_.format, job);
    prefix_ = prefix_for_this_run(directory_, prefix_, ctx.cur_step_num);
    folder_checked_ = true;
  }
  const std::string file =
      fmt::format("{}-{}_{}.{}", prefix_, ctx.cur_epoch_num, ctx.step_in_epoch, config_.format);
  latest_ = (std::filesystem::path(directory_) / file).string();
  save_checkpoint(state, latest_, job_metadata(job));
  write_commit_marker(latest_, {.job = job,
                                .epoch_num = ctx.cur_epoch_num,
                                .step_in_epoch = ctx.step_in_epoch,
                                .step_num = ctx.cur_step_num});
  last_saved_step_ = ctx.cur_step_num;

  const std::vector<CheckpointFile> files = checkpoint_files(directory_, prefix_, config_.format);
  // In a job of several ranks another rank may still be saving the previous step: keep it.
  const auto keep = static_cast<size_t>(
      std::max<int64_t>(config_.keep_checkpoint_max, job.device_num > 1 ? 2 : 1));
  for (size_t i = 0; i + keep < files.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(commit_marker_path(std::get<2>(files[i]).string()), ec);
    std::filesystem::remove(std::get<2>(files[i]), ec);
  }
}

}  // namespace cleave::train
