// cleave-ckpt's merge and transform on files (NOTE [Merging without copies] in
// src/train/sharded_checkpoint.cc) write exactly what merge_checkpoints + split_checkpoint give,
// for layouts that split only the first dimension (pieces of the sources), that split others
// (assembled), out-of-order axes (the parallel optimizer's), replicas and whole tensors; and refuse
// the same inconsistent sets.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "cleave/cleave.h"
#include "cleave/core/atomic_file.h"
#include "cleave/train/sharded_checkpoint.h"
#include "testing/gradcheck.h"

namespace cleave::train {
namespace {

namespace fs = std::filesystem;
using parallel::Layout;
using parallel::ParameterLayouts;

NamedTensors whole_checkpoint() {
  set_seed(9);
  return {{"a", Tensor::normal({16, 6})},
          {"b", Tensor::normal({8, 4, 2})},
          {"big", Tensor::normal({64, 256})},  // rows of 1 KB: pieces large enough to stay views
          // 2 MiB: whole (8 and 4 ranks) or halves (2 ranks), pieces the kernel copies from the
          // source files (copy_file_range)
          {"huge", Tensor::normal({512, 1024})},
          {"c", Tensor::from_vector<int32_t>({1, 2, 3, 4, 5})},
          {"moments.a", Tensor::normal({16, 6})},
          {"step", Tensor::scalar(7, DType::kInt64)}};
}

// 8 devices: a by rows over (axis 1, then axis 0: out of order), b by its second dimension with
// replicas, big by rows; 4: a in two dimensions, b by rows, big by columns (pieces of 256 bytes:
// copied); 2: a whole, b by rows, big by columns (pieces of 512 bytes: views).
ParameterLayouts eight() {
  return {.device_num = 8,
          .layouts = {{"a", {Layout({2, 4}, {{1, 0}, {}}), Shape({16, 6})}},
                      {"b", {Layout({2, 4}, {{}, {1}, {}}), Shape({8, 4, 2})}},
                      {"big", {Layout({2, 4}, {{0, 1}, {}}), Shape({64, 256})}}}};
}
ParameterLayouts four() {
  return {.device_num = 4,
          .layouts = {{"a", {Layout({2, 2}, {{0}, {1}}), Shape({16, 6})}},
                      {"b", {Layout({4}, {{0}, {}, {}}), Shape({8, 4, 2})}},
                      {"big", {Layout({4}, {{}, {0}}), Shape({64, 256})}}}};
}
ParameterLayouts two() {
  return {.device_num = 2,
          .layouts = {{"b", {Layout({2}, {{0}, {}, {}}), Shape({8, 4, 2})}},
                      {"big", {Layout({2}, {{}, {0}}), Shape({64, 256})}},
                      {"huge", {Layout({2}, {{0}, {}}), Shape({512, 1024})}}}};
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void expect_same_checkpoint(const ParamMap& got, const NamedTensors& want,
                            const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << what << ": " << name;
    EXPECT_TRUE(same(got.at(name), t)) << what << ": " << name;
  }
}

struct Dir {
  fs::path path;
  explicit Dir(const std::string& name)
      : path(fs::temp_directory_path() / fmt::format("cleave_{}_{}", name, ::getpid())) {
    fs::remove_all(path);
  }
  ~Dir() { fs::remove_all(path); }
};

// `whole` split under `layouts`, one file per rank: dir/<r>/x.ckpt.
std::vector<std::string> write_ranks(const NamedTensors& whole, const ParameterLayouts& layouts,
                                     const fs::path& dir) {
  std::vector<std::string> files;
  for (int64_t r = 0; r < layouts.device_num; ++r) {
    fs::create_directories(dir / std::to_string(r));
    files.push_back((dir / std::to_string(r) / "x.ckpt").string());
    save_checkpoint(split_checkpoint(whole, layouts, r), files.back());
  }
  return files;
}

TEST(CheckpointFiles, MergeAndTransformWriteWhatTheTensorPathGives) {
  const NamedTensors whole = whole_checkpoint();
  const std::vector<std::pair<std::string, ParameterLayouts>> all = {
      {"eight", eight()}, {"four", four()}, {"two", two()}};
  for (const auto& [from_name, from] : all) {
    Dir dir("ckpt_files_" + from_name);
    const std::vector<std::string> files = write_ranks(whole, from, dir.path / "src");
    const MergeSummary summary =
        merge_checkpoint_files(files, from, (dir.path / "full.ckpt").string());
    EXPECT_EQ(summary.tensors, 7u);
    expect_same_checkpoint(load_checkpoint((dir.path / "full.ckpt").string()), whole,
                           "merged from " + from_name);
    // Byte for byte the file save_checkpoint writes for the merged tensors.
    std::vector<RankCheckpoint> ranks;
    for (const std::string& f : files) ranks.push_back({load_checkpoint(f), f});
    save_checkpoint(merge_checkpoints(ranks, from), (dir.path / "reference.ckpt").string());
    EXPECT_EQ(read_whole_file((dir.path / "full.ckpt").string(), "merged"),
              read_whole_file((dir.path / "reference.ckpt").string(), "reference"))
        << from_name;
    for (const auto& [to_name, to] : all) {
      const fs::path out = dir.path / ("to_" + to_name);
      transform_checkpoint_files(files, from, to, out.string(), "x.ckpt");
      for (int64_t d = 0; d < to.device_num; ++d) {
        expect_same_checkpoint(load_checkpoint((out / std::to_string(d) / "x.ckpt").string()),
                               split_checkpoint(whole, to, d),
                               fmt::format("{} -> {}, rank {}", from_name, to_name, d));
      }
    }
  }
}

TEST(CheckpointFiles, InconsistentSetsAreRefusedAsMergeRefusesThem) {
  const NamedTensors whole = whole_checkpoint();
  Dir dir("ckpt_files_bad");
  const ParameterLayouts layouts = eight();
  std::vector<std::string> files = write_ranks(whole, layouts, dir.path / "src");
  const std::string out = (dir.path / "full.ckpt").string();
  // A replicated tensor that differs on rank 5.
  NamedTensors five = split_checkpoint(whole, layouts, 5);
  for (auto& [name, t] : five) {
    if (name == "c") t = Tensor::from_vector<int32_t>({1, 2, 3, 4, 6});
  }
  save_checkpoint(five, files[5]);
  EXPECT_ERROR(merge_checkpoint_files(files, layouts, out),
               "merge: 'c' is not sharded by the strategy file, but rank 5", files[5]);
  // Replicas of b's slice (ranks 0 and 4) that differ.
  files = write_ranks(whole, layouts, dir.path / "src2");
  NamedTensors four_ = split_checkpoint(whole, layouts, 4);
  for (auto& [name, t] : four_) {
    if (name == "b") t = ops::add(t, 1.0);
  }
  save_checkpoint(four_, files[4]);
  EXPECT_ERROR(merge_checkpoint_files(files, layouts, out), "merge: rank 4",
               "holds a different 'b' slice than the rank before it");
  // A slice of the wrong shape, a tensor missing on one rank, a set of the wrong size.
  files = write_ranks(whole, layouts, dir.path / "src3");
  NamedTensors wrong = split_checkpoint(whole, layouts, 2);
  for (auto& [name, t] : wrong) {
    if (name == "a") t = Tensor::zeros({3, 6});
  }
  save_checkpoint(wrong, files[2]);
  EXPECT_ERROR(
      transform_checkpoint_files(files, layouts, two(), (dir.path / "t").string(), "x.ckpt"),
      "merge: rank 2", "holds 'a' as Float32 (3, 6)");
  NamedTensors fewer = split_checkpoint(whole, layouts, 2);
  fewer.pop_back();
  save_checkpoint(fewer, files[2]);
  EXPECT_ERROR(merge_checkpoint_files(files, layouts, out), "hold different tensors",
               "'step' only in rank 0's");
  files.pop_back();
  EXPECT_ERROR(merge_checkpoint_files(files, layouts, out),
               "merge: 7 checkpoints for a strategy of 8 devices");
  EXPECT_FALSE(fs::exists(out));
  // An output folder that cannot be made (a file stands where it would go) is an Error, not an
  // escaped std::filesystem exception.
  files = write_ranks(whole, layouts, dir.path / "src4");
  std::ofstream(dir.path / "blocked") << "a file";
  EXPECT_ERROR(transform_checkpoint_files(files, layouts, two(),
                                          (dir.path / "blocked" / "t").string(), "x.ckpt"),
               "transform: cannot create the output folder", "blocked");
}

}  // namespace
}  // namespace cleave::train
