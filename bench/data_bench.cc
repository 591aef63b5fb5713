// Throughput of the dataset pipeline of seed 000's create_dataset on synthetic MNIST.
//
//   data_bench ROW [SECONDS] [MNIST_TRAIN_DIR]   prints "ROW <samples/s>"
//
// Rows: mnist_pipeline_b32 (MnistDataset -> TypeCast label -> Resize 32x32 bilinear -> Rescale
// 1/255 -> Rescale normalize -> HWC2CHW -> shuffle 10000 -> batch 32 drop_remainder, one worker
// per map as in the seed), mnist_pipeline_b32_w2 (the same with num_parallel_workers=2),
// mnist_pipeline_b32_label and mnist_pipeline_b32_image (the same pipeline asked for the label
// column or the image column only, as seed 000's placed workers 0 and 3 ask from their second
// epoch on: NOTE [Column projection] in cleave/data/dataset.h), and
// lenet5_fed_b32_t1: LeNet training steps (Momentum, one OpenMP thread) fed by that pipeline,
// printing "ROW <samples/s> wait=<fraction of the time spent in next() within epochs>
// epoch_start_wait=<fraction spent on the first batch of each epoch (the shuffle-buffer fill)>".
// Without a folder, 60000 images are generated (cleave-datagen's MNIST) into a temporary folder
// first. The figure counts samples delivered to the consumer (which does nothing else) over
// whole epochs, including each epoch's shuffle-buffer fill, until SECONDS have passed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cleave/cleave.h"
#include "cleave/data/synthetic.h"
#include "testing/models.h"

using namespace cleave;
namespace ds = cleave::dataset;

namespace {

ds::DatasetPtr create_dataset(const std::string& path, int64_t batch_size, int workers) {
  auto mnist = ds::MnistDataset(path);
  mnist = mnist->map({ds::transforms::TypeCast(DType::kInt32)}, {"label"}, workers);
  mnist =
      mnist->map({ds::vision::Resize({32, 32}, ds::vision::Inter::kLinear)}, {"image"}, workers);
  mnist = mnist->map({ds::vision::Rescale(1.0 / 255.0, 0.0)}, {"image"}, workers);
  mnist = mnist->map({ds::vision::Rescale(1 / 0.3081, -1 * 0.1307 / 0.3081)}, {"image"}, workers);
  mnist = mnist->map({ds::vision::HWC2CHW()}, {"image"}, workers);
  mnist = mnist->shuffle(10000);
  return mnist->batch(batch_size, true);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: data_bench ROW [SECONDS] [MNIST_TRAIN_DIR]\n");
    return 2;
  }
  try {
    const std::string row = argv[1];
    const double seconds = argc > 2 ? std::stod(argv[2]) : 2.0;
    int workers = 1;
    const bool fed = row == "lenet5_fed_b32_t1";
    ds::ColumnMask needed = {true, true};  // image, label
    if (row == "mnist_pipeline_b32_w2") {
      workers = 2;
    } else if (row == "mnist_pipeline_b32_label") {
      needed = {false, true};
    } else if (row == "mnist_pipeline_b32_image") {
      needed = {true, false};
    } else if (row != "mnist_pipeline_b32" && !fed) {
      std::fprintf(stderr,
                   "data_bench: unknown row '%s'; expected mnist_pipeline_b32, "
                   "mnist_pipeline_b32_w2, mnist_pipeline_b32_label, mnist_pipeline_b32_image or "
                   "lenet5_fed_b32_t1\n",
                   row.c_str());
      return 2;
    }
    const size_t counted = needed[1] ? 1 : 0;  // a column the rows have, to count samples
    std::string dir;
    std::string tmp;
    if (argc > 3) {
      dir = argv[3];
    } else {
      std::string pattern =
          (std::filesystem::temp_directory_path() / "cleave_data_bench_XXXXXX").string();
      tmp = mkdtemp(pattern.data());
      ds::synthetic::write_mnist(tmp, 60000, 0, 0);
      dir = tmp + "/MNIST_Data/train";
    }
    set_seed(0);
    auto pipeline = create_dataset(dir, 32, workers);
    using clock = std::chrono::steady_clock;
    int64_t samples = 0;
    if (fed) {
      auto net = std::make_shared<testing::LeNet5>();
      nn::SoftmaxCrossEntropyWithLogits loss_fn(true, "mean");
      optim::Momentum opt(net->trainable_params(), 0.01, 0.9);
      double waited = 0, first_waited = 0;  // in next(): after and at the start of an epoch
      const auto start = clock::now();
      double elapsed = 0;
      // One iterator for all epochs, as a training loop uses it (the next epoch's shuffle
      // buffer fills while this one is consumed).
      auto it = pipeline->create_tuple_iterator(1000);
      while (elapsed < seconds) {
        ds::Row batch;
        for (bool first = true;; first = false) {
          const auto before = clock::now();
          if (!it->next(batch)) break;
          (first ? first_waited : waited) +=
              std::chrono::duration<double>(clock::now() - before).count();
          opt.zero_grad();
          Tensor loss = loss_fn((*net)(batch[0]), batch[1]);
          autodiff::backward(loss);
          opt.step();
          samples += batch[0].dim(0);
          elapsed = std::chrono::duration<double>(clock::now() - start).count();
          if (elapsed >= seconds) break;
        }
      }
      std::printf("%s %.0f wait=%.3f epoch_start_wait=%.3f\n", row.c_str(),
                  static_cast<double>(samples) / elapsed, waited / elapsed, first_waited / elapsed);
    } else {
      const auto start = clock::now();
      double elapsed = 0;
      while (elapsed < seconds) {
        auto it = pipeline->create_tuple_iterator(1, needed);
        ds::Row batch;
        while (it->next(batch)) samples += batch[counted].dim(0);
        elapsed = std::chrono::duration<double>(clock::now() - start).count();
      }
      std::printf("%s %.0f\n", row.c_str(), static_cast<double>(samples) / elapsed);
    }
    if (!tmp.empty()) std::filesystem::remove_all(tmp);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
