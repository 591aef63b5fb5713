// cleave-ckpt: shows what a checkpoint (.ckpt or .safetensors) holds, and merges a sharded job's
// checkpoints into one.
//
//   cleave-ckpt [list] FILE          one line per tensor: "<name> <dtype> (<shape>)", by name
//   cleave-ckpt [list] FILE --values NAME   the values of tensor NAME, one per line, row-major
//                                    (%.9g, enough digits to read a float32 back exactly)
//   cleave-ckpt [list] FILE --metadata      the safetensors "__metadata__", "key: value" per line
//   cleave-ckpt merge DIR --strategy FILE -o OUT [--prefix P]
//                                    the single-device checkpoint of a sharded job: DIR holds a
//                                    folder per rank ("0", "1", ... or "rank_0", ...) with its
//                                    checkpoint, FILE is the job's strategy file
//                                    (strategy_ckpt_save_file), OUT the checkpoint written (NOTE
//                                    [Merging sharded checkpoints] in
//                                    cleave/train/sharded_checkpoint.h)
//   cleave-ckpt transform SRC --src-strategy A --dst-strategy B -o DST [--prefix P] [--plan]
//                                    the checkpoints of a job with strategy B (any device count)
//                                    from those of a job with strategy A: each source file read
//                                    once, DST/<rank>/<the source's file name> written (existing
//                                    files are never overwritten); --plan prints which source
//                                    ranks each destination rank reads, and writes nothing
//
// With a sharded job (SEMI_AUTO_PARALLEL or AUTO_PARALLEL) each rank's checkpoint holds that
// rank's slices: the shapes listed are the slice shapes (NOTE [Sharded parameters] in
// cleave/runtime/sharded_parameters.h); `merge` puts them together.
//
// Exit status 0 on success, 1 when a file cannot be read, has no tensor NAME, or the checkpoints
// do not fit the strategy, 2 on bad usage.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cleave/core/error.h"
#include "cleave/flags.h"
#include "cleave/ops/elementwise.h"
#include "cleave/train/checkpoint.h"
#include "cleave/train/sharded_checkpoint.h"

namespace {

using namespace cleave;

void print_values(const Tensor& t) {
  const Tensor d = ops::cast(t, DType::kFloat64);
  for (double v : d.to_vector<double>()) std::printf("%.9g\n", v);
}

}  // namespace

// Whether every file is a .ckpt (merge and transform then copy their bytes without decoding:
// NOTE [Merging without copies] in src/train/sharded_checkpoint.cc).
bool all_ckpt(const std::vector<std::string>& files) {
  return std::all_of(files.begin(), files.end(), [](const std::string& f) {
    return train::checkpoint_format(f) == train::CheckpointFormat::kCkpt;
  });
}

int merge(int argc, char** argv) {
  CLI::App app{
      "Merges the checkpoints of a sharded job (one folder per rank) into the single-device "
      "checkpoint, with the job's strategy file."};
  app.name("cleave-ckpt merge");
  cleave::flags::setup(app);
  std::string dir, strategy, output, prefix;
  app.add_option("dir", dir, "the folder holding one folder per rank")->required();
  app.add_option("--strategy", strategy, "the job's strategy file (strategy_ckpt_save_file)")
      ->required();
  app.add_option("-o,--output", output, "the checkpoint to write (.ckpt or .safetensors)")
      ->required();
  app.add_option("--prefix", prefix,
                 "with several checkpoints per rank: the newest '<prefix>-<epoch>_<step>' one");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  try {
    train::checkpoint_format(output);  // a wrong extension fails before any reading
    const parallel::ParameterLayouts layouts = parallel::load_parameter_layouts(strategy);
    const std::vector<std::string> files =
        train::rank_checkpoint_files(dir, layouts.device_num, prefix, &layouts);
    train::MergeSummary summary;
    if (all_ckpt(files) && train::checkpoint_format(output) == train::CheckpointFormat::kCkpt) {
      summary = train::merge_checkpoint_files(files, layouts, output);  // without copies
    } else {
      std::vector<train::RankCheckpoint> ranks;
      for (const std::string& file : files) ranks.push_back({train::load_checkpoint(file), file});
      const train::NamedTensors merged = train::merge_checkpoints(ranks, layouts);
      train::save_checkpoint(merged, output);
      summary.tensors = merged.size();
      for (const auto& [name, t] : merged) {
        summary.from_slices += t.shape() == ranks[0].tensors.at(name).shape() ? 0 : 1;
      }
    }
    fmt::print("cleave-ckpt: merged {} ranks into {}: {} tensors, {} of them from slices\n",
               files.size(), output, summary.tensors, summary.from_slices);
  } catch (const Error& e) {
    std::fprintf(stderr, "cleave-ckpt: %s\n", e.what());
    return 1;
  }
  return 0;
}

int transform(int argc, char** argv) {
  CLI::App app{
      "Turns a sharded job's checkpoints (one folder per rank) saved under one strategy into the "
      "checkpoints of another strategy and device count."};
  app.name("cleave-ckpt transform");
  cleave::flags::setup(app);
  std::string src, src_strategy, dst_strategy, output, prefix;
  bool plan_only = false;
  app.add_option("src", src, "the folder holding one folder per source rank")->required();
  app.add_option("--src-strategy", src_strategy,
                 "the strategy file the checkpoints were saved under")
      ->required();
  app.add_option("--dst-strategy", dst_strategy, "the strategy file of the job that will load them")
      ->required();
  app.add_option("-o,--output", output, "the folder to write, one folder per destination rank");
  app.add_option("--prefix", prefix,
                 "with several checkpoints per rank: the newest '<prefix>-<epoch>_<step>' one");
  app.add_flag("--plan", plan_only,
               "print which source ranks each destination rank reads, and write nothing");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  if (!plan_only && output.empty()) {
    std::fprintf(stderr,
                 "cleave-ckpt transform: no -o DIR; expected the folder to write the destination "
                 "ranks' checkpoints to, or --plan (run 'cleave-ckpt transform --help')\n");
    return 2;
  }
  namespace fs = std::filesystem;
  try {
    const parallel::ParameterLayouts from = parallel::load_parameter_layouts(src_strategy);
    const parallel::ParameterLayouts to = parallel::load_parameter_layouts(dst_strategy);
    const std::vector<std::string> files =
        train::rank_checkpoint_files(src, from.device_num, prefix, &from);
    std::vector<train::RankCheckpoint> ranks;
    if (plan_only) {
      std::vector<std::string> names;
      for (const auto& [name, t] : train::load_checkpoint(files[0])) names.push_back(name);
      const train::TransformPlan plan = train::plan_transform(names, from, to);
      fmt::print("{} source ranks -> {} destination ranks ({} tensors)\n", from.device_num,
                 to.device_num, names.size());
      for (size_t d = 0; d < plan.reads.size(); ++d) {
        fmt::print("destination rank {} reads source ranks {}\n", d,
                   fmt::join(plan.reads[d], ", "));
      }
      return 0;
    }
    // Nothing already there is overwritten.
    const std::string file = fs::path(files[0]).filename().string();
    for (int64_t d = 0; d < to.device_num; ++d) {
      const fs::path target = fs::path(output) / std::to_string(d) / file;
      CLEAVE_CHECK_ARG(!fs::exists(target),
                       "transform: '{}' exists already; expected a new or empty output folder "
                       "(nothing is overwritten)",
                       target.string());
    }
    if (all_ckpt(files)) {
      train::transform_checkpoint_files(files, from, to, output, file);  // without copies
    } else {
      for (const std::string& f : files) ranks.push_back({train::load_checkpoint(f), f});
      const train::NamedTensors whole = train::merge_checkpoints(ranks, from);
      for (int64_t d = 0; d < to.device_num; ++d) {
        train::save_checkpoint(train::split_checkpoint(whole, to, d),
                               train::transform_output_path(output, d, file));
      }
    }
    fmt::print("cleave-ckpt: {} source ranks -> {} destination ranks in {}/<rank>/{}\n",
               from.device_num, to.device_num, output, file);
  } catch (const Error& e) {
    std::fprintf(stderr, "cleave-ckpt: %s\n", e.what());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "merge") return merge(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "transform") return transform(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "list") {
    --argc;
    ++argv;
  }
  CLI::App app{"Shows the tensors of a checkpoint (.ckpt or .safetensors)."};
  cleave::flags::setup(app);
  std::string path, values;
  bool metadata = false;
  app.add_option("file", path, "the checkpoint")->required();
  app.add_option("--values", values, "print the values of this tensor, one per line");
  app.add_flag("--metadata", metadata, "print the safetensors metadata");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  try {
    if (metadata) {
      for (const auto& [key, value] : train::load_checkpoint_metadata(path)) {
        std::printf("%s: %s\n", key.c_str(), value.c_str());
      }
      return 0;
    }
    const train::ParamMap params = train::load_checkpoint(path);
    if (!values.empty()) {
      auto it = params.find(values);
      if (it == params.end()) {
        std::string names;
        for (const auto& [name, t] : params) names += (names.empty() ? "" : ", ") + name;
        std::fprintf(stderr, "cleave-ckpt: %s has no tensor '%s'; it has: %s\n", path.c_str(),
                     values.c_str(), names.empty() ? "(none)" : names.c_str());
        return 1;
      }
      print_values(it->second);
      return 0;
    }
    for (const auto& [name, t] : params) {
      fmt::print("{} {} {}\n", name, dtype_name(t.dtype()), t.shape().to_string());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "cleave-ckpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
