// The harness of the generated sharding tests: every valid strategy of an operator, run through
// the whole SEMI_AUTO_PARALLEL pipeline on thread ranks, against one device.
//
// NOTE [Sharded operator check]
// A case is one primitive call with global inputs. Its reference runs eagerly on one device:
// the outputs, and the gradients of L = sum_k sum(y_k * w_k) (fixed random w_k) with respect to
// every floating input. A sharded run compiles a training step on every rank of a world of N
// thread ranks (the in-process backend): the inputs are parameters (laid out as the strategy
// needs them, so the op's own layouts are what is tested), the op carries the strategy, the step
// returns L and the outputs (made replicated by the rewrite), and its "update" writes each
// parameter's gradient — local, after the mirror AllReduce — into a tensor the test reads. Every
// rank's outputs must equal the reference outputs, and its gradients its slices of the reference
// gradients, within 1e-5 relative (Float64 inputs). An op that writes into its inputs in place
// (OpDef::mutates_inputs: the optimizer updates, Assign) is checked by what it wrote: after the
// step, every input a rank holds (its slice, as the strategy lays it out, or the whole of a
// scalar) must equal its slice of that input after the one-device call. All ranks of a world run
// the same cases in the same order.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cleave/cleave.h"

namespace cleave::testing {

struct OpCase {
  std::string op;
  ir::Attrs attrs;
  std::vector<Tensor> inputs;  // global values; non-floating inputs get no gradient
  std::string label;           // names the case in failures (default: op and input shapes)
  // Inputs whose gradient is not checked (e.g. a non-differentiable mask).
  std::vector<int> no_grad;
};

// One failure: the case, strategy, device count, rank and what differed.
struct ShardFailure {
  std::string what;
};

// Runs every valid strategy of every case on each device count (ranks as threads on the
// in-process backend). Returns the failures (empty when every rank of every run matched) and
// counts the runs in *runs.
std::vector<ShardFailure> check_sharded(const std::vector<OpCase>& cases,
                                        const std::vector<int>& device_counts, int* runs);

// check_sharded on 1, 2, 3, 4, 6 and 8 devices as gtest expectations: each failure (the first
// 20) reported, none allowed, and more runs than cases (every case has several strategies).
void expect_all_equal_one_device(const std::vector<OpCase>& cases);

// The strategies check_sharded runs for `c` on `device_num` devices (the rule's strategies()).
std::vector<ir::Strategy> strategies_of(const OpCase& c, int64_t device_num);

// The planning error of `strategy` for `c` on `device_num` devices ("" when it is valid):
// plan_step_parallel on the traced graph, no communication. An error tracing the call (a
// strategy without one entry per input or one split per dimension, which Primitive rejects
// before any rule sees it) is returned the same way.
std::string plan_error(const OpCase& c, const ir::Strategy& strategy, int64_t device_num);

// Expects (gtest) the planning error of `strategy` for `c` on `device_num` devices to contain
// every one of `fragments`; a failure when the strategy is accepted.
void expect_plan_error(const OpCase& c, const ir::Strategy& strategy, int64_t device_num,
                       const std::vector<std::string>& fragments);

// `attrs` with `name` set to `value` (a case's attributes plus one).
ir::Attrs with(ir::Attrs attrs, const char* name, const ir::AttrValue& value);

// A Float64 tensor of `shape` with values in [low, high), seeded.
Tensor f64(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0);
// f64 in [0.5, 2): for inputs that must be positive (Log, Sqrt, a divisor, a variance).
Tensor positive(const Shape& shape, uint64_t seed);

}  // namespace cleave::testing
