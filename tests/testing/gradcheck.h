// Test helpers: finite-difference gradient checks and tensor comparisons.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cleave/cleave.h"

namespace cleave::testing {

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-6;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-4;
  // Inputs whose gradient is checked; empty = every floating input.
  std::vector<int> inputs_to_check;
};

// Checks the gradients of `fn` at `inputs` (use Float64 inputs) against central differences.
// The output may have any shape: the scalar checked is sum(fn(inputs) * w) for a fixed random w,
// so every output element contributes with a distinct weight. On failure the message names the
// input, the element index and both values.
::testing::AssertionResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                     const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options = {});

// Uniform Float64 tensor in [low, high) from a generator seeded by `seed`.
Tensor random_f64(const Shape& shape, double low = -1.0, double high = 1.0, uint64_t seed = 1);

// Same shape and every element within atol + rtol * |expected|; reports the worst element.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                     double atol = 1e-6, double rtol = 1e-6);

// Runs `fn`, expecting a cleave::Error whose message contains every string of `fragments`.
::testing::AssertionResult throws_error(const std::function<void()>& fn,
                                        const std::vector<std::string>& fragments);

// Runs `fn`, expecting a cleave::Error of kind `kind` whose message contains every string of
// `fragments`.
::testing::AssertionResult throws_error_of_kind(const std::function<void()>& fn, ErrorKind kind,
                                                const std::vector<std::string>& fragments);

}  // namespace cleave::testing

// EXPECT_ERROR(statement, "fragment", ...): statement throws cleave::Error containing each
// fragment.
#define EXPECT_ERROR(statement, ...) \
  EXPECT_TRUE(::cleave::testing::throws_error([&] { statement; }, {__VA_ARGS__}))

// EXPECT_ERROR_KIND(statement, ErrorKind::kUnavailable, "fragment", ...): statement throws
// cleave::Error of that kind containing each fragment (none: any message).
#define EXPECT_ERROR_KIND(statement, kind, ...) \
  EXPECT_TRUE(::cleave::testing::throws_error_of_kind([&] { statement; }, kind, {__VA_ARGS__}))
