// Helpers for tests that run the same training in GRAPH_MODE and PYNATIVE_MODE.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cleave/runtime/context.h"

namespace cleave::testing {

// Sets the execution mode while alive and restores the previous context afterwards.
struct ModeGuard {
  explicit ModeGuard(runtime::Mode mode) : saved(runtime::get_context()) {
    runtime::Context c = saved;
    c.mode = mode;
    runtime::set_context(c);
  }
  ~ModeGuard() { runtime::set_context(saved); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;
  runtime::Context saved;
};

// |a - b| relative to the larger magnitude (at least 1e-3, so values near 0 compare absolutely).
inline double rel_diff(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-3});
}

// Losses per step and parameters (one vector per parameter) of the two modes agree within
// `tolerance` (rel_diff), and training moved (the last graph loss is below the first).
inline void expect_same_training(const std::vector<double>& graph_losses,
                                 const std::vector<double>& eager_losses,
                                 const std::vector<std::vector<double>>& graph_params,
                                 const std::vector<std::vector<double>>& eager_params,
                                 double tolerance = 1e-6) {
  ASSERT_EQ(graph_losses.size(), eager_losses.size());
  for (size_t i = 0; i < graph_losses.size(); ++i) {
    EXPECT_LE(rel_diff(graph_losses[i], eager_losses[i]), tolerance)
        << "step " << i << ": graph " << graph_losses[i] << " pynative " << eager_losses[i];
  }
  ASSERT_EQ(graph_params.size(), eager_params.size());
  for (size_t p = 0; p < graph_params.size(); ++p) {
    ASSERT_EQ(graph_params[p].size(), eager_params[p].size());
    double worst = 0;
    for (size_t k = 0; k < graph_params[p].size(); ++k) {
      worst = std::max(worst, rel_diff(graph_params[p][k], eager_params[p][k]));
    }
    EXPECT_LE(worst, tolerance) << "parameter " << p;
  }
  ASSERT_FALSE(graph_losses.empty());
  EXPECT_LT(graph_losses.back(), graph_losses.front());
}

}  // namespace cleave::testing
