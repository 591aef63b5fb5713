// The global random generator behind set_seed.
#pragma once

#include <cstdint>
#include <mutex>
#include <random>

namespace cleave {

// NOTE [Global generator]: one mt19937_64 per process, as MindSpore's set_seed; draws are
// deterministic for a given set_seed. Every draw (Tensor::normal/uniform/truncated_normal, an
// initializer, next_seed) holds one recursive lock for its whole tensor, so threads may draw at
// once. What they draw then depends on their order: ranks run as threads that must draw the same
// values each build under a SeededScope, which keeps every other thread's draws (a dataset's
// next_seed, a Dropout) out until it ends.

// The generator, for code that already holds global_generator_lock().
std::mt19937_64& global_generator();
std::recursive_mutex& global_generator_lock();
// A fresh seed drawn from the global generator, e.g. for a kernel's own engine.
uint64_t next_seed();

// set_seed(seed), then the generator is this thread's until the scope ends.
class SeededScope {
 public:
  explicit SeededScope(uint64_t seed);

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

}  // namespace cleave
