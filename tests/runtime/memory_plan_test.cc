// The memory plan (NOTE [Memory plan]), the waits for collectives in flight and the cut-edge
// buffers bound to mailbox slots, each on small graphs: most built by hand from local OpDefs
// (the planner reads only the ops' flags and the output metas), a few traced and run.
#include "cleave/runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <memory>

#include "cleave/cleave.h"
#include "cleave/runtime/rpc.h"
#include "testing/graph_mode.h"
#include "testing/models.h"

namespace cleave::runtime {
namespace {

const ir::OpDef kCompute{.name = "Compute"};
const ir::OpDef kView{.name = "View", .output_is_view = true};
const ir::OpDef kUpdate{.name = "Update", .mutates_inputs = true};
const ir::OpDef kAllReduce = [] {
  ir::OpDef op{.name = "AllReduce", .communicates = true};
  op.async_kernel = [](const ir::KernelContext&) { return std::function<void()>([] {}); };
  return op;
}();

ir::TensorMeta f32(int64_t elements) { return {Shape{elements}, DType::kFloat32}; }

// A graph built node by node; each call returns the new node's index.
struct Builder {
  ir::Graph g;

  int add(ir::Node node) {
    g.nodes.push_back(std::move(node));
    return static_cast<int>(g.nodes.size()) - 1;
  }
  int input(ir::TensorMeta meta) {
    const int i = add({.kind = ir::NodeKind::kInput, .outputs = {meta}});
    g.inputs.push_back(i);
    return i;
  }
  int parameter(ir::TensorMeta meta) {
    return add({.kind = ir::NodeKind::kParameter, .outputs = {meta}});
  }
  int op(const ir::OpDef& def, std::vector<int> inputs, std::vector<ir::TensorMeta> outputs,
         ir::Attrs attrs = {}) {
    std::vector<ir::ValueRef> refs;
    for (int i : inputs) refs.push_back({i, 0});
    return add({.op = &def, .attrs = std::move(attrs), .inputs = refs, .outputs = outputs});
  }
  void output(int node) { g.outputs.push_back({node, 0}); }
  int end() const { return static_cast<int>(g.nodes.size()); }
};

size_t room(const MemoryPlan::Buffer& b) { return (std::max<size_t>(b.bytes, 1) + 63) / 64 * 64; }

// Every placed buffer is 64-byte aligned inside the arena, no two buffers alive at once share a
// byte, and the totals add up.
void expect_consistent(const MemoryPlan& plan) {
  size_t peak = 0, total = 0;
  int placed = 0;
  for (size_t a = 0; a < plan.buffers.size(); ++a) {
    const MemoryPlan::Buffer& x = plan.buffers[a];
    EXPECT_EQ(plan.offset[x.node][x.output], x.offset) << "buffer " << a;
    if (x.offset < 0) continue;
    ++placed;
    EXPECT_EQ(x.offset % 64, 0) << "buffer " << a;
    peak = std::max(peak, static_cast<size_t>(x.offset) + room(x));
    total += room(x);
    for (size_t b = a + 1; b < plan.buffers.size(); ++b) {
      const MemoryPlan::Buffer& y = plan.buffers[b];
      if (y.offset < 0 || y.last < x.first || x.last < y.first) continue;
      const bool apart = static_cast<size_t>(x.offset) + room(x) <= static_cast<size_t>(y.offset) ||
                         static_cast<size_t>(y.offset) + room(y) <= static_cast<size_t>(x.offset);
      EXPECT_TRUE(apart) << "buffers " << a << " (node " << x.node << ") and " << b << " (node "
                         << y.node << ") are alive at once and overlap";
    }
  }
  EXPECT_EQ(plan.peak_bytes, peak);
  EXPECT_EQ(plan.total_bytes, total);
  EXPECT_EQ(plan.num_buffers, placed);
}

TEST(MemoryPlan, InputsParametersAndConstantsAreBoundNotPlanned) {
  Builder b;
  const int x = b.input(f32(16));
  const int w = b.parameter(f32(16));
  const int y = b.op(kCompute, {x, w}, {f32(16)});
  b.output(y);
  const MemoryPlan plan = plan_memory(b.g);
  EXPECT_EQ(plan.buffer_of[x][0], -1);
  EXPECT_EQ(plan.buffer_of[w][0], -1);
  EXPECT_EQ(plan.offset[x][0], -1);
  ASSERT_EQ(plan.buffers.size(), 1u);
  EXPECT_EQ(plan.buffer_of[y][0], 0);
  EXPECT_EQ(plan.buffers[0].offset, 0);
}

TEST(MemoryPlan, ABufferLivesFromItsWriterToItsLastReaderAndAnOutputToTheEnd) {
  Builder b;
  const int x = b.input(f32(16));
  const int a = b.op(kCompute, {x}, {f32(16)});
  const int c = b.op(kCompute, {a}, {f32(16)});
  const int d = b.op(kCompute, {a, c}, {f32(16)});
  const int e = b.op(kCompute, {d}, {f32(16)});
  b.output(e);
  const MemoryPlan plan = plan_memory(b.g);
  const auto& buffer = [&](int node) { return plan.buffers[plan.buffer_of[node][0]]; };
  EXPECT_EQ(buffer(a).first, a);
  EXPECT_EQ(buffer(a).last, d);  // read by c and, last, by d
  EXPECT_EQ(buffer(c).first, c);
  EXPECT_EQ(buffer(c).last, d);
  EXPECT_EQ(buffer(e).last, b.end());  // a graph output
  expect_consistent(plan);
}

TEST(MemoryPlan, EachOutputOfAnOpHasABufferAndAnUnreadOneDiesAtOnce) {
  Builder b;
  const int x = b.input(f32(16));
  const int pair = b.op(kCompute, {x}, {f32(16), f32(32)});
  const int reader = b.op(kCompute, {pair}, {f32(16)});  // of output 0
  b.output(reader);
  const MemoryPlan plan = plan_memory(b.g);
  ASSERT_EQ(plan.buffer_of[pair].size(), 2u);
  const MemoryPlan::Buffer& read = plan.buffers[plan.buffer_of[pair][0]];
  const MemoryPlan::Buffer& unread = plan.buffers[plan.buffer_of[pair][1]];
  EXPECT_NE(plan.buffer_of[pair][0], plan.buffer_of[pair][1]);
  EXPECT_EQ(unread.output, 1);
  EXPECT_EQ(unread.bytes, 128u);
  EXPECT_EQ(unread.first, pair);
  EXPECT_EQ(unread.last, pair);
  EXPECT_EQ(read.last, reader);
  expect_consistent(plan);
}

TEST(MemoryPlan, AChainOfViewsSharesOneBufferThatLivesUntilTheLastReaderOfAnyOfThem) {
  Builder b;
  const int x = b.input(f32(64));
  const int a = b.op(kCompute, {x}, {f32(64)});
  const int v1 = b.op(kView, {a}, {{Shape{8, 8}, DType::kFloat32}});
  const int v2 = b.op(kView, {v1}, {{Shape{4, 16}, DType::kFloat32}});
  const int c = b.op(kCompute, {x}, {f32(64)});
  const int r = b.op(kCompute, {v2, c}, {f32(64)});
  const int v3 = b.op(kView, {r}, {{Shape{2, 32}, DType::kFloat32}});
  b.output(v3);
  const MemoryPlan plan = plan_memory(b.g);
  EXPECT_EQ(plan.buffers.size(), 3u);  // a, c and r: the views own none
  EXPECT_EQ(plan.buffer_of[v1][0], plan.buffer_of[a][0]);
  EXPECT_EQ(plan.buffer_of[v2][0], plan.buffer_of[a][0]);
  EXPECT_EQ(plan.offset[v1][0], -1);  // no room of its own
  EXPECT_EQ(plan.buffers[plan.buffer_of[a][0]].last, r);
  EXPECT_EQ(plan.buffers[plan.buffer_of[r][0]].last, b.end());  // a graph output through a view
  expect_consistent(plan);
}

TEST(MemoryPlan, RoomIsRoundedUpTo64BytesAndEveryOffsetIsAligned) {
  Builder b;
  const int x = b.input(f32(3));
  const int twelve = b.op(kCompute, {x}, {f32(3)});
  const int one = b.op(kCompute, {x}, {{Shape{1}, DType::kBool}});
  const int empty = b.op(kCompute, {x}, {f32(0)});
  const int seventy = b.op(kCompute, {x}, {{Shape{70}, DType::kBool}});
  for (int node : {twelve, one, empty, seventy}) b.output(node);
  const MemoryPlan plan = plan_memory(b.g);
  const auto& buffer = [&](int node) { return plan.buffers[plan.buffer_of[node][0]]; };
  EXPECT_EQ(buffer(twelve).bytes, 12u);  // the value's own size
  EXPECT_EQ(buffer(one).bytes, 1u);
  EXPECT_EQ(buffer(empty).bytes, 0u);  // still 64 bytes of room: a distinct address
  EXPECT_EQ(buffer(seventy).bytes, 70u);
  EXPECT_EQ(plan.total_bytes, 64u + 64u + 64u + 128u);
  EXPECT_EQ(plan.peak_bytes, plan.total_bytes);  // all alive to the end
  expect_consistent(plan);
}

TEST(MemoryPlan, TheLargestBufferIsPlacedFirst) {
  Builder b;
  const int x = b.input(f32(16));
  const int small = b.op(kCompute, {x}, {f32(16)});
  const int large = b.op(kCompute, {x}, {f32(64)});
  b.output(b.op(kCompute, {small, large}, {f32(16)}));
  const MemoryPlan plan = plan_memory(b.g);
  EXPECT_EQ(plan.offset[large][0], 0);
  EXPECT_EQ(plan.offset[small][0], 256);
  expect_consistent(plan);
}

TEST(MemoryPlan, BuffersAliveAtOnceNeverShareABranchyGraph) {
  // Two branches of different sizes joined twice, with views and a second output: every
  // placement rule at work at once.
  Builder b;
  const int x = b.input(f32(100));
  int left = b.op(kCompute, {x}, {f32(100)});
  int right = b.op(kCompute, {x}, {f32(7), f32(300)});
  for (int step = 0; step < 6; ++step) {
    left = b.op(step % 2 ? kView : kCompute, {left}, {f32(100)});
    right = b.op(kCompute, {right}, {f32(static_cast<int64_t>(7 + 50 * step))});
    if (step == 3) left = b.op(kCompute, {left, right}, {f32(100)});
  }
  b.output(b.op(kCompute, {left, right}, {f32(1)}));
  const MemoryPlan plan = plan_memory(b.g);
  expect_consistent(plan);
  EXPECT_LT(plan.peak_bytes, plan.total_bytes);  // some reuse
}

TEST(MemoryPlan, ReusesBuffersByLifetime) {
  testing::ModeGuard guard(GRAPH_MODE);
  set_seed(4);
  auto net = std::make_shared<testing::LeNet5>();
  auto with_loss =
      std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::CrossEntropyLoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
  optim::TrainOneStep step(with_loss, opt);
  step(Tensor::ones({2, 1, 32, 32}), Tensor::from_vector<int32_t>({1, 2}));
  const MemoryPlan& plan = step.last_executor()->plan();
  EXPECT_GT(plan.num_buffers, 10);
  EXPECT_LT(plan.peak_bytes, plan.total_bytes);
  EXPECT_GT(step.last_executor()->graph().num_ops(), 30);
  expect_consistent(plan);  // no two buffers alive at once overlap
}

TEST(MemoryPlan, ChainOfOpsNeedsTwoBuffers) {
  ir::Graph g;
  {
    ir::Tracer tracer(g);
    Tensor x = tracer.add_input({Shape{256}, DType::kFloat32}, "x");
    for (int i = 0; i < 6; ++i) x = ops::neg(x);
    g.outputs = {tracer.value_of(x)};
  }
  const MemoryPlan plan = plan_memory(g);
  EXPECT_EQ(plan.num_buffers, 6);
  EXPECT_EQ(plan.total_bytes, 6u * 1024);
  EXPECT_EQ(plan.peak_bytes, 2u * 1024);  // each op reads one buffer and writes the other
  Executor exec(std::move(g));
  const Tensor y = exec.run({Tensor::full({256}, 2.0)})[0];
  EXPECT_EQ(y.to_double_vector(), std::vector<double>(256, 2.0));
}

TEST(MemoryPlan, ExternalBuffersKeepTheirLifetimeButTakeNoRoom) {
  // x -> neg -> reshape (a view) -> neg -> neg: the first neg's buffer lives through the view.
  ir::Graph g;
  {
    ir::Tracer tracer(g);
    Tensor x = tracer.add_input({Shape{256}, DType::kFloat32}, "x");
    Tensor a = ops::neg(x);
    Tensor v = ops::reshape(a, {16, 16});
    Tensor b = ops::neg(v);
    g.outputs = {tracer.value_of(ops::neg(b))};
  }
  const MemoryPlan all = plan_memory(g);
  int first = -1;  // the first Neg node
  for (size_t i = 0; i < g.nodes.size() && first < 0; ++i) {
    if (g.nodes[i].is_op() && g.nodes[i].op->name == "Neg") first = static_cast<int>(i);
  }
  ASSERT_GE(first, 0);
  const int buffer = all.buffer_of[first][0];
  ASSERT_GE(buffer, 0);
  const int view = first + 1;
  EXPECT_EQ(all.buffer_of[view][0], buffer);  // the view lies in its input's buffer
  EXPECT_EQ(all.buffers[buffer].bytes, 1024u);
  EXPECT_EQ(all.buffers[buffer].last, view + 1);  // read through the view by the second Neg
  const MemoryPlan outside =
      plan_memory(g, [&](int node, int output) { return node == first && output == 0; });
  EXPECT_EQ(outside.num_buffers, all.num_buffers - 1);
  EXPECT_EQ(outside.total_bytes, all.total_bytes - 1024);
  EXPECT_EQ(outside.buffers[buffer].offset, -1);
  EXPECT_EQ(outside.offset[first][0], -1);
  EXPECT_EQ(outside.buffers[buffer].last, all.buffers[buffer].last);
}

TEST(MemoryPlan, AnOpInFlightKeepsItsInputsAndOutputsUntilItsWait) {
  // x -> neg (node a) -> neg (node b, in flight until the end, its output read by nobody) ->
  // four more negs of a: without read_until those would reuse b's input and output buffers.
  ir::Graph g;
  int a = -1, b = -1;
  {
    ir::Tracer tracer(g);
    Tensor x = tracer.add_input({Shape{256}, DType::kFloat32}, "x");
    Tensor y = ops::neg(x);
    a = tracer.value_of(y).node;
    b = tracer.value_of(ops::neg(y)).node;
    for (int i = 0; i < 4; ++i) y = ops::neg(y);
    g.outputs = {tracer.value_of(y)};
  }
  const int end = static_cast<int>(g.nodes.size());
  const MemoryPlan eager = plan_memory(g);
  EXPECT_EQ(eager.buffers[eager.buffer_of[b][0]].last, b);  // dead at once
  std::vector<int> read_until(g.nodes.size(), -1);
  read_until[b] = end;
  const MemoryPlan plan = plan_memory(g, {}, read_until);
  const MemoryPlan::Buffer& in = plan.buffers[plan.buffer_of[a][0]];
  const MemoryPlan::Buffer& out = plan.buffers[plan.buffer_of[b][0]];
  EXPECT_EQ(in.last, end);
  EXPECT_EQ(out.last, end);
  for (const MemoryPlan::Buffer& other : plan.buffers) {
    if (&other == &in || &other == &out || other.node <= b) continue;
    for (const MemoryPlan::Buffer* kept : {&in, &out}) {
      const bool apart = other.offset + static_cast<int64_t>(other.bytes) <= kept->offset ||
                         kept->offset + static_cast<int64_t>(kept->bytes) <= other.offset;
      EXPECT_TRUE(apart) << "node " << other.node << " reuses the buffer of node " << kept->node;
    }
  }
  EXPECT_EQ(plan.peak_bytes, 4u * 1024);  // a's, b's and the two alternating buffers
}

TEST(MemoryPlan, ReadUntilAlsoKeepsTheBufferOfAViewsInput) {
  Builder b;
  const int x = b.input(f32(16));
  const int a = b.op(kCompute, {x}, {f32(16)});
  const int v = b.op(kView, {a}, {{Shape{4, 4}, DType::kFloat32}});
  const int r = b.op(kAllReduce, {v}, {{Shape{4, 4}, DType::kFloat32}});
  const int c = b.op(kCompute, {x}, {f32(16)});
  b.output(b.op(kCompute, {r, c}, {{Shape{4, 4}, DType::kFloat32}}));
  std::vector<int> read_until(b.g.nodes.size(), -1);
  read_until[r] = c + 1;
  const MemoryPlan plan = plan_memory(b.g, {}, read_until);
  EXPECT_EQ(plan.buffers[plan.buffer_of[a][0]].last, c + 1);
  EXPECT_EQ(plan.buffers[plan.buffer_of[r][0]].last, c + 1);
  expect_consistent(plan);
}

// ---- collective_waits: NOTE [Collectives in flight] ----

TEST(CollectiveWaits, ACollectiveIsWaitedForBeforeTheFirstReaderOfItsOutput) {
  Builder b;
  const int x = b.input(f32(16));
  const int r = b.op(kAllReduce, {x}, {f32(16)});
  const int c1 = b.op(kCompute, {x}, {f32(16)});
  const int c2 = b.op(kCompute, {c1}, {f32(16)});
  const int reader = b.op(kCompute, {r, c2}, {f32(16)});
  b.output(b.op(kCompute, {r}, {f32(16)}));
  const std::vector<int> waits = collective_waits(b.g);
  ASSERT_EQ(waits.size(), b.g.nodes.size());
  EXPECT_EQ(waits[r], reader);
  for (int i : {x, c1, c2, reader}) EXPECT_EQ(waits[i], -1) << i;  // not collectives
}

TEST(CollectiveWaits, ACollectiveReadByTheNextNodeRunsSynchronously) {
  Builder b;
  const int x = b.input(f32(16));
  const int r = b.op(kAllReduce, {x}, {f32(16)});
  b.output(b.op(kCompute, {r}, {f32(16)}));
  EXPECT_EQ(collective_waits(b.g)[r], -1);
}

TEST(CollectiveWaits, ACollectiveAsTheLastNodeRunsSynchronously) {
  Builder b;
  const int x = b.input(f32(16));
  const int r = b.op(kAllReduce, {x}, {f32(16)});
  b.output(r);
  EXPECT_EQ(collective_waits(b.g)[r], -1);
}

TEST(CollectiveWaits, ACollectiveNobodyReadsIsWaitedForAtTheEnd) {
  for (bool is_output : {false, true}) {
    Builder b;
    const int x = b.input(f32(16));
    const int r = b.op(kAllReduce, {x}, {f32(16)});
    const int c = b.op(kCompute, {x}, {f32(16)});
    b.output(b.op(kCompute, {c}, {f32(16)}));
    if (is_output) b.output(r);
    EXPECT_EQ(collective_waits(b.g)[r], b.end()) << "graph output: " << is_output;
  }
}

TEST(CollectiveWaits, TheFirstLaterOpWritingItsInputsIsNotOvertaken) {
  Builder b;
  const int x = b.input(f32(16));
  const int w = b.parameter(f32(16));
  const int early = b.op(kUpdate, {w, x}, {});
  const int r = b.op(kAllReduce, {x}, {f32(16)});
  const int c = b.op(kCompute, {x}, {f32(16)});
  const int update = b.op(kUpdate, {w, x}, {});  // writes x (every input of kUpdate)
  b.op(kUpdate, {w, x}, {});
  b.output(b.op(kCompute, {r, c}, {f32(16)}));
  const std::vector<int> waits = collective_waits(b.g);
  EXPECT_EQ(waits[r], update);  // not the earlier update, not the later reader
  EXPECT_EQ(waits[early], -1);
}

TEST(CollectiveWaits, AnUpdateWaitsOnlyForTheCollectivesReadingWhatItWrites) {
  // NOTE [Updates at their gradients]: an update of another parameter runs while a collective is
  // in flight, even one reading the collective's input; writing its input through a view waits.
  const ir::OpDef apply{.name = "Apply", .mutates_inputs = true, .mutated_inputs = {0}};
  Builder b;
  const int x = b.input(f32(16));
  const int w = b.parameter(f32(16)), w2 = b.parameter(f32(16));
  const int gather = b.op(kAllReduce, {w}, {f32(16)});  // a parameter read by a collective
  const int reduce = b.op(kAllReduce, {x}, {f32(16)});
  const int c = b.op(kCompute, {x}, {f32(16)});
  const int other = b.op(apply, {w2, x}, {});  // reads x, writes only w2
  const int view = b.op(kView, {w}, {{Shape{4, 4}, DType::kFloat32}});
  const int through_view = b.op(apply, {view, c}, {});
  const int reader = b.op(kCompute, {reduce, c}, {f32(16)});
  b.output(b.op(kCompute, {gather, reader}, {f32(16)}));
  const std::vector<int> waits = collective_waits(b.g);
  EXPECT_EQ(waits[gather], through_view);
  EXPECT_EQ(waits[reduce], reader);
  EXPECT_EQ(waits[other], -1);
}

TEST(CollectiveWaits, TwoCollectivesInFlightAreWaitedForEachAtItsOwnReader) {
  Builder b;
  const int x = b.input(f32(16));
  const int r1 = b.op(kAllReduce, {x}, {f32(16)});
  const int r2 = b.op(kAllReduce, {x}, {f32(16)});
  const int c = b.op(kCompute, {x}, {f32(16)});
  const int read2 = b.op(kCompute, {r2, c}, {f32(16)});
  const int read1 = b.op(kCompute, {r1, read2}, {f32(16)});
  b.output(read1);
  const std::vector<int> waits = collective_waits(b.g);
  EXPECT_EQ(waits[r1], read1);
  EXPECT_EQ(waits[r2], read2);
  // As read_until, they keep their inputs and outputs until then.
  const MemoryPlan plan = plan_memory(b.g, {}, waits);
  EXPECT_EQ(plan.buffers[plan.buffer_of[r1][0]].last, read1);
  expect_consistent(plan);
}

// ---- bind_cut_edges: NOTE [Zero-copy cut edges] ----

// bind_cut_edges only stores the mailboxes a node goes through; two distinct addresses stand
// for two channels (never dereferenced).
comm::ShmMailboxes* fake_channel(int k) {
  static char channels[2];
  return reinterpret_cast<comm::ShmMailboxes*>(&channels[k]);
}

ir::Attrs edge(int64_t tag, bool through_mailboxes = true) {
  ir::Attrs attrs{{"tag", tag}};
  if (through_mailboxes) attrs.set("channel", int64_t{0});
  return attrs;
}

CutEdgeSlots bind(const ir::Graph& g, const MemoryPlan& plan) {
  return bind_cut_edges(g, plan, [](const ir::Node& n) {
    return n.attrs.has("channel") ? fake_channel(0) : nullptr;
  });
}

TEST(CutEdges, ASentBufferIsClaimedBeforeItsWriterAndAReceivedOneReleasedAfterItsLastReader) {
  Builder b;
  const int x = b.input(f32(16));
  const int recv = b.op(rpc_recv_op(), {}, {f32(16)}, edge(1));
  const int v = b.op(kView, {recv}, {{Shape{4, 4}, DType::kFloat32}});
  const int a = b.op(kCompute, {x}, {{Shape{4, 4}, DType::kFloat32}});
  const int reader = b.op(kCompute, {v, a}, {{Shape{4, 4}, DType::kFloat32}});
  b.op(rpc_send_op(), {reader}, {}, edge(2));
  b.op(kCompute, {x}, {f32(16)});
  const MemoryPlan plan = plan_memory(b.g);
  const CutEdgeSlots slots = bind(b.g, plan);
  EXPECT_EQ(slots.count, 2);
  ASSERT_EQ(slots.of_buffer.size(), plan.buffers.size());
  const MailboxSlot& in = slots.of_buffer[plan.buffer_of[recv][0]];
  const MailboxSlot& out = slots.of_buffer[plan.buffer_of[reader][0]];
  EXPECT_EQ(in.boxes, fake_channel(0));
  EXPECT_EQ(in.tag, 1);
  EXPECT_TRUE(in.incoming);
  EXPECT_EQ(out.tag, 2);
  EXPECT_FALSE(out.incoming);
  EXPECT_EQ(slots.of_buffer[plan.buffer_of[a][0]].boxes, nullptr);
  ASSERT_EQ(slots.claim_before.size(), b.g.nodes.size());
  ASSERT_EQ(slots.release_after.size(), b.g.nodes.size() + 1);
  for (int i = 0; i < b.end(); ++i) {
    EXPECT_EQ(slots.claim_before[i].size(), i == reader ? 1u : 0u)
        << i;  // the sent buffer's writer
    EXPECT_EQ(slots.release_after[i].size(), i == reader ? 1u : 0u) << i;  // read through the view
  }
  EXPECT_TRUE(slots.release_after[b.end()].empty());
}

TEST(CutEdges, AReceivedGraphOutputIsReleasedAtTheEnd) {
  Builder b;
  const int recv = b.op(rpc_recv_op(), {}, {f32(16)}, edge(1));
  b.output(recv);
  const MemoryPlan plan = plan_memory(b.g);
  const CutEdgeSlots slots = bind(b.g, plan);
  EXPECT_EQ(slots.count, 1);
  EXPECT_EQ(slots.release_after[b.end()].size(), 1u);
}

TEST(CutEdges, WhatCannotLieInASlotStaysInTheArena) {
  Builder b;
  const int x = b.input(f32(16));
  const int w = b.parameter(f32(16));
  b.op(rpc_send_op(), {x}, {}, edge(1));  // a graph input
  b.op(rpc_send_op(), {w}, {}, edge(2));  // a parameter
  const int updated = b.op(kCompute, {x}, {f32(16)});
  b.op(kUpdate, {updated, x}, {});  // written in place
  b.op(rpc_send_op(), {updated}, {}, edge(3));
  const int twice = b.op(kCompute, {x}, {f32(16)});
  b.op(rpc_send_op(), {twice}, {}, edge(4));  // bound by its first edge only
  b.op(rpc_send_op(), {twice}, {}, edge(5));
  const int received = b.op(rpc_recv_op(), {}, {f32(16)}, edge(6, /*through_mailboxes=*/false));
  b.op(rpc_send_op(), {received}, {}, edge(7));  // a receive's buffer is never a send's slot
  const int copied = b.op(kCompute, {x}, {f32(16)});
  b.op(rpc_send_op(), {copied}, {}, edge(8, /*through_mailboxes=*/false));  // a group's transport
  const int empty = b.op(kCompute, {x}, {f32(0)});
  b.op(rpc_send_op(), {empty}, {}, edge(9));  // nothing to send in place
  const MemoryPlan plan = plan_memory(b.g);
  const CutEdgeSlots slots = bind(b.g, plan);
  EXPECT_EQ(slots.count, 1);  // `twice`, by its first edge
  EXPECT_EQ(slots.of_buffer[plan.buffer_of[twice][0]].tag, 4);
  for (int node : {updated, received, copied, empty}) {
    EXPECT_EQ(slots.of_buffer[plan.buffer_of[node][0]].boxes, nullptr) << node;
  }
}

TEST(CutEdges, WithoutCutEdgesNothingIsBound) {
  Builder b;
  const int x = b.input(f32(16));
  b.output(b.op(kCompute, {x}, {f32(16)}));
  const MemoryPlan plan = plan_memory(b.g);
  const CutEdgeSlots slots = bind(b.g, plan);
  EXPECT_EQ(slots.count, 0);
  EXPECT_EQ(slots.of_buffer.size(), plan.buffers.size());
  EXPECT_EQ(slots.claim_before.size(), b.g.nodes.size());
  EXPECT_EQ(slots.release_after.size(), b.g.nodes.size() + 1);
}

TEST(MemoryPlanNotes, SayEachOpsBufferAndThatAViewHasNone) {
  Builder b;
  const int x = b.input(f32(16));
  const int a = b.op(kCompute, {x}, {f32(16), f32(3)});
  const int v = b.op(kView, {a}, {{Shape{4, 4}, DType::kFloat32}});
  b.output(v);
  b.output(b.op(kCompute, {v}, {f32(16)}));
  const std::vector<std::string> notes = memory_plan_notes(b.g, plan_memory(b.g));
  ASSERT_EQ(notes.size(), b.g.nodes.size());
  EXPECT_EQ(notes[x], "");
  EXPECT_EQ(notes[a], "buffer: [0, +64), [64, +12)");  // output 1 is dead at once
  EXPECT_EQ(notes[v], "buffer: view of input 0");
  EXPECT_EQ(notes[v + 1], "buffer: [64, +64)");
}

}  // namespace
}  // namespace cleave::runtime
