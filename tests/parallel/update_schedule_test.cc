// Where a step's updates run: NOTE [Updates at their gradients] (hoist_updates) in
// cleave/parallel/data_parallel.h, on graphs built node by node.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cleave/ir/graph.h"
#include "cleave/parallel/data_parallel.h"

namespace cleave::parallel {
namespace {

const ir::OpDef kCompute{.name = "Compute"};
const ir::OpDef kView{.name = "View", .output_is_view = true};
const ir::OpDef kAllReduce{.name = "AllReduce", .communicates = true};
// Writes its inputs 0 and 1 (the parameter and its state); reads the others.
const ir::OpDef kUpdate{.name = "Update", .mutates_inputs = true, .mutated_inputs = {0, 1}};

ir::TensorMeta f32() { return {Shape{4}, DType::kFloat32}; }

// A graph built node by node, each node named; each call returns the new node's index.
struct Builder {
  ir::Graph g;

  int add(ir::Node node, const std::string& name) {
    node.name = name;
    g.nodes.push_back(std::move(node));
    return static_cast<int>(g.nodes.size()) - 1;
  }
  int input(const std::string& name) {
    const int i = add({.kind = ir::NodeKind::kInput, .outputs = {f32()}}, name);
    g.inputs.push_back(i);
    return i;
  }
  int parameter(const std::string& name) {
    return add({.kind = ir::NodeKind::kParameter, .outputs = {f32()}}, name);
  }
  int constant(const std::string& name) {
    return add({.kind = ir::NodeKind::kConstant, .outputs = {f32()}}, name);
  }
  int op(const ir::OpDef& def, const std::string& name, std::vector<int> inputs) {
    std::vector<ir::ValueRef> refs;
    for (int i : inputs) refs.push_back({i, 0});
    const bool update = def.mutates_inputs;
    return add(
        {.op = &def,
         .inputs = refs,
         .outputs = update ? std::vector<ir::TensorMeta>{} : std::vector<ir::TensorMeta>{f32()}},
        name);
  }
  int end() const { return static_cast<int>(g.nodes.size()); }
};

std::vector<std::string> names(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const ir::Node& n : g.nodes) out.push_back(n.name);
  return out;
}

TEST(HoistUpdates, AnUpdateWhoseGradientNeedsNoReductionRunsRightAfterItsLastReader) {
  Builder b;
  const int x = b.input("x");
  const int w = b.parameter("w");
  const int y = b.op(kCompute, "forward", {x, w});
  const int dw = b.op(kCompute, "dw", {y, x});
  b.op(kCompute, "dx", {y, w});  // the backward still reads w after its gradient is made
  b.op(kCompute, "rest_of_backward", {dw});
  const int tail = b.end();
  const int lr = b.constant("lr");
  const int state = b.constant("w.state");  // the optimizer's: made with the update
  b.op(kUpdate, "update_w", {w, state, dw, lr});
  EXPECT_EQ(hoist_updates(b.g, tail), 1);
  EXPECT_EQ(names(b.g), (std::vector<std::string>{"x", "w", "forward", "dw", "dx", "w.state", "lr",
                                                  "update_w", "rest_of_backward"}));
}

TEST(HoistUpdates, ReadsThroughViewsAndEarlierWritesAreNotOvertaken) {
  Builder b;
  const int x = b.input("x");
  const int w = b.parameter("w"), s = b.parameter("s"), s2 = b.parameter("s2");
  const int dw = b.op(kCompute, "dw", {x});
  const int view = b.op(kView, "w_view", {w});
  b.op(kCompute, "reads_w_view", {view});  // a read of w through a view
  b.op(kUpdate, "writes_x", {x, s2});      // writes x, which update_w reads
  b.op(kCompute, "last", {x});
  const int tail = b.end();
  b.op(kUpdate, "update_w", {w, s, dw, x});
  EXPECT_EQ(hoist_updates(b.g, tail), 1);
  EXPECT_EQ(names(b.g), (std::vector<std::string>{"x", "w", "s", "s2", "dw", "w_view",
                                                  "reads_w_view", "writes_x", "update_w", "last"}));
}

TEST(HoistUpdates, UpdatesOfReducedGradientsAndOfTheTailStayInOrder) {
  Builder b;
  const int x = b.input("x");
  const int w1 = b.parameter("w1"), w2 = b.parameter("w2"), w3 = b.parameter("w3");
  const int s1 = b.parameter("s1"), s2 = b.parameter("s2"), s3 = b.parameter("s3");
  const int g1 = b.op(kCompute, "g1", {x});
  const int reduced = b.op(kAllReduce, "g1.allreduce", {g1});  // hoisted before the tail
  const int g2 = b.op(kCompute, "g2", {x});
  const int g3 = b.op(kCompute, "g3", {x});
  b.op(kCompute, "last", {x});
  const int tail = b.end();
  const int sliced = b.op(kView, "g1.view", {reduced});
  b.op(kUpdate, "update_w1", {w1, s1, sliced});           // through a view of a collective
  b.op(kUpdate, "update_w2_reduced", {w2, s2, reduced});  // a collective's output
  const int in_tail = b.op(kCompute, "g3.scaled", {g3});
  b.op(kUpdate, "update_w3", {w3, s3, in_tail});   // reads a tail node
  b.op(kUpdate, "update_w3_again", {w3, s3, g2});  // after update_w3, which writes w3
  const std::vector<std::string> before = names(b.g);
  EXPECT_EQ(hoist_updates(b.g, tail), 0);
  EXPECT_EQ(names(b.g), before);
}

TEST(HoistUpdates, NothingAfterTheTailMovesNothing) {
  Builder b;
  const int x = b.input("x");
  b.op(kCompute, "y", {x});
  const std::vector<std::string> before = names(b.g);
  EXPECT_EQ(hoist_updates(b.g, b.end()), 0);
  EXPECT_EQ(names(b.g), before);
}

}  // namespace
}  // namespace cleave::parallel
