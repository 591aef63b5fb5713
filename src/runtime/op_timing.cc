// Timing op slices eagerly (include/cleave/runtime/op_timing.h).
#include "cleave/runtime/op_timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "cleave/autodiff/backward.h"
#include "cleave/core/error.h"
#include "cleave/core/tensor.h"
#include "cleave/ir/dispatch.h"

namespace cleave::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Random inputs of the slice's dtypes and shapes; floating inputs named in `grads` require a
// gradient.
std::vector<Tensor> inputs_of(const parallel::OpSlice& slice) {
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < slice.inputs.size(); ++k) {
    const ir::TensorMeta& m = slice.inputs[k];
    Tensor t = is_floating(m.dtype) ? Tensor::normal(m.shape, 0.0, 1.0, m.dtype)
                                    : Tensor::zeros(m.shape, m.dtype);
    if (k < 64 && ((slice.grads >> k) & 1) != 0 && is_floating(m.dtype)) {
      t.set_requires_grad(true);
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// One call: the forward, and the gradients of the inputs requiring one.
void call_once(const parallel::OpSlice& slice, const std::vector<Tensor>& inputs) {
  const std::vector<Tensor> outputs = ir::call(*slice.op, inputs, slice.attrs);
  std::vector<Tensor> wrt;
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) wrt.push_back(t);
  }
  if (wrt.empty() || outputs.empty()) return;
  const Tensor seed = Tensor::ones(outputs[0].shape(), outputs[0].dtype());
  (void)autodiff::grad(outputs[0], wrt, seed);
}

}  // namespace

double seconds_per_call(const std::function<void()>& fn, double loop_s, int loops) {
  CLEAVE_CHECK_ARG(
      loop_s > 0 && loops >= 1,
      "seconds_per_call: loop_s is {} and loops {}; expected loop_s > 0 and loops >= 1", loop_s,
      loops);
  const auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  fn();
  Clock::time_point t0 = Clock::now();
  fn();
  const double trial = std::max(since(t0), 1e-9);
  const int iters = static_cast<int>(std::clamp(loop_s / trial, 1.0, 100000.0));
  double best = trial;
  for (int loop = 0; loop < loops; ++loop) {
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    best = std::min(best, since(t0) / iters);
  }
  return best;
}

OpTimingReport time_op_slices(const std::vector<parallel::OpSlice>& slices,
                              const OpTimingOptions& options) {
  CLEAVE_CHECK_ARG(options.loop_s > 0 && options.loops >= 1,
                   "time_op_slices: loop_s is {} and loops {}; expected loop_s > 0 and loops >= 1",
                   options.loop_s, options.loops);
  OpTimingReport report;
  for (const parallel::OpSlice& slice : slices) {
    CLEAVE_CHECK_ARG(slice.op != nullptr, "time_op_slices: the slice '{}' has no primitive",
                     slice.key);
    try {
      const std::vector<Tensor> inputs = inputs_of(slice);
      const double best =
          seconds_per_call([&] { call_once(slice, inputs); }, options.loop_s, options.loops);
      report.timings.push_back({slice.key, best});
    } catch (const Error& e) {
      report.skipped.push_back(fmt::format("{}: {}", slice.key, e.what()));
    }
  }
  return report;
}

}  // namespace cleave::runtime
