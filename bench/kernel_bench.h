// What the kernel benches (pool_bench, conv_bench) share: their THREADS argument and their timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

// argv[1] when given, else 1; anything but a whole number from 1 to 256 ends the program with
// status 2 and a line saying what was expected.
inline int threads_arg(int argc, char** argv) {
  if (argc < 2) return 1;
  char* end = nullptr;
  const long threads = std::strtol(argv[1], &end, 10);
  if (end == argv[1] || *end != '\0' || threads < 1 || threads > 256 || argc > 2) {
    std::fprintf(stderr,
                 "%s: usage: %s [THREADS]; THREADS is a whole number from 1 to 256, got %s\n",
                 argv[0], argv[0], argc > 2 ? "more than one argument" : argv[1]);
    std::exit(2);
  }
  return static_cast<int>(threads);
}

// The median over 7 trials of the mean time per call of `call`, in µs, each trial at least
// 20 ms, after 3 calls of warm-up (which also build and cache oneDNN's primitives).
inline double median_us(const std::function<void()>& call) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i) call();
  std::vector<double> trials;
  for (int trial = 0; trial < 7; ++trial) {
    int64_t calls = 0;
    const auto start = clock::now();
    double elapsed = 0;
    do {
      call();
      ++calls;
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
    } while (elapsed < 0.02);
    trials.push_back(elapsed * 1e6 / static_cast<double>(calls));
  }
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}
