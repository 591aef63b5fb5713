// Timing a model's op slices on this machine for the cost model (NOTE [Measured op slices] in
// cleave/parallel/search.h): what cleave-plan --time-ops runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cleave/parallel/machine_profile.h"
#include "cleave/parallel/search.h"

namespace cleave::runtime {

// Seconds of one call of `fn`: one call to warm up, one to size the loops, then the best of
// `loops` loops of about `loop_s` each (on a shared machine the fastest loop is the least
// disturbed). What cleave-calibrate's points and time_op_slices are timed with, so that a
// profile's curves and its timed slices are measured alike. Requires loop_s > 0, loops >= 1.
double seconds_per_call(const std::function<void()>& fn, double loop_s, int loops);

struct OpTimingOptions {
  double loop_s = 0.02;  // each timed loop calls the slice for about this long (once at least)
  int loops = 3;         // a slice's time is the best loop's time per call
};

struct OpTimingReport {
  std::vector<parallel::OpTiming> timings;  // one per slice that ran, in the slices' order
  std::vector<std::string> skipped;         // "KEY: why" for each slice that could not run
};

// Runs each slice eagerly on random data of its inputs' dtypes and slice shapes, with this
// process's intra-op threads: its forward, then, when slice.grads names inputs, their gradients
// (autodiff::grad of the first output, seeded with ones), as a training step computes them,
// timed by seconds_per_call. A slice whose call throws Error (an attribute that does not fit its
// slice shapes) is skipped with the error's text, and the cost model keeps its flops curve for it.
OpTimingReport time_op_slices(const std::vector<parallel::OpSlice>& slices,
                              const OpTimingOptions& options = {});

}  // namespace cleave::runtime
