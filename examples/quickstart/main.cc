// The README's usage example: a small classifier trained eagerly (PyNative style).
#include <cstdint>
#include <memory>
#include <vector>

#include "cleave/cleave.h"

using namespace cleave;

int main() {
  set_seed(0);
  // Dense(4 -> 16, relu) -> Dense(16 -> 3): 3-class logits for 4 features.
  auto net = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Dense>(4, 16, nn::DenseOptions{.activation = "relu"}),
      std::make_shared<nn::Dense>(16, 3)});
  nn::SoftmaxCrossEntropyWithLogits loss_fn(/*sparse=*/true, /*reduction=*/"mean");
  optim::Momentum opt(net->trainable_params(), /*lr=*/0.1, /*momentum=*/0.9);

  Tensor x = Tensor::normal({8, 4});                                  // 8 samples
  Tensor y = Tensor::from_vector<int32_t>({0, 1, 2, 0, 1, 2, 0, 1});  // their classes

  for (int step = 1; step <= 100; ++step) {
    Tensor loss = loss_fn((*net)(x), y);  // forward; every op is recorded on the tape
    autodiff::backward(loss);             // gradients into each parameter's .grad()
    opt.step();                           // param -= lr * accum
    opt.zero_grad();
    if (step % 25 == 0) fmt::print("step {}: loss {:.4f}\n", step, loss.item());
  }
  return 0;
}
