// Timing op slices for the cost model (cleave/runtime/op_timing.h, NOTE [Measured op slices] in
// cleave/parallel/search.h): every listed slice of a traced network runs and gets a time, a slice
// that cannot run is skipped with its key and the reason, and bad options are errors.
#include "cleave/runtime/op_timing.h"

#include <gtest/gtest.h>

#include "cleave/cleave.h"

namespace cleave::runtime {
namespace {

// x (16, 8) -> MatMul w1 (8, 12) -> ReLU -> MatMul w2 (12, 4) -> ReduceSum.
ir::Graph mlp() {
  ir::Graph g;
  g.name = "mlp";
  ir::Tracer tracer(g);
  const Tensor x = tracer.add_input({{16, 8}, DType::kFloat32}, "x");
  const Tensor w1 = tracer.add_parameter(Tensor::ones({8, 12}).set_requires_grad(true), "w1");
  const Tensor w2 = tracer.add_parameter(Tensor::ones({12, 4}).set_requires_grad(true), "w2");
  const Tensor h = ir::Primitive("ReLU").call1({ir::Primitive("MatMul").call1({x, w1})});
  const Tensor y = ir::Primitive("MatMul").call1({h, w2});
  g.outputs.push_back(tracer.value_of(ops::reduce_sum(y, {.axes = {0, 1}})));
  return g;
}

TEST(OpTiming, SecondsPerCallWarmsUpSizesTheLoopsAndKeepsTheBest) {
  int calls = 0;
  const double s = seconds_per_call([&] { ++calls; }, 1e-6, 3);
  // A warm-up, a trial, then 3 loops of at least one call each.
  EXPECT_GE(calls, 5);
  EXPECT_GT(s, 0);
  EXPECT_THROW(seconds_per_call([] {}, 0, 3), Error);
  EXPECT_THROW(seconds_per_call([] {}, 1e-3, 0), Error);
}

TEST(OpTiming, EverySliceOfANetworkRunsAndGetsATime) {
  parallel::SearchOptions o;
  o.step_parallel.device_num = 2;
  const std::vector<parallel::OpSlice> slices = parallel::op_slices(mlp(), o);
  ASSERT_GE(slices.size(), 6u);  // two products, several strategies each
  const OpTimingReport r = time_op_slices(slices, {.loop_s = 1e-4, .loops = 1});
  EXPECT_TRUE(r.skipped.empty()) << r.skipped.front();
  ASSERT_EQ(r.timings.size(), slices.size());
  for (size_t k = 0; k < slices.size(); ++k) {
    EXPECT_EQ(r.timings[k].key, slices[k].key);
    EXPECT_GT(r.timings[k].seconds, 0) << slices[k].key;
    EXPECT_LT(r.timings[k].seconds, 1) << slices[k].key;
  }
}

TEST(OpTiming, ASliceThatCannotRunIsSkippedWithItsKeyAndTheReason) {
  const ir::OpDef& matmul = ir::Registry::global().get("MatMul");
  parallel::OpSlice bad{.op = &matmul,
                        .inputs = {{{4, 8}, DType::kFloat32}, {{7, 16}, DType::kFloat32}},
                        .grads = 0b11};
  bad.key = parallel::op_slice_key(matmul, bad.attrs, bad.inputs, bad.grads);
  parallel::OpSlice good = bad;
  good.inputs[1].shape = {8, 16};
  good.key = parallel::op_slice_key(matmul, good.attrs, good.inputs, good.grads);
  const OpTimingReport r = time_op_slices({bad, good}, {.loop_s = 1e-4, .loops = 1});
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_TRUE(r.skipped[0].starts_with(bad.key + ": ")) << r.skipped[0];
  EXPECT_NE(r.skipped[0].find("MatMul"), std::string::npos) << r.skipped[0];
  ASSERT_EQ(r.timings.size(), 1u);
  EXPECT_EQ(r.timings[0].key, good.key);
  EXPECT_THROW(time_op_slices({good}, {.loop_s = 0}), Error);
  EXPECT_THROW(time_op_slices({good}, {.loops = 0}), Error);
}

}  // namespace
}  // namespace cleave::runtime
