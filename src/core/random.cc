#include "cleave/core/random.h"

#include "cleave/core/tensor.h"

namespace cleave {

std::mt19937_64& global_generator() {
  static std::mt19937_64 generator(0);
  return generator;
}

void set_seed(uint64_t seed) { global_generator().seed(seed); }

uint64_t next_seed() { return global_generator()(); }

}  // namespace cleave
