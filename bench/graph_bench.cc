// GRAPH_MODE against PYNATIVE_MODE: training-step throughput and peak tensor memory.
//
//   graph_bench ROW MODE [SECONDS]   prints "ROW <steps/s> <peak MiB>"
//   graph_bench ROW profile [STEPS] [nodes]
//                                    per-op kernel time of the compiled step (Executor profiling)
//                                    and its elementwise chains: what fusion could save; with
//                                    "nodes", each op node's time first
//
// ROW is <model>_train_b<batch> (lenet5, twomatmul, mlp); MODE is graph or pynative. A step is
// optim::TrainOneStep (forward, loss, backward, Momentum(0.01, 0.9)). Steps/s is the median of 5
// trials of at least SECONDS/5 each after a warm-up (which includes the one compilation in graph
// mode). Peak memory is the highest number of bytes of CPU tensor storage alive during the timed
// steps (cpu_peak_live_bytes; parameters, optimizer state and the data included).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "testing/models.h"

using namespace cleave;

namespace {

// Ops that map each output element from the same element of their inputs (with broadcasting):
// what an elementwise fusion would merge.
bool is_elementwise(const std::string& op) {
  static const std::set<std::string> kOps = {
      "Add",       "Sub",        "Mul",   "Div",        "Neg",         "Exp",      "Log",
      "Sqrt",      "Rsqrt",      "Relu",  "ReLU",       "ReluGrad",    "Sigmoid",  "Tanh",
      "Gelu",      "GeluGrad",   "Cast",  "Square",     "Abs",         "Maximum",  "Minimum",
      "Pow",       "Select",     "Sign",  "Reciprocal", "SigmoidGrad", "TanhGrad", "OnesLike",
      "ZerosLike", "LogicalNot", "Equal", "Less",       "Greater",     "BiasAdd"};
  return kOps.count(op) != 0;
}

// Runs `steps` profiled steps of the compiled graph and prints per-op time (first per node when
// `per_node`) and the elementwise chains (consecutive elementwise ops whose intermediate has
// exactly one consumer).
void profile(optim::TrainOneStep& step, const Tensor& x, const Tensor& y, int steps,
             bool per_node) {
  for (int i = 0; i < 20; ++i) step(x, y);  // compile and warm up
  runtime::Executor& exec = *step.last_executor();
  exec.set_profiling(true);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step(x, y);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  exec.set_profiling(false);
  const ir::Graph& g = exec.graph();
  const std::vector<double>& secs = exec.node_seconds();
  std::vector<int> consumers(g.nodes.size(), 0);
  for (const ir::Node& n : g.nodes) {
    for (const ir::ValueRef& v : n.inputs) ++consumers[v.node];
  }
  for (const ir::ValueRef& v : g.outputs) ++consumers[v.node];
  std::map<std::string, std::pair<int, double>> by_op;
  double kernels = 0, elementwise = 0;
  int ops = 0, ew_ops = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_op()) continue;
    ++ops;
    if (per_node) {
      std::printf("  node %-44s %-28s %8.1f us\n", n.name.c_str(), n.op->name.c_str(),
                  secs[i] / steps * 1e6);
    }
    auto& e = by_op[n.op->name];
    ++e.first;
    e.second += secs[i] / steps;
    kernels += secs[i] / steps;
    if (is_elementwise(n.op->name)) {
      ++ew_ops;
      elementwise += secs[i] / steps;
    }
  }
  // Chains: an elementwise op whose input is an elementwise op with one consumer continues
  // that op's chain. chain_of[i] is the chain id of node i (-1: none).
  std::vector<int> chain_of(g.nodes.size(), -1);
  std::vector<std::vector<int>> chains;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_op() || !is_elementwise(n.op->name)) continue;
    int joined = -1;
    for (const ir::ValueRef& v : n.inputs) {
      const ir::Node& src = g.nodes[v.node];
      if (src.is_op() && is_elementwise(src.op->name) && consumers[v.node] == 1 &&
          chain_of[v.node] >= 0) {
        joined = chain_of[v.node];
        break;
      }
    }
    if (joined < 0) {
      joined = static_cast<int>(chains.size());
      chains.emplace_back();
    }
    chain_of[i] = joined;
    chains[joined].push_back(static_cast<int>(i));
  }
  int fusable = 0, fusable_ops = 0;
  double fusable_secs = 0;
  for (const std::vector<int>& c : chains) {
    if (c.size() < 2) continue;
    ++fusable;
    fusable_ops += static_cast<int>(c.size());
    std::string names;
    for (int i : c) {
      fusable_secs += secs[i] / steps;
      names += (names.empty() ? "" : " > ") + g.nodes[i].op->name + "(" +
               g.nodes[i].outputs[0].shape.to_string() + ")";
    }
    std::printf("  chain: %s\n", names.c_str());
  }
  std::printf("step wall %.1f us, kernels %.1f us (%d ops)\n", wall * 1e6, kernels * 1e6, ops);
  for (const auto& [name, e] : by_op) {
    std::printf("  %-40s %3d ops %8.1f us %5.1f%%\n", name.c_str(), e.first, e.second * 1e6,
                100 * e.second / wall);
  }
  std::printf("elementwise ops: %d, %.1f us (%.1f%% of the step)\n", ew_ops, elementwise * 1e6,
              100 * elementwise / wall);
  std::printf(
      "fusable chains (>= 2 ops, one-consumer intermediates): %d with %d ops, %.1f us "
      "(%.1f%% of the step)\n",
      fusable, fusable_ops, fusable_secs * 1e6, 100 * fusable_secs / wall);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: graph_bench ROW graph|pynative [SECONDS]\n");
    return 2;
  }
  try {
    const std::string name = argv[1], mode = argv[2];
    const double seconds = argc > 3 ? std::stod(argv[3]) : 2.0;
    CLEAVE_CHECK_ARG(mode == "graph" || mode == "pynative" || mode == "profile",
                     "graph_bench: mode '{}'; expected graph, pynative or profile", mode);
    runtime::set_context(
        {.mode = mode == "pynative" ? runtime::PYNATIVE_MODE : runtime::GRAPH_MODE});
    const size_t b = name.find("_b");
    CLEAVE_CHECK_ARG(b != std::string::npos, "graph_bench: row '{}' is not <model>_train_b<batch>",
                     name);
    const std::string model = name.substr(0, name.find('_'));
    const int64_t batch = std::stoll(name.substr(b + 2));
    set_seed(0);
    std::shared_ptr<nn::Cell> net, loss_fn;
    Tensor x, y;
    if (model == "lenet5") {
      net = std::make_shared<testing::LeNet5>();
      x = Tensor::normal({batch, 1, 32, 32});
      y = ops::cast(Tensor::uniform({batch}, 0, 10), DType::kInt32);
      loss_fn = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    } else if (model == "mlp") {
      net = std::make_shared<testing::Mlp>();
      x = Tensor::normal({batch, 1, 28, 28});
      y = ops::cast(Tensor::uniform({batch}, 0, 10), DType::kInt32);
      loss_fn = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    } else if (model == "twomatmul") {
      net = std::make_shared<testing::TwoMatMul>();
      x = Tensor::normal({batch, 32});
      y = Tensor::normal({batch, 16});
      loss_fn = std::make_shared<nn::MSELoss>("mean");
    } else {
      CLEAVE_FAIL("graph_bench: unknown model '{}'; expected lenet5, mlp or twomatmul", model);
    }
    net->set_train(true);
    auto with_loss = std::make_shared<nn::WithLossCell>(net, loss_fn);
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
    optim::TrainOneStep step(with_loss, opt);
    if (mode == "profile") {
      profile(step, x, y, argc > 3 ? std::stoi(argv[3]) : 200,
              argc > 4 && std::string(argv[4]) == "nodes");
      return 0;
    }

    using clock = std::chrono::steady_clock;
    const auto warm_end = clock::now() + std::chrono::duration<double>(std::min(0.5, seconds / 4));
    while (clock::now() < warm_end) step(x, y);
    reset_cpu_peak_live_bytes();
    std::vector<double> rates;
    for (int trial = 0; trial < 5; ++trial) {
      int64_t steps = 0;
      const auto start = clock::now();
      double elapsed = 0;
      do {
        step(x, y);
        ++steps;
        elapsed = std::chrono::duration<double>(clock::now() - start).count();
      } while (elapsed < seconds / 5);
      rates.push_back(static_cast<double>(steps) / elapsed);
    }
    std::sort(rates.begin(), rates.end());
    std::printf("%s %.1f %.3f\n", argv[1], rates[rates.size() / 2],
                static_cast<double>(cpu_peak_live_bytes()) / (1024.0 * 1024.0));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
