// How long the step-parallel rewrite takes (bench/run.sh shard): planning every op's strategy and
// layouts (plan_step_parallel) and building one rank's graph (materialize), without a cluster.
//
//   shard_bench mlp DEVICES        seed 002's MLP (784-512-512-10, batch 32), the model-parallel
//                                  strategies of examples/semi_auto_parallel (8 devices) or data
//                                  parallel ones (other counts)
//   shard_bench propagate DEVICES OPS  sharding propagation (AUTO_PARALLEL) on the generated
//                                  graph of OPS operators (OPS / 4 blocks) where only the first
//                                  MatMul keeps its strategy: "ROW propagate_ms=<ms> ops=<ops>
//                                  derived=<ops given one> rounds=<rounds>"
//   shard_bench generated DEVICES  a generated graph of 1000 operators: 250 blocks of
//                                  MatMul -> BiasAdd -> ReLU -> Add (a residual), hidden size
//                                  4096, alternating column- and row-split MatMuls (Megatron's
//                                  pattern) on a [d, DEVICES / d] device matrix
// Prints "ROW plan_ms=<ms> materialize_ms=<ms> total_ms=<ms> ops=<forward ops> local_ops=<ops of
// rank 0's graph>", each time the median of 5 runs after one warm-up.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "cleave/parallel/propagation.h"
#include "cleave/parallel/step_parallel.h"

namespace {

using namespace cleave;
using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::ValueRef;

// Graph building without tensors: inputs and parameters are symbolic only.
struct Builder {
  Graph g;
  ValueRef input(const Shape& s, const std::string& name, NodeKind kind = NodeKind::kInput) {
    Node n;
    n.kind = kind;
    n.outputs = {{s, DType::kFloat32}};
    n.name = name;
    n.scope = "Default";
    g.nodes.push_back(std::move(n));
    const int id = static_cast<int>(g.nodes.size()) - 1;
    if (kind == NodeKind::kInput) g.inputs.push_back(id);
    return {id, 0};
  }
  ValueRef op(const std::string& name, std::vector<ValueRef> in, ir::Strategy strategy,
              ir::Attrs attrs = {}) {
    Node n;
    n.kind = NodeKind::kOp;
    n.op = &ir::Registry::global().get(name);
    n.attrs = std::move(attrs);
    std::vector<ir::TensorMeta> metas;
    for (const ValueRef& v : in) metas.push_back(g.meta(v));
    n.outputs = n.op->infer({*n.op, n.attrs, metas});
    n.inputs = std::move(in);
    n.name = fmt::format("{}_{}", ir::instance_stem(name), g.nodes.size());
    n.scope = "Default/network";
    n.strategy = std::move(strategy);
    g.nodes.push_back(std::move(n));
    return {static_cast<int>(g.nodes.size()) - 1, 0};
  }
};

Graph mlp(int64_t devices) {
  Builder b;
  const int64_t n = devices;
  const bool model = devices == 8;
  const int64_t bs = 2, m = 4;
  ValueRef x = b.input({32, 784}, "data");
  const int64_t sizes[] = {784, 512, 512, 10};
  for (int l = 0; l < 3; ++l) {
    const ValueRef w =
        b.input({sizes[l + 1], sizes[l]}, fmt::format("fc{}.weight", l + 1), NodeKind::kParameter);
    const ValueRef bias =
        b.input({sizes[l + 1]}, fmt::format("fc{}.bias", l + 1), NodeKind::kParameter);
    ir::Strategy mm = {{n, 1}, {1, 1}}, add = {{n, 1}, {1}};
    if (model && l == 0) mm = {{bs, 1}, {m, 1}}, add = {{bs, m}, {m}};
    if (model && l == 1) mm = {{bs, m}, {1, m}};
    x = b.op("MatMul", {x, w}, mm, {{"transpose_b", true}});
    x = b.op("BiasAdd", {x, bias}, add);
    if (l < 2)
      x = b.op("ReLU", {x}, model && l == 0 ? ir::Strategy{{bs, m}} : ir::Strategy{{n, 1}});
  }
  b.g.outputs = {b.op("ReduceMean", {x}, {{n, 1}}, {{"axis", std::vector<int64_t>{}}})};
  return std::move(b.g);
}

Graph generated(int64_t devices, int blocks = 250) {
  Builder b;
  int64_t d = 1;
  while (d * d < devices) d *= 2;
  const int64_t r = devices / d;  // [d, r]: d splits the batch, r the model
  const int64_t h = 4096, batch = 4096;
  ValueRef x = b.input({batch, h}, "data");
  for (int block = 0; block < blocks; ++block) {
    const ValueRef w = b.input({h, h}, fmt::format("w{}", block), NodeKind::kParameter);
    const ValueRef bias = b.input({h}, fmt::format("b{}", block), NodeKind::kParameter);
    const bool column = block % 2 == 0;
    // Column split: x (d, 1) x w (1, r) -> (d, r); row split: x (d, r) x w (r, 1) -> pending sum.
    const ir::Strategy mm = column ? ir::Strategy{{d, 1}, {1, r}} : ir::Strategy{{d, r}, {r, 1}};
    const ir::Strategy act = column ? ir::Strategy{{d, r}} : ir::Strategy{{d, 1}};
    ValueRef y = b.op("MatMul", {x, w}, mm);
    y = b.op("BiasAdd", {y, bias}, column ? ir::Strategy{{d, r}, {r}} : ir::Strategy{{d, 1}, {1}});
    y = b.op("ReLU", {y}, act);
    x = b.op("Add", {x, y}, column ? ir::Strategy{{d, r}, {d, r}} : ir::Strategy{{d, 1}, {d, 1}});
  }
  b.g.outputs = {x};
  return std::move(b.g);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int propagate(int64_t devices, int64_t ops) {
  std::vector<double> ms;
  parallel::PropagationReport report;
  int64_t count = 0;
  for (int run = 0; run < 6; ++run) {
    Graph g = generated(devices, static_cast<int>(ops / 4));
    count = g.num_ops();
    bool first = true;
    for (ir::Node& n : g.nodes) {
      if (!n.is_op()) continue;
      if (!first || n.op->name != "MatMul") n.strategy.clear();
      if (n.op->name == "MatMul") first = false;
    }
    const auto t0 = std::chrono::steady_clock::now();
    report = parallel::propagate_strategies(
        g, {.device_num = devices, .dataset = parallel::DatasetSplit::kFullBatch});
    const auto t1 = std::chrono::steady_clock::now();
    if (run == 0) continue;  // warm-up (the redistribution cache fills)
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::printf("propagate_%lld_d%lld propagate_ms=%.2f ops=%lld derived=%d rounds=%d\n",
              static_cast<long long>(ops), static_cast<long long>(devices), median(ms),
              static_cast<long long>(count), report.derived, report.rounds);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "propagate" && std::atoll(argv[2]) >= 1 &&
      std::atoll(argv[3]) >= 4) {
    try {
      return propagate(std::atoll(argv[2]), std::atoll(argv[3]));
    } catch (const Error& e) {
      std::fprintf(stderr, "shard_bench: %s\n", e.what());
      return 1;
    }
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: shard_bench mlp|generated DEVICES | propagate DEVICES OPS\n");
    return 2;
  }
  const std::string which = argv[1];
  const int64_t devices = std::atoll(argv[2]);
  if ((which != "mlp" && which != "generated") || devices < 1) {
    std::fprintf(stderr, "shard_bench: expected mlp or generated and a positive device count\n");
    return 2;
  }
  try {
    std::vector<double> plan_ms, materialize_ms;
    int64_t ops = 0, local_ops = 0;
    for (int run = 0; run < 6; ++run) {
      Graph g = which == "mlp" ? mlp(devices) : generated(devices);
      ops = g.num_ops();
      const auto t0 = std::chrono::steady_clock::now();
      const parallel::ParallelPlan plan = parallel::plan_step_parallel(
          g, {.device_num = devices, .dataset = parallel::DatasetSplit::kFullBatch});
      const auto t1 = std::chrono::steady_clock::now();
      const parallel::LocalStep local = parallel::materialize(g, plan, 0);
      const auto t2 = std::chrono::steady_clock::now();
      local_ops = local.graph.num_ops();
      if (run == 0) continue;  // warm-up (the redistribution cache fills)
      plan_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      materialize_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    const double p = median(plan_ms), m = median(materialize_ms);
    std::printf("%s_d%lld plan_ms=%.2f materialize_ms=%.2f total_ms=%.2f ops=%lld local_ops=%lld\n",
                which.c_str(), static_cast<long long>(devices), p, m, p + m,
                static_cast<long long>(ops), static_cast<long long>(local_ops));
  } catch (const Error& e) {
    std::fprintf(stderr, "shard_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
