// Small datasets and networks shared by the train tests.
#pragma once

#include <memory>
#include <vector>

#include "cleave/cleave.h"

namespace cleave::testing {

// n samples of 4 features, 3 classes; the class is the arg-max of the first 3 features, so a
// linear model learns it. Deterministic for a given seed (also the shuffle order, a new one each
// epoch). Batched by batch_size (drop_remainder).
inline dataset::DatasetPtr blobs_dataset(int64_t n, int64_t batch_size, uint64_t seed = 7,
                                         bool shuffle = false) {
  set_seed(seed);
  const Tensor x = Tensor::normal({n, 4});
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int32_t best = 0;
    for (int32_t c = 1; c < 3; ++c) {
      if (x.at({i, c}) > x.at({i, best})) best = c;
    }
    labels[static_cast<size_t>(i)] = best;
  }
  auto get_item = [x, labels](int64_t i) -> dataset::Row {
    return {x.narrow_rows(i, 1).view({4}).clone(),
            Tensor::scalar(labels[static_cast<size_t>(i)], DType::kInt32)};
  };
  return dataset::GeneratorDataset(get_item, n, {"data", "label"}, {.shuffle = shuffle})
      ->batch(batch_size, true);
}

// Dense(4 -> 8) -> ReLU -> Dense(8 -> 3).
class SmallNet : public nn::Cell {
 public:
  SmallNet() : Cell("SmallNet") {
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(4, 8));
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(8, 3));
  }
  Tensor construct(const Tensor& x) override {
    return fc2->construct(ops::relu(fc1->construct(x)));
  }
  std::shared_ptr<nn::Dense> fc1, fc2;
};

}  // namespace cleave::testing
