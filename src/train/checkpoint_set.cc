// The job a checkpoint belongs to and its commit marker (NOTE [Checkpoint sets] in
// cleave/train/checkpoint_set.h).
#include "cleave/train/checkpoint_set.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "cleave/comm/group_registry.h"
#include "cleave/core/atomic_file.h"
#include "cleave/core/error.h"
#include "cleave/runtime/sharded_parameters.h"

namespace cleave::train {
namespace {

constexpr const char* kMarkerWhat = "checkpoint commit marker";
constexpr const char* kMarkerFormat = "cleave-checkpoint-commit";

// FNV-1a, 64 bits: a fingerprint that stays the same across builds and machines.
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int64_t parse_int(const std::string& text, const std::string& what) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  CLEAVE_CHECK_ARG(used == text.size() && !text.empty(), "{} is '{}'; expected an integer", what,
                   text);
  return value;
}

}  // namespace

std::string CheckpointJob::describe() const {
  if (device_num == 1) return "one process";
  if (layouts.empty()) return fmt::format("a job of {} ranks (no sharded parameter)", device_num);
  return fmt::format("a job of {} ranks (layouts {})", device_num, layouts);
}

std::string layouts_fingerprint(const parallel::ParameterLayouts& layouts) {
  std::vector<std::string> items;
  for (const auto& [name, laid] : layouts.layouts) {
    const auto& [layout, shape] = laid;
    if (layout.is_replicated()) continue;
    items.push_back(fmt::format("{} {}", shape.to_string(), layout.normalized().to_string()));
  }
  if (items.empty()) return "";
  std::sort(items.begin(), items.end());
  std::string text = fmt::format("{}", layouts.device_num);
  for (const std::string& item : items) text += "\n" + item;
  return fmt::format("{:016x}", fnv1a(text));
}

parallel::ParameterLayouts sharded_parameter_layouts(const nn::Cell& net) {
  parallel::ParameterLayouts layouts{.device_num = comm::world_size()};
  for (const auto& [name, param] : net.parameters_and_names()) {
    if (const auto shard = runtime::parameter_shard(param)) {
      layouts.layouts.emplace(name, std::make_pair(shard->layout, shard->global.shape));
    }
  }
  return layouts;
}

CheckpointJob current_job(const nn::Cell& net) {
  return {.device_num = comm::world_size(),
          .rank = comm::world_rank(),
          .layouts = layouts_fingerprint(sharded_parameter_layouts(net))};
}

std::map<std::string, std::string> job_metadata(const CheckpointJob& job) {
  return {{"cleave.device_num", std::to_string(job.device_num)},
          {"cleave.rank", std::to_string(job.rank)},
          {"cleave.layouts", job.layouts}};
}

std::optional<CheckpointJob> job_from_metadata(const std::map<std::string, std::string>& metadata) {
  const auto n = metadata.find("cleave.device_num");
  const auto rank = metadata.find("cleave.rank");
  const auto layouts = metadata.find("cleave.layouts");
  if (n == metadata.end() || rank == metadata.end() || layouts == metadata.end()) {
    return std::nullopt;
  }
  return CheckpointJob{.device_num = parse_int(n->second, "checkpoint metadata cleave.device_num"),
                       .rank = parse_int(rank->second, "checkpoint metadata cleave.rank"),
                       .layouts = layouts->second};
}

std::string commit_marker_path(const std::string& checkpoint_file) {
  return checkpoint_file + ".commit";
}

void write_commit_marker(const std::string& checkpoint_file, const CommitMarker& marker) {
  nlohmann::ordered_json j;
  j["format"] = kMarkerFormat;
  j["version"] = 1;
  j["file"] = std::filesystem::path(checkpoint_file).filename().string();
  j["device_num"] = marker.job.device_num;
  j["rank"] = marker.job.rank;
  j["layouts"] = marker.job.layouts;
  j["epoch_num"] = marker.epoch_num;
  j["step_in_epoch"] = marker.step_in_epoch;
  j["step_num"] = marker.step_num;
  write_file_atomically(commit_marker_path(checkpoint_file), j.dump(1) + "\n", kMarkerWhat);
}

std::optional<CommitMarker> read_commit_marker(const std::string& checkpoint_file) {
  const std::string path = commit_marker_path(checkpoint_file);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(read_whole_file(path, kMarkerWhat), nullptr,
                                                 /*allow_exceptions=*/false);
  const auto integer = [&](const char* key) {
    CLEAVE_CHECK_ARG(j.contains(key) && j[key].is_number_integer(),
                     "commit marker '{}': \"{}\" is missing or not an integer; the marker is "
                     "corrupt (remove it and its checkpoint, or the whole set)",
                     path, key);
    return j[key].get<int64_t>();
  };
  CLEAVE_CHECK_ARG(
      j.is_object() && j.value("format", "") == kMarkerFormat,
      "commit marker '{}' is not a cleave commit marker (expected JSON with \"format\": "
      "\"{}\"); the file is corrupt or another program's",
      path, kMarkerFormat);
  CLEAVE_CHECK_ARG(j.contains("layouts") && j["layouts"].is_string(),
                   "commit marker '{}': \"layouts\" is missing or not a string", path);
  CommitMarker marker{.job = {.device_num = integer("device_num"),
                              .rank = integer("rank"),
                              .layouts = j["layouts"].get<std::string>()},
                      .epoch_num = integer("epoch_num"),
                      .step_in_epoch = integer("step_in_epoch"),
                      .step_num = integer("step_num")};
  CLEAVE_CHECK_ARG(
      marker.job.device_num >= 1 && marker.job.rank >= 0 && marker.job.rank < marker.job.device_num,
      "commit marker '{}': rank {} of {} ranks is not a rank of its job", path, marker.job.rank,
      marker.job.device_num);
  return marker;
}

}  // namespace cleave::train
