// The global random generator behind set_seed.
#pragma once

#include <cstdint>
#include <random>

namespace cleave {

// mt19937_64; draws are deterministic for a given set_seed. Not thread-safe: draw on one thread.
std::mt19937_64& global_generator();
// A fresh seed drawn from the global generator, e.g. for a kernel's own engine.
uint64_t next_seed();

}  // namespace cleave
