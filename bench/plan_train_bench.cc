// Is the searched plan fast when measured? Trains one network with one parallel plan on the
// ranks of a job (cleave-run) and prints the measured step time beside the cost model's
// prediction for the same plan (bench/run.sh search; the plans: bench/README.md, "search").
//
//   plan_train_bench --net mlp|lenet|transformer --plan NAME [--steps S] [--warmup W]
//                    [--seconds T] [--batch-per-device B] [--profile FILE] [--save-graphs DIR]
//                    [--op-times] [--load-strategy FILE] [--save-strategy FILE]
//
// NAME is a hand-written plan of the network (plans(): strategies set with shard() on its
// operators, the others data parallel where their batch allows, as SEMI_AUTO_PARALLEL gives
// them), or "searched": AUTO_PARALLEL with search_mode "dynamic_programming". With
// --load-strategy, the strategies of a strategy file (--save-strategy's, or cleave-plan's) over
// the hand plan's: any plan, one operator changed by hand, measured and predicted. Every rank reads
// the whole batch of fixed random data (dataset_strategy "full_batch"). Rank 0 prints
//   ROW net=<net> plan=<plan, or the strategy file's stem> np=<ranks> step_ms=<median of the
//   measured steps> steps=<how many were measured>
//       samples_per_s=<global batch / median step> predicted_ms=<predicted step time>
//       cost_ms=<the search's cost of the plan>
// The prediction traces the same step with global shapes and costs the plan the compiler will
// run (parallel::estimate_plan) with the search's own cost model, of the machine profile --profile
// names (cleave-calibrate's; the search plans with it too) or else the one shipped with cleave:
// when the job's ranks outnumber this host's cores, the computation is costed that many times
// slower (NOTE [Ranks sharing cores] in cleave/runtime/pipeline.h), and the gradient reductions
// count as hidden behind the backward only when a core is left for them (fewer ranks than cores).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>

#include "cleave/cleave.h"
#include "cleave/core/threads.h"
#include "cleave/flags.h"
#include "cleave/parallel/calibrated_cost_model.h"
#include "cleave/parallel/plan_estimate.h"
#include "cleave/runtime/pipeline.h"
#include "common/lenet.h"
#include "common/mlp.h"
#include "common/transformer.h"

namespace {

using namespace cleave;
using namespace cleave::examples;
using Clock = std::chrono::steady_clock;

// Dense strategies: the MatMul reads x (batch, in) and its weight (out, in) (transpose_b).
void dense(nn::Dense& d, int64_t batch, int64_t in, int64_t out) {
  d.matmul.shard({{batch, in}, {out, in}});
  // A split reduction leaves a partial sum that the rewrite completes before the bias.
  const int64_t o = in > 1 ? 1 : out;
  d.bias_add.shard({{batch, o}, {o}});
}
void replicated(nn::Dense& d) { dense(d, 1, 1, 1); }
void column(nn::Dense& d, int64_t n, int64_t batch = 1) { dense(d, batch, 1, n); }
void row(nn::Dense& d, int64_t n, int64_t batch = 1) { dense(d, batch, n, 1); }
void data(nn::Dense& d, int64_t n) { dense(d, n, 1, 1); }

using Plan = std::function<void(nn::Cell&, int64_t n)>;

// NOTE [Hand plans]: the plans bench/README.md lists under "search", per network, for n ranks
// (2 or 4). "data" sets nothing: every op takes its default strategy (its batch split n ways).
std::map<std::string, Plan> mlp_plans() {
  auto m = [](nn::Cell& c) -> Mlp& { return static_cast<Mlp&>(c); };
  return {
      {"data", [](nn::Cell&, int64_t) {}},
      {"replicated",
       [m](nn::Cell& c, int64_t) {
         Mlp& net = m(c);
         net.flatten->flatten.shard({{1, 1, 1, 1}});
         replicated(*net.fc1), replicated(*net.fc2), replicated(*net.fc3);
         net.relu1->relu.shard({{1, 1}}), net.relu2->relu.shard({{1, 1}});
       }},
      {"column",  // every hidden layer's output features split; fc3 data parallel
       [m](nn::Cell& c, int64_t n) {
         Mlp& net = m(c);
         column(*net.fc1, n), column(*net.fc2, n), data(*net.fc3, n);
         net.relu1->relu.shard({{1, n}}), net.relu2->relu.shard({{1, n}});
       }},
      {"megatron",  // fc1 column, fc2 row (one AllReduce), fc3 data parallel
       [m](nn::Cell& c, int64_t n) {
         Mlp& net = m(c);
         column(*net.fc1, n), row(*net.fc2, n), data(*net.fc3, n);
         net.relu1->relu.shard({{1, n}}), net.relu2->relu.shard({{n, 1}});
       }},
      {"row",  // every layer's reduction split: partial sums all-reduced
       [m](nn::Cell& c, int64_t n) {
         Mlp& net = m(c);
         net.flatten->flatten.shard({{1, 1, 1, 1}});
         row(*net.fc1, n), row(*net.fc2, n), row(*net.fc3, n);
         net.relu1->relu.shard({{1, 1}}), net.relu2->relu.shard({{1, 1}});
       }},
      {"hybrid",  // the batch split 2 ways and megatron over the rest (n / 2)
       [m](nn::Cell& c, int64_t n) {
         Mlp& net = m(c);
         const int64_t b = 2, k = n / 2;
         column(*net.fc1, k, b), row(*net.fc2, k, b), data(*net.fc3, n);
         net.relu1->relu.shard({{b, k}}), net.relu2->relu.shard({{n, 1}});
       }},
      {"data_fc1_column",  // data parallel but the largest weight (fc1) split by columns
       [m](nn::Cell& c, int64_t n) {
         Mlp& net = m(c);
         column(*net.fc1, n);
         net.relu1->relu.shard({{1, n}});
       }},
      {"megatron_tail_replicated",  // megatron, fc3 and its ReLU computed whole everywhere
       [m](nn::Cell& c, int64_t n) {
         Mlp& net = m(c);
         column(*net.fc1, n), row(*net.fc2, n), replicated(*net.fc3);
         net.relu1->relu.shard({{1, n}}), net.relu2->relu.shard({{1, 1}});
       }},
  };
}

std::map<std::string, Plan> lenet_plans() {
  auto l = [](nn::Cell& c) -> LeNet& { return static_cast<LeNet&>(c); };
  // conv: x (N, C, H, W) and weight (O, C, kh, kw).
  auto conv = [](nn::Conv2d& cv, int64_t batch, int64_t in, int64_t out) {
    cv.conv2d.shard({{batch, in, 1, 1}, {out, in, 1, 1}});
  };
  return {
      {"data", [](nn::Cell&, int64_t) {}},
      {"replicated",
       [l, conv](nn::Cell& c, int64_t) {
         LeNet& net = l(c);
         conv(*net.conv1, 1, 1, 1), conv(*net.conv2, 1, 1, 1);
         net.max_pool2d->max_pool.shard({{1, 1, 1, 1}});
         replicated(*net.fc1), replicated(*net.fc2), replicated(*net.fc3);
       }},
      {"example",  // examples/semi_auto_parallel's NOTE [The model-parallel strategies]
       [l, conv](nn::Cell& c, int64_t n) {
         LeNet& net = l(c);
         const int64_t b = n >= 4 ? 4 : n, k = n / b;
         conv(*net.conv1, b, 1, k);
         net.max_pool2d->max_pool.shard({{b, k, 1, 1}});
         conv(*net.conv2, b, k, 1);
         const int64_t fb = n >= 2 ? 2 : 1, fm = n / fb;
         column(*net.fc1, fm, fb), row(*net.fc2, fm, fb), data(*net.fc3, n);
       }},
      {"fc_megatron",
       [l](nn::Cell& c, int64_t n) {
         LeNet& net = l(c);
         column(*net.fc1, n), row(*net.fc2, n), data(*net.fc3, n);
       }},
      {"fc_column",
       [l](nn::Cell& c, int64_t n) {
         LeNet& net = l(c);
         column(*net.fc1, n), column(*net.fc2, n), data(*net.fc3, n);
       }},
      {"conv_channels",  // conv1's 6 output channels 2 ways, conv2 reduces them; batch n / 2
       [l, conv](nn::Cell& c, int64_t n) {
         LeNet& net = l(c);
         conv(*net.conv1, n / 2, 1, 2);
         net.max_pool2d->max_pool.shard({{n / 2, 2, 1, 1}});
         conv(*net.conv2, n / 2, 2, 1);
       }},
      {"conv2_out",  // conv2's 16 output channels n ways, the rest data parallel
       [l, conv](nn::Cell& c, int64_t n) { conv(*l(c).conv2, 1, 1, n); }},
      {"fc_replicated",
       [l](nn::Cell& c, int64_t) {
         LeNet& net = l(c);
         replicated(*net.fc1), replicated(*net.fc2), replicated(*net.fc3);
       }},
  };
}

std::map<std::string, Plan> transformer_plans() {
  auto t = [](nn::Cell& c) -> Transformer& { return static_cast<Transformer&>(c); };
  auto each = [t](nn::Cell& c, const std::function<void(TransformerBlock&)>& f) {
    for (const auto& b : t(c).blocks) f(*b);
  };
  return {
      {"data", [](nn::Cell&, int64_t) {}},
      {"replicated",
       [each, t](nn::Cell& c, int64_t) {
         each(c, [](TransformerBlock& b) {
           for (nn::Dense* d :
                {b.q.get(), b.k.get(), b.v.get(), b.proj.get(), b.fc1.get(), b.fc2.get()}) {
             replicated(*d);
           }
         });
         replicated(*t(c).head);
       }},
      {"megatron",  // Q, K, V and fc1 by columns, proj and fc2 by rows
       [each](nn::Cell& c, int64_t n) {
         each(c, [n](TransformerBlock& b) {
           column(*b.q, n), column(*b.k, n), column(*b.v, n), row(*b.proj, n);
           column(*b.fc1, n), row(*b.fc2, n);
         });
       }},
      {"mlp_megatron",  // attention data parallel, the MLP megatron
       [each](nn::Cell& c, int64_t n) {
         each(c, [n](TransformerBlock& b) { column(*b.fc1, n), row(*b.fc2, n); });
       }},
      {"attention_megatron",  // the MLP data parallel, attention's projections megatron
       [each](nn::Cell& c, int64_t n) {
         each(c, [n](TransformerBlock& b) {
           column(*b.q, n), column(*b.k, n), column(*b.v, n), row(*b.proj, n);
         });
       }},
      {"column",
       [each](nn::Cell& c, int64_t n) {
         each(c, [n](TransformerBlock& b) {
           for (nn::Dense* d :
                {b.q.get(), b.k.get(), b.v.get(), b.proj.get(), b.fc1.get(), b.fc2.get()}) {
             column(*d, n);
           }
         });
       }},
      {"row",
       [each](nn::Cell& c, int64_t n) {
         each(c, [n](TransformerBlock& b) {
           for (nn::Dense* d :
                {b.q.get(), b.k.get(), b.v.get(), b.proj.get(), b.fc1.get(), b.fc2.get()}) {
             row(*d, n);
           }
         });
       }},
      {"hybrid",  // the rows (batch x sequence) 2 ways, the MLP megatron over n / 2
       [each](nn::Cell& c, int64_t n) {
         each(c, [n](TransformerBlock& b) { column(*b.fc1, n / 2, 2), row(*b.fc2, n / 2, 2); });
       }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains a network with one parallel plan; measured against predicted step time."};
  cleave::flags::setup(app, cleave::flags::cluster_variables());
  std::string net_name = "mlp", plan_name = "data";
  int64_t steps = 30, warmup = 5, batch_per_device = 32;
  app.add_option("--net", net_name, "the network")
      ->check(cleave::flags::one_of({"mlp", "lenet", "transformer"}))
      ->capture_default_str();
  app.add_option("--plan", plan_name, "a hand plan (NOTE [Hand plans]) or searched")
      ->capture_default_str();
  app.add_option("--steps", steps, "measured steps")->check(cleave::flags::positive());
  app.add_option("--warmup", warmup, "steps before the measured ones (compile included)")
      ->check(cleave::flags::positive());
  double seconds = 0.5;
  app.add_option("--seconds", seconds,
                 "the warm-up and the measured steps each last at least this long, in a step "
                 "count every rank agrees on (NOTE [Steady steps]); 0: exactly --warmup and "
                 "--steps")
      ->check(cleave::flags::non_negative_number())
      ->capture_default_str();
  app.add_option("--batch-per-device", batch_per_device, "each rank's share of the batch")
      ->check(cleave::flags::positive());
  std::string profile;
  app.add_option("--profile", profile,
                 "the machine profile (cleave-calibrate) the search and the prediction use; "
                 "default: the one shipped with cleave");
  std::string save_graphs;
  app.add_option("--save-graphs", save_graphs,
                 "dump the compiled step's graphs (the strategies chosen included) under DIR");
  bool op_times = false;
  app.add_flag("--op-times", op_times,
               "after the measured steps, run as many again with the executor timing each op "
               "and print rank 0's op times (OP lines, most costly first: time, primitive, "
               "output and input shapes, name, attributes)");
  std::string load_strategy, save_strategy;
  app.add_option("--load-strategy", load_strategy,
                 "run the strategies of this strategy file (NOTE [Strategy file]) over the "
                 "plan's (SEMI_AUTO_PARALLEL, strategy_ckpt_load_file)")
      ->check(CLI::ExistingFile);
  app.add_option("--save-strategy", save_strategy,
                 "rank 0 writes the step's strategies to this strategy file "
                 "(strategy_ckpt_save_file)");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  try {
    init();
    const int rank = get_rank(), n = get_group_size();
    const std::map<std::string, Plan> plans = net_name == "mlp"     ? mlp_plans()
                                              : net_name == "lenet" ? lenet_plans()
                                                                    : transformer_plans();
    const bool searched = plan_name == "searched";
    CLEAVE_CHECK_ARG(searched || plans.count(plan_name) == 1,
                     "--plan {} is not a plan of {}; expected searched or one of the hand plans",
                     plan_name, net_name);
    CLEAVE_CHECK_ARG(!searched || load_strategy.empty(),
                     "--load-strategy {} with --plan searched: a loaded plan is not searched; "
                     "expected a hand plan for the operators the file does not name",
                     load_strategy);
    runtime::set_context({.mode = runtime::GRAPH_MODE,
                          .save_graphs = save_graphs.empty() ? 0 : 1,
                          .save_graphs_path = save_graphs.empty() ? "." : save_graphs});
    runtime::set_auto_parallel_context(
        {.parallel_mode = searched ? runtime::AUTO_PARALLEL : runtime::SEMI_AUTO_PARALLEL,
         .search_mode = "dynamic_programming",
         .dataset_strategy = "full_batch",
         .strategy_ckpt_save_file = rank == 0 ? save_strategy : std::string(),
         .strategy_ckpt_load_file = load_strategy,
         .cost_model_profile = profile});
    set_seed(1);
    const TransformerConfig tc{.layers = 2, .hidden = 128, .heads = 4, .seq = 16};
    nn::CellPtr net;
    Shape input;
    if (net_name == "mlp") {
      net = std::make_shared<Mlp>();
      input = {1, 1, 28, 28};
    } else if (net_name == "lenet") {
      net = std::make_shared<LeNet>();
      input = {1, 1, 32, 32};
    } else {
      net = std::make_shared<Transformer>(tc);
      input = {1, tc.seq, tc.hidden};
    }
    if (!searched) plans.at(plan_name)(*net, n);
    const int64_t batch = batch_per_device * n;
    input[0] = batch;
    auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
    auto net_with_loss = std::make_shared<nn::WithLossCell>(net, loss);
    optim::TrainOneStep step(net_with_loss, opt);

    // The prediction: the same step traced with global shapes, searched as the job will search
    // it, costed as the rewrite lays it out.
    double predicted_ms = 0, cost_ms = 0, predicted_compute_ms = 0, predicted_comm_ms = 0;
    if (rank == 0) {
      runtime::StepProgram program =
          step.program({input, DType::kFloat32}, {Shape{batch}, DType::kInt32});
      runtime::CompileOptions options;
      options.world_size = n;
      options.mode = searched ? runtime::AUTO_PARALLEL : runtime::SEMI_AUTO_PARALLEL;
      options.search_mode = "dynamic_programming";
      // The job's own search: its profile and its ranks' share of the cores (set by the
      // pipeline from the context and the cluster).
      options.cost_model_profile = profile;
      options.compute_slowdown = runtime::shared_cores_slowdown();
      options.device_num = n;
      options.step_parallel = {.device_num = n, .dataset = parallel::DatasetSplit::kFullBatch};
      options.strategy_load_file = load_strategy;
      runtime::CompileState state{.program = program, .options = options};
      runtime::run_pass("trace", state);
      if (!load_strategy.empty()) runtime::run_pass("load_strategy_file", state);
      if (searched) runtime::run_pass("search_strategies", state);
      const int64_t cores = threads::available_cores();
      // The search's own model (NOTE [Ranks sharing cores] in cleave/runtime/pipeline.h).
      const parallel::CostModel& model = parallel::cost_model_for_profile(
          profile, {.compute_slowdown = runtime::shared_cores_slowdown()});
      parallel::EstimateOptions eo;
      eo.search = {.step_parallel = options.step_parallel, .cost_model = &model};
      // A gradient reduction in flight needs a core of its own to hide behind the backward: with
      // a rank per core or more, none is free (measured: the data-parallel plans' reductions
      // stayed exposed on 2 ranks of this 2-core machine).
      eo.overlap_gradients = n < cores;
      const parallel::PlanEstimate e = parallel::estimate_plan(state.graph, eo);
      predicted_ms = e.predicted_step_s() * 1e3;
      cost_ms = e.cost * 1e3;
      predicted_compute_ms = e.compute_s * 1e3;
      predicted_comm_ms = e.exposed_communication_s * 1e3;
    }

    // Fixed random data, the same on every rank.
    const Tensor x = Tensor::normal(input);
    const Tensor y = ops::cast(Tensor::uniform({batch}, 0, 10), DType::kInt32);
    const auto warm_start = Clock::now();
    auto after_first = warm_start;
    for (int64_t s = 0; s < warmup; ++s) {
      step(x, y);
      if (s == 0) after_first = Clock::now();
    }
    // NOTE [Steady steps]: the first few hundred milliseconds of a job whose ranks fill the
    // cores run slower than the rest. LeNet's data-parallel step on 2 workers of the 2-core
    // host, the median of each 25 steps: 1.84-1.90 ms at the start, 1.73 ms after about 0.3 s,
    // and so to the end of 800 steps; with one worker alone, 1.63-1.65 ms from the start. Binding
    // the workers to the cores does not remove it, and no other thread of the job runs in it.
    // The fixed 5 warm-up steps and 30 measured ones of a 2 ms step fell inside that spell, by
    // an amount that varied from run to run (the median 1.78-1.90 ms in six runs; after 300
    // warm-up steps 1.72-1.75): plans that run alike measured up to 3% apart. So the warm-up
    // and the measured steps each last --seconds, in a step count every rank agrees on: the
    // largest of the ranks' counts (an AllReduce), from their warm-up steps' times, so that the
    // span lasts at least --seconds on each (ranks that disagreed would hang in a collective).
    if (seconds > 0) {
      const double step_s =
          warmup > 1 ? std::chrono::duration<double>(Clock::now() - after_first).count() /
                           static_cast<double>(warmup - 1)
                     : std::chrono::duration<double>(after_first - warm_start).count();
      const auto per_span = static_cast<float>(std::ceil(seconds / std::max(step_s, 1e-6)));
      const Tensor agreed = ops::all_reduce(Tensor::from_vector(std::vector<float>{per_span}),
                                            {.op = comm::ReduceOp::kMax});
      const auto span = static_cast<int64_t>(agreed.item());
      for (int64_t s = warmup; s < span; ++s) step(x, y);
      steps = std::max(steps, span);
    }
    std::vector<double> times, waits;
    for (int64_t s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      const double waited_before = step.last_executor()->communication_wait_seconds();
      step(x, y);
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      waits.push_back(step.last_executor()->communication_wait_seconds() - waited_before);
    }
    const auto median_of = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double median = median_of(times);
    if (op_times) {
      // Each op's kernel time (Executor::set_profiling), apart from the ROW's steps: the clock
      // reads cost about 50 ns per op.
      runtime::Executor& exec = *step.last_executor();
      exec.set_profiling(true);
      for (int64_t s = 0; s < steps; ++s) step(x, y);
      exec.set_profiling(false);
      const ir::Graph& g = exec.graph();
      std::vector<std::pair<double, size_t>> by_time;
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (g.nodes[i].is_op()) by_time.emplace_back(exec.node_seconds()[i], i);
      }
      std::sort(by_time.rbegin(), by_time.rend());
      for (const auto& [seconds, i] : by_time) {
        if (rank != 0) break;
        std::string inputs;
        for (const ir::ValueRef& v : g.nodes[i].inputs) {
          inputs += (inputs.empty() ? "" : " ") + g.meta(v).shape.to_string();
        }
        fmt::print("OP {:>9.1f} us  {:<28} {} <- {}  {} {}\n",
                   seconds / static_cast<double>(steps) * 1e6, g.nodes[i].op->name,
                   g.nodes[i].outputs.empty() ? "-" : g.nodes[i].outputs[0].shape.to_string(),
                   inputs, g.nodes[i].name, g.nodes[i].attrs.to_string());
      }
    }
    if (rank == 0) {
      fmt::print(
          "ROW net={} plan={} np={} step_ms={:.3f} steps={} samples_per_s={:.1f} "
          "predicted_ms={:.3f} cost_ms={:.3f} predicted_compute_ms={:.3f} "
          "predicted_communication_ms={:.3f} communication_ms={:.3f}\n",
          net_name,
          load_strategy.empty() ? plan_name : std::filesystem::path(load_strategy).stem().string(),
          n, median * 1e3, steps, static_cast<double>(batch) / median, predicted_ms, cost_ms,
          predicted_compute_ms, predicted_comm_ms, median_of(waits) * 1e3);
    }
    std::fflush(stdout);
    release();
  } catch (const Error& e) {
    std::fprintf(stderr, "plan_train_bench: %s\n", e.what());
    std::fflush(stderr);
    report_failure(e.what());
    return 1;
  }
  return 0;
}
