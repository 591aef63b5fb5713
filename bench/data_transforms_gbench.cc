// Per-image cost of seed 000's map chain (examples/common/lenet.h create_dataset) and of each of
// its transforms, one image at a time on one thread, as a map worker applies them:
//
//   build/Release/bench/data_transforms_gbench [--benchmark_filter=...]
//
// The input is an MNIST row as MnistDataset produces it: "image" Float32 (28, 28, 1) holding
// 0..255, "label" Int32 scalar. BM_SeedChain applies TypeCast(Int32) to the label and Resize
// 32x32 bilinear, Rescale(1/255, 0), Rescale(1/0.3081, -0.1307/0.3081), HWC2CHW to the image
// (the map order of create_dataset); the others time one transform.
#include <benchmark/benchmark.h>

#include "cleave/cleave.h"

namespace {

using namespace cleave;
namespace ds = cleave::dataset;

Tensor mnist_image() {
  Tensor image = Tensor::empty({28, 28, 1}, DType::kFloat32);
  float* p = image.data<float>();
  for (int64_t i = 0; i < 28 * 28; ++i) p[i] = static_cast<float>((i * 37) % 256);
  return image;
}

Tensor mnist_label() {
  Tensor label = Tensor::empty({}, DType::kInt32);
  label.data<int32_t>()[0] = 7;
  return label;
}

void BM_SeedChain(benchmark::State& state) {
  const ds::Transform type_cast = ds::transforms::TypeCast(DType::kInt32);
  const ds::Transform resize = ds::vision::Resize({32, 32}, ds::vision::Inter::kLinear);
  const ds::Transform rescale = ds::vision::Rescale(1.0 / 255.0, 0.0);
  const ds::Transform rescale_nml = ds::vision::Rescale(1 / 0.3081, -1 * 0.1307 / 0.3081);
  const ds::Transform hwc2chw = ds::vision::HWC2CHW();
  const Tensor image = mnist_image(), label = mnist_label();
  for (auto _ : state) {
    Tensor l = type_cast(label);
    Tensor x = resize(image);
    x = rescale(x);
    x = rescale_nml(x);
    x = hwc2chw(x);
    benchmark::DoNotOptimize(l.raw_data());
    benchmark::DoNotOptimize(x.raw_data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SeedChain);

void run_one(benchmark::State& state, const ds::Transform& op, const Tensor& input) {
  for (auto _ : state) {
    Tensor y = op(input);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Resize28To32Bilinear(benchmark::State& state) {
  run_one(state, ds::vision::Resize({32, 32}, ds::vision::Inter::kLinear), mnist_image());
}
BENCHMARK(BM_Resize28To32Bilinear);

void BM_Rescale32(benchmark::State& state) {
  run_one(state, ds::vision::Rescale(1.0 / 255.0, 0.0),
          ds::vision::Resize({32, 32}, ds::vision::Inter::kLinear)(mnist_image()));
}
BENCHMARK(BM_Rescale32);

void BM_HWC2CHW32(benchmark::State& state) {
  run_one(state, ds::vision::HWC2CHW(),
          ds::vision::Resize({32, 32}, ds::vision::Inter::kLinear)(mnist_image()));
}
BENCHMARK(BM_HWC2CHW32);

void BM_TypeCastInt32(benchmark::State& state) {
  run_one(state, ds::transforms::TypeCast(DType::kInt32), mnist_label());
}
BENCHMARK(BM_TypeCastInt32);

}  // namespace

BENCHMARK_MAIN();
