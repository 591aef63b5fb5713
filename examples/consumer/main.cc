// A small convolutional classifier trained for a few steps with cleave used as a library: the
// program that examples/consumer/CMakeLists.txt (find_package) and a pkg-config command line build
// against an installed cleave (README.md, "Using cleave from your own project").
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "cleave/cleave.h"

using namespace cleave;

// 32 noisy 8x8 images; the class (0..3) is the quadrant holding a bright 4x4 square.
struct Batch {
  Tensor images, labels;
};

Batch make_batch() {
  constexpr int64_t kSamples = 32, kSide = 8;
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<float> pixels;
  std::vector<int32_t> labels;
  for (int64_t n = 0; n < kSamples; ++n) {
    const int32_t quadrant = static_cast<int32_t>(n % 4);
    for (int64_t y = 0; y < kSide; ++y) {
      for (int64_t x = 0; x < kSide; ++x) {
        const bool bright = (y / 4) == quadrant / 2 && (x / 4) == quadrant % 2;
        pixels.push_back((bright ? 1.0f : 0.0f) + noise(rng));
      }
    }
    labels.push_back(quadrant);
  }
  return {Tensor::from_vector(pixels, Shape({kSamples, 1, kSide, kSide})),
          Tensor::from_vector(labels)};
}

int main() {
  set_seed(0);
  // 1. The network: conv -> BatchNorm -> ReLU -> max-pool -> flatten -> dense (4 classes).
  auto net = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2, 2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Dense>(4 * 4 * 4, 4)});
  // 2. The loss and the optimizer; TrainOneStep shares ownership of both, and runs the network in
  //    training mode (BatchNorm uses and updates the batch statistics).
  auto net_with_loss =
      std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::CrossEntropyLoss>());
  auto optimizer = std::make_shared<optim::Adam>(net->trainable_params(), 0.01);
  optim::TrainOneStep train_step(net_with_loss, optimizer);

  // 3. Train: every step is one compiled graph (forward, loss, backward, Adam update).
  const Batch batch = make_batch();
  Tensor loss;
  for (int step = 1; step <= 20; ++step) {
    loss = train_step(batch.images, batch.labels);
    fmt::print("step {}: loss {:.4f}\n", step, loss.item());
  }

  // 4. A collective: this process alone is the world (no cleave::init() job), so the sum over
  //    its ranks is the loss itself. The kernel comes from the runtime layer, which attaches it
  //    while the program starts.
  const Tensor total = ops::all_reduce(loss);
  fmt::print("all_reduce of the last loss over this one process: {:.4f}\n", total.item());
  return 0;
}
