// The executor's run loop on hand-built graphs of local ops that log what they do: where it waits
// for a collective in flight (NOTE [Collectives in flight]), that a failure still waits for it,
// and what it measures (NOTE [Executor profiling]).
#include "cleave/runtime/executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "testing/gradcheck.h"

namespace cleave::runtime {
namespace {

std::vector<std::string>& events() {
  static std::vector<std::string> log;
  return log;
}

std::vector<ir::TensorMeta> like_input_0(const ir::InferContext& ctx) { return {ctx.inputs[0]}; }

ir::OpDef logged(std::string name) {
  ir::OpDef op{.name = name, .num_inputs = ir::OpDef::kVariadic, .infer = like_input_0};
  op.cpu_kernel = [name](const ir::KernelContext&) { events().push_back(name); };
  return op;
}

const ir::OpDef kA = logged("A");
const ir::OpDef kB = logged("B");
const ir::OpDef kReader = logged("reader");
const ir::OpDef kFails = [] {
  ir::OpDef op = logged("fails");
  op.cpu_kernel = [](const ir::KernelContext&) { CLEAVE_FAIL("the op failed"); };
  return op;
}();
// Communicates inline: takes a millisecond.
const ir::OpDef kExchange = [] {
  ir::OpDef op = logged("exchange");
  op.communicates = true;
  op.cpu_kernel = [](const ir::KernelContext&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  return op;
}();
// Started asynchronously; its wait takes a millisecond.
const ir::OpDef kAllReduce = [] {
  ir::OpDef op = logged("all_reduce");
  op.communicates = true;
  op.async_kernel = [](const ir::KernelContext&) {
    events().push_back("start all_reduce");
    return std::function<void()>([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      events().push_back("wait all_reduce");
    });
  };
  return op;
}();

// A graph built op by op on one input x (node 0); the last op is its output.
struct Builder {
  ir::Graph g;
  Builder() {
    g.nodes.push_back({.kind = ir::NodeKind::kInput, .outputs = {meta()}, .name = "x"});
    g.inputs = {0};
  }
  static ir::TensorMeta meta() { return {Shape{4}, DType::kFloat32}; }
  int op(const ir::OpDef& def, const std::vector<int>& inputs) {
    std::vector<ir::ValueRef> refs;
    for (int i : inputs) refs.push_back({i, 0});
    g.nodes.push_back({.op = &def, .inputs = refs, .outputs = {meta()}, .name = def.name});
    return static_cast<int>(g.nodes.size()) - 1;
  }
  ir::Graph done() {
    g.outputs = {{static_cast<int>(g.nodes.size()) - 1, 0}};
    return std::move(g);
  }
};

TEST(Executor, ACollectiveInFlightIsWaitedForRightBeforeItsFirstReader) {
  Builder b;
  const int reduced = b.op(kAllReduce, {0});
  const int a = b.op(kA, {0});
  b.op(kReader, {reduced, b.op(kB, {a})});
  Executor exec(b.done());
  events().clear();
  exec.run({Tensor::zeros({4})});
  EXPECT_EQ(events(),
            (std::vector<std::string>{"start all_reduce", "A", "B", "wait all_reduce", "reader"}));
  EXPECT_GE(exec.communication_wait_seconds(), 1e-3);
}

TEST(Executor, ACollectiveReadByTheNextOpRunsInline) {
  Builder b;
  b.op(kReader, {b.op(kAllReduce, {0})});
  Executor exec(b.done());
  events().clear();
  exec.run({Tensor::zeros({4})});
  EXPECT_EQ(events(), (std::vector<std::string>{"all_reduce", "reader"}));  // its cpu_kernel
}

// NOTE [Collectives in place]: with no core left for the communication thread, the same
// collective runs where it stands, by its cpu_kernel.
TEST(Executor, WithoutACoreForCommunicationACollectiveRunsInPlace) {
  Builder b;
  const int reduced = b.op(kAllReduce, {0});
  const int a = b.op(kA, {0});
  b.op(kReader, {reduced, b.op(kB, {a})});
  Executor exec(b.done(), {.collectives_in_flight = false});
  events().clear();
  exec.run({Tensor::zeros({4})});
  EXPECT_EQ(events(), (std::vector<std::string>{"all_reduce", "A", "B", "reader"}));
}

TEST(Executor, AFailureWhileACollectiveIsInFlightStillWaitsForIt) {
  Builder b;
  const int reduced = b.op(kAllReduce, {0});
  b.op(kReader, {reduced, b.op(kFails, {b.op(kA, {0})})});
  Executor exec(b.done());
  const std::vector<std::string> expected = {"start all_reduce", "A", "wait all_reduce"};
  events().clear();
  EXPECT_ERROR(exec.run({Tensor::zeros({4})}), "the op failed");
  EXPECT_EQ(events(), expected);
  events().clear();
  EXPECT_ERROR(exec.run({Tensor::zeros({4})}), "the op failed");
  EXPECT_EQ(events(), expected);  // nothing left over from the first run
}

TEST(Executor, InlineCommunicationIsCommunicationWaitOnlyWhileNodeTimingIsOff) {
  Builder b;
  const int exchange = b.op(kExchange, {b.op(kA, {0})});
  b.op(kB, {exchange});
  Executor exec(b.done());
  exec.run({Tensor::zeros({4})});
  const double waited = exec.communication_wait_seconds();
  EXPECT_GE(waited, 1e-3);
  EXPECT_TRUE(exec.node_seconds().empty());
  exec.set_profiling(true);
  exec.run({Tensor::zeros({4})});
  EXPECT_GE(exec.node_seconds()[exchange], 1e-3);
  // While ops are timed the exchange counts as its node's time instead (NOTE [Executor
  // profiling]).
  EXPECT_EQ(exec.communication_wait_seconds(), waited);
  Builder computing;
  computing.op(kB, {computing.op(kA, {0})});
  Executor no_communication(computing.done());
  no_communication.run({Tensor::zeros({4})});
  EXPECT_EQ(no_communication.communication_wait_seconds(), 0.0);
}

}  // namespace
}  // namespace cleave::runtime
