// How long the dynamic-programming strategy search takes (cleave/parallel/search.h), without a
// cluster:
//
//   search_bench chain DEVICES OPS      a chain of OPS operators: MatMul by a (1024, 1024) weight
//                                       then ReLU, repeated, on a (1024, 1024) batch
//   search_bench residual DEVICES OPS   OPS / 4 blocks of MatMul -> BiasAdd -> ReLU -> Add (a
//                                       residual), hidden size 4096 (shard_bench's generated graph
//                                       with no strategy given)
//   search_bench text DEVICES FILE      the graph of an IR text (ir::parse_file), e.g. seed 001's
//                                       traced ResNet-50 (tests/runtime/golden/seeds/
//                                       001_resnet50_data_parallel/train_step/01_trace.ir), its
//                                       inputs read whole by every rank (full_batch)
//
//   search_bench recursive GRAPH DEVICES ARG
//                                       the same graphs through the recursive programming
//                                       (search_mode "recursive_programming")
//
// Prints "ROW <graph>_<ops>_d<devices> build_ms=<cost graph> solve_ms=<dynamic programming>
// total_ms=<search_strategies> ops=<ops> candidates=<all nodes'> eliminations=<n> exact=<nodes
// left to the exact solver> cost_ms=<predicted step>", the medians of 3 runs after one warm-up
// (which fills the redistribution cache); the recursive programming "ROW
// rec_<graph>_<ops>_d<devices> search_ms=<recursive_programming_plan> ops=<ops> levels=<prime
// factors> cost_ms=<predicted step>", with the same medians.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "cleave/ir/parse.h"
#include "cleave/parallel/search.h"

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
  ValueRef op(const std::string& name, std::vector<ValueRef> in) {
    Node n;
    n.kind = NodeKind::kOp;
    n.op = &ir::Registry::global().get(name);
    std::vector<ir::TensorMeta> metas;
    for (const ValueRef& v : in) metas.push_back(g.meta(v));
    n.outputs = n.op->infer({*n.op, n.attrs, metas});
    n.inputs = std::move(in);
    n.name = fmt::format("{}_{}", ir::instance_stem(name), g.nodes.size());
    n.scope = "Default/network";
    g.nodes.push_back(std::move(n));
    return {static_cast<int>(g.nodes.size()) - 1, 0};
  }
};

Graph chain(int64_t ops) {
  Builder b;
  ValueRef x = b.input({1024, 1024}, "data");
  for (int64_t k = 0; k < ops; k += 2) {
    x = b.op("MatMul", {x, b.input({1024, 1024}, fmt::format("w{}", k), NodeKind::kParameter)});
    if (k + 1 < ops) x = b.op("ReLU", {x});
  }
  b.g.outputs = {x};
  return std::move(b.g);
}

Graph residual(int64_t ops) {
  Builder b;
  const int64_t h = 4096, batch = 4096;
  ValueRef x = b.input({batch, h}, "data");
  for (int64_t block = 0; block < ops / 4; ++block) {
    const ValueRef w = b.input({h, h}, fmt::format("w{}", block), NodeKind::kParameter);
    const ValueRef bias = b.input({h}, fmt::format("b{}", block), NodeKind::kParameter);
    ValueRef y = b.op("MatMul", {x, w});
    y = b.op("BiasAdd", {y, bias});
    y = b.op("ReLU", {y});
    x = b.op("Add", {x, y});
  }
  b.g.outputs = {x};
  return std::move(b.g);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Graph make_graph(const std::string& which, const std::string& arg) {
  const int64_t ops = which == "text" ? 0 : std::atoll(arg.c_str());
  return which == "chain"      ? chain(ops)
         : which == "residual" ? residual(ops)
                               : ir::parse_file(arg).graph;
}

int run_recursive(const std::string& which, int64_t devices, const std::string& arg) {
  parallel::SearchOptions o{.step_parallel = {.device_num = devices}};
  if (which == "text") o.step_parallel.dataset = parallel::DatasetSplit::kFullBatch;
  const Graph g = make_graph(which, arg);
  std::vector<double> search_ms;
  parallel::RecursivePlan plan;
  for (int k = 0; k < 4; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    plan = parallel::recursive_programming_plan(g, o);
    if (k > 0) search_ms.push_back(ms_since(t0));  // the first is the warm-up
  }
  std::printf("ROW rec_%s_%lld_d%lld search_ms=%.1f ops=%d levels=%zu cost_ms=%.4g\n",
              which.c_str(), static_cast<long long>(plan.ops), static_cast<long long>(devices),
              median(search_ms), plan.ops, plan.levels.size(), plan.cost * 1e3);
  return 0;
}

int run(const std::string& which, int64_t devices, const std::string& arg) {
  std::vector<double> build_ms, solve_ms, total_ms;
  parallel::SearchReport report;
  parallel::SearchOptions o{.step_parallel = {.device_num = devices}};
  if (which == "text") o.step_parallel.dataset = parallel::DatasetSplit::kFullBatch;
  const int64_t ops = which == "text" ? 0 : std::atoll(arg.c_str());
  for (int k = 0; k < 4; ++k) {
    Graph g = which == "chain"      ? chain(ops)
              : which == "residual" ? residual(ops)
                                    : ir::parse_file(arg).graph;
    auto t0 = std::chrono::steady_clock::now();
    const parallel::CostGraph cost = parallel::build_cost_graph(g, o);
    const double build = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    parallel::solve_dynamic_programming(cost, o);
    const double solve = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    report = parallel::search_strategies(g, o);
    const double total = ms_since(t0);
    if (k == 0) continue;  // warm-up
    build_ms.push_back(build);
    solve_ms.push_back(solve);
    total_ms.push_back(total);
  }
  std::printf(
      "ROW %s_%lld_d%lld build_ms=%.1f solve_ms=%.1f total_ms=%.1f ops=%d candidates=%lld "
      "eliminations=%d exact=%d cost_ms=%.4g\n",
      which.c_str(), static_cast<long long>(report.ops), static_cast<long long>(devices),
      median(build_ms), median(solve_ms), median(total_ms), report.ops,
      static_cast<long long>(report.candidates), report.result.eliminations.total(),
      report.result.exact_nodes, report.result.cost * 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool recursive = argc == 5 && std::string(argv[1]) == "recursive";
  if (recursive) {
    --argc;
    ++argv;
  }
  const std::string which = argc == 4 ? argv[1] : "";
  if ((which != "chain" && which != "residual" && which != "text") || std::atoll(argv[2]) < 1 ||
      (which != "text" && std::atoll(argv[3]) < 4)) {
    std::fprintf(stderr,
                 "usage: search_bench [recursive] chain|residual DEVICES OPS (OPS >= 4) | "
                 "[recursive] text DEVICES FILE\n");
    return 2;
  }
  try {
    return recursive ? run_recursive(which, std::atoll(argv[2]), argv[3])
                     : run(which, std::atoll(argv[2]), argv[3]);
  } catch (const Error& e) {
    std::fprintf(stderr, "search_bench: %s\n", e.what());
    return 1;
  }
}
