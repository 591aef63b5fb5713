#include "cleave/core/random.h"

#include "cleave/core/tensor.h"

namespace cleave {

std::mt19937_64& global_generator() {
  static std::mt19937_64 generator(0);
  return generator;
}

std::recursive_mutex& global_generator_lock() {
  static std::recursive_mutex lock;
  return lock;
}

void set_seed(uint64_t seed) {
  std::lock_guard<std::recursive_mutex> lock(global_generator_lock());
  global_generator().seed(seed);
}

uint64_t next_seed() {
  std::lock_guard<std::recursive_mutex> lock(global_generator_lock());
  return global_generator()();
}

SeededScope::SeededScope(uint64_t seed) : lock_(global_generator_lock()) { set_seed(seed); }

}  // namespace cleave
