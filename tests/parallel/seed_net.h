// Seed 003's network with Primitives that can be sharded, its training, and the one-line-per-op
// text of a rank's graph: shared by the step-parallel and named-layout tests.
#pragma once

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "cleave/runtime/sharded_parameters.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave::testing {

// x @ w, ReLU, @ w2, each op a Primitive a test can shard.
class SeedNet : public nn::Cell {
 public:
  SeedNet(int64_t in, int64_t hidden, int64_t out) : Cell("Net") {
    w = register_parameter("w", nn::Normal(0.5)(Shape{in, hidden}));
    w2 = register_parameter("w2", nn::Normal(0.5)(Shape{hidden, out}));
  }
  Tensor construct(const Tensor& x) override {
    return matmul2.call1({relu.call1({matmul.call1({x, w})}), w2});
  }
  Tensor w, w2;
  ir::Primitive matmul{"MatMul"}, relu{"ReLU"}, matmul2{"MatMul"};
};

struct TrainResult {
  std::vector<double> losses;
  std::vector<Tensor> params;  // gathered
  // Updates of the compiled step that run before an op of the backward (NOTE [Updates at their
  // gradients] in cleave/parallel/data_parallel.h).
  int updates_in_backward = 0;
};

// The global generator is not thread-safe: thread ranks make their networks one at a time.
inline std::mutex g_seed_net_mutex;

// SeedNet(32, 16, 16) (seed 7), configured, trained `steps` Momentum steps with MSE on (x, y).
inline TrainResult train_seed_net(const std::function<void(SeedNet&)>& configure, const Tensor& x,
                                  const Tensor& y, int steps) {
  std::shared_ptr<SeedNet> net;
  {
    std::lock_guard<std::mutex> lock(g_seed_net_mutex);
    set_seed(7);
    net = std::make_shared<SeedNet>(32, 16, 16);
  }
  configure(*net);
  auto loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.2, 0.1);
  optim::TrainOneStep step(loss, opt);
  TrainResult run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(step(x, y).item());
  for (const Tensor& p : net->trainable_params()) {
    run.params.push_back(runtime::gather_parameter(p));
  }
  int updates = 0;
  for (const ir::Node& n : step.last_executor()->graph().nodes) {
    if (!n.is_op()) continue;
    if (n.op->mutates_inputs) ++updates;
    if (n.name.find(".grad.") != std::string::npos) run.updates_in_backward = updates;
  }
  return run;
}

// SeedNet configured by `configure` in SEMI_AUTO_PARALLEL on `world` thread ranks (each its rows
// of a batch of 16) trains 5 steps as one device: every rank's losses within 1e-5 relative, its
// gathered parameters within 1e-5 (absolute 1e-6). Returns each rank's run.
inline std::vector<TrainResult> expect_seed_net_trains_as_one_device(
    int world, const std::function<void(SeedNet&)>& configure,
    const std::string& backend = default_job_backend()) {
  const int steps = 5;
  set_seed(1);
  const Tensor x = Tensor::uniform({16, 32});
  const Tensor y = Tensor::uniform({16, 16});
  runtime::reset_auto_parallel_context();
  const TrainResult single = train_seed_net([](SeedNet&) {}, x, y, steps);
  runtime::set_auto_parallel_context({.parallel_mode = runtime::SEMI_AUTO_PARALLEL});
  std::vector<TrainResult> runs(static_cast<size_t>(world));
  run_thread_job(
      world,
      [&](int rank) {
        const int64_t rows = 16 / world;
        runs[static_cast<size_t>(rank)] =
            train_seed_net(configure, x.narrow_rows(rank * rows, rows).clone(),
                           y.narrow_rows(rank * rows, rows).clone(), steps);
      },
      backend);
  runtime::reset_auto_parallel_context();
  for (int r = 0; r < world; ++r) {
    const TrainResult& run = runs[static_cast<size_t>(r)];
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(run.losses[s], single.losses[s], 1e-5 * std::abs(single.losses[s]))
          << "rank " << r << " step " << s;
    }
    for (size_t p = 0; p < single.params.size(); ++p) {
      EXPECT_TRUE(all_close(run.params[p], single.params[p], 1e-5, 1e-6))
          << "rank " << r << " parameter " << p;
    }
  }
  return runs;
}

// One line per op of `g`: its primitive, local shapes and group ("over" its rank_list).
inline std::string ops_text(const ir::Graph& g) {
  std::string out;
  for (const ir::Node& n : g.nodes) {
    if (!n.is_op()) continue;
    std::vector<std::string> in;
    for (const ir::ValueRef& v : n.inputs) in.push_back(g.meta(v).shape.to_string());
    out += fmt::format("{} {} -> {}", n.op->name, fmt::join(in, " x "),
                       n.outputs[0].shape.to_string());
    if (n.attrs.has("rank_list")) {
      out += " over " + ir::attr_to_string(n.attrs.get<std::vector<int64_t>>("rank_list"));
    }
    out += "\n";
  }
  return out;
}

}  // namespace cleave::testing
