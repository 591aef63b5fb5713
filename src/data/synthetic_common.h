// Shared by the synthetic MNIST and CIFAR-10 generators.
#pragma once

#include <cstdint>
#include <vector>

namespace cleave::dataset::synthetic {

// Labels 0..9 for `count` images: each block of ten holds every label once, in a shuffled order,
// so the classes are balanced.
std::vector<uint8_t> balanced_labels(int64_t count, uint64_t seed);

}  // namespace cleave::dataset::synthetic
