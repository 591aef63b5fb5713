// Checkpoint throughput (bench/run.sh ckpt): writes a sharded job's checkpoint set the way its
// ranks do, for bench/run.sh to time `cleave-ckpt merge` and `cleave-ckpt transform` on it beside
// `cp` + `sync` of the same bytes.
//
//   ckpt_bench DIR [MIB] [RANKS]
//
// The model: 8 Float32 matrices w0..w7 of (rows, 4096) with MIB MiB in all (default 1024), laid
// out by rows over RANKS ranks (default 8). For each rank r it saves r's slices as DIR/src/<r>/
// net.ckpt with save_checkpoint (temporary file, fsync, rename: NOTE [Atomic checkpoint writes])
// and times the whole set (the slices are views of the matrices, as a rank's parameters are its
// own tensors: the time is the save's alone); it also writes DIR/src.json (that layout) and
// DIR/dst.json (the matrices split by columns over RANKS / 2 ranks), the strategy files the merge
// and the transform read. Prints
//   ROW ckpt_save_<MIB>mib_np<RANKS> mb_per_s=<MiB / s> seconds=<s>
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cleave/cleave.h"

int main(int argc, char** argv) {
  using namespace cleave;
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: ckpt_bench DIR [MIB] [RANKS]\n");
    return 2;
  }
  const fs::path dir = argv[1];
  const int64_t mib = argc > 2 ? std::stoll(argv[2]) : 1024;
  const int64_t ranks = argc > 3 ? std::stoll(argv[3]) : 8;
  constexpr int64_t kMatrices = 8, kCols = 4096;
  int64_t rows = mib * 1024 * 1024 / (kMatrices * kCols * 4);
  rows -= rows % ranks;
  std::vector<Tensor> whole;
  for (int64_t m = 0; m < kMatrices; ++m) {
    Tensor t = Tensor::zeros({rows, kCols});
    float* p = t.data<float>();
    for (int64_t i = 0; i < rows * kCols; ++i) p[i] = static_cast<float>((i * 7 + m) % 1000);
    whole.push_back(t);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < ranks; ++r) {
    train::NamedTensors slices;
    for (int64_t m = 0; m < kMatrices; ++m) {
      slices.emplace_back(fmt::format("w{}", m), whole[static_cast<size_t>(m)].narrow_rows(
                                                     r * rows / ranks, rows / ranks));
    }
    fs::create_directories(dir / "src" / std::to_string(r));
    train::save_checkpoint(slices, (dir / "src" / std::to_string(r) / "net.ckpt").string());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto strategy = [&](const fs::path& path, int64_t devices, const char* map) {
    std::ofstream out(path);
    out << fmt::format(R"({{"format": "cleave-strategy", "version": 1, "device_num": {}, )",
                       devices)
        << R"("parallel_layout_item": {)";
    for (int64_t m = 0; m < kMatrices; ++m) {
      out << fmt::format(
          R"({}"w{}": {{"dev_matrix": [{}], "tensor_map": {}, "tensor_shape": [{}, {}]}})",
          m == 0 ? "" : ", ", m, devices, map, rows, kCols);
    }
    out << "}}\n";
  };
  strategy(dir / "src.json", ranks, "[[0], []]");
  strategy(dir / "dst.json", ranks / 2, "[[], [0]]");
  const double total_mib = static_cast<double>(kMatrices * rows * kCols * 4) / (1024.0 * 1024.0);
  std::printf("ROW ckpt_save_%ldmib_np%ld mb_per_s=%.0f seconds=%.2f\n", static_cast<long>(mib),
              static_cast<long>(ranks), total_mib / seconds, seconds);
  return 0;
}
