// cleave-plan: the strategy search as a dry run. For a model (or an IR text) and a device count
// it prints, without starting any process, the plan AUTO_PARALLEL would run: every operator's
// strategy, the predicted step time split into computation and communication (and the part of
// the communication nothing hides), each rank's memory and traffic, and the runner-up plans with
// their predicted cost (NOTE [Plan estimate] in cleave/parallel/plan_estimate.h).
//
//   cleave-plan MODEL --device-num N [--batch-per-device B] [--search-mode MODE] [--level L]
//               [--profile FILE]
//               [--backend shm|gloo|mpi|nccl] [--eval] [--optimizer momentum|sgd|adam]
//               [--ops K] [--runner-ups R] [--load-strategy FILE] [--save-strategy FILE]
//               [--time-ops OUT.json] [--ranks-per-host R]
//   cleave-plan --graph FILE.ir --device-num N [...]
//
// MODEL is lenet, mlp (seed 002's 784-512-512-10), resnet50 (seed 001: 32x32 CIFAR-10 images,
// 10 classes, SoftmaxCrossEntropyExpand) or transformer (--layers, --hidden, --heads, --seq). An
// IR text (a save_graphs dump of a traced step, `01_trace.ir`) is planned as traced: its inputs
// are read whole by every rank (full_batch) and its batch is the one traced. --time-ops times the
// model's product and convolution slices on this machine into --profile's tables (NOTE [Measured
// op slices] in cleave/parallel/search.h), writes the result to OUT.json, and plans with it; a
// job names OUT.json as its cost_model_profile. --ranks-per-host R plans for a job whose R ranks
// share one host: with more ranks than the profile's cores, the search and the estimate cost
// them as the job's own search does (NOTE [Ranks sharing cores] in cleave/runtime/pipeline.h).
//
// Exit status 0 on success, 1 when the plan cannot be made (an Error, printed), 2 on bad usage.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "cleave/core/threads.h"
#include "cleave/flags.h"
#include "cleave/ir/parse.h"
#include "cleave/parallel/calibrated_cost_model.h"
#include "cleave/parallel/plan_estimate.h"
#include "cleave/parallel/propagation.h"
#include "cleave/parallel/strategy_file.h"
#include "cleave/runtime/op_timing.h"
#include "cleave/runtime/pipeline.h"
#include "common/lenet.h"
#include "common/mlp.h"
#include "common/resnet.h"
#include "common/transformer.h"

namespace {

using namespace cleave;
using namespace cleave::examples;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Settings {
  std::string model, graph_file, search_mode = "dynamic_programming", profile, backend = "shm";
  std::string optimizer = "momentum", save_strategy, load_strategy, time_ops;
  int64_t device_num = 0, batch_per_device = 32, runner_ups = 3, ops = 20, level = 2;
  int64_t layers = 2, hidden = 256, heads = 4, seq = 64;
  int64_t ranks_per_host = 0;  // 0: every rank has cores of its own
  bool eval = false;
};

// The model's network, its loss, its input's shape for one device's batch, and one line saying
// what it is.
struct Model {
  nn::CellPtr net, loss;
  Shape input;
  DType label_dtype = DType::kInt32;
  std::string what;
};

Model make_model(const Settings& s) {
  const int64_t b = s.batch_per_device;
  if (s.model == "lenet") {
    return {std::make_shared<LeNet>(), get_loss(), Shape{b, 1, 32, 32}, DType::kInt32,
            "seed 000's LeNet-5 (32x32 images, 10 classes)"};
  }
  if (s.model == "mlp") {
    return {std::make_shared<Mlp>(),
            std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), Shape{b, 1, 28, 28},
            DType::kInt32, "seed 002's MLP (784-512-512-10)"};
  }
  if (s.model == "resnet50") {
    return {resnet50(b, 10), std::make_shared<SoftmaxCrossEntropyExpand>(true), Shape{b, 3, 32, 32},
            DType::kInt32, "seed 001's ResNet-50 (32x32 CIFAR-10 images, 10 classes)"};
  }
  const examples::TransformerConfig c{
      .layers = s.layers, .hidden = s.hidden, .heads = s.heads, .seq = s.seq};
  return {std::make_shared<examples::Transformer>(c),
          std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"),
          Shape{b, s.seq, s.hidden}, DType::kInt32,
          fmt::format("a transformer of {} blocks (hidden {}, {} heads, sequence {})", s.layers,
                      s.hidden, s.heads, s.seq)};
}

std::string ms(double s) { return fmt::format("{:.3f} ms", s * 1e3); }
std::string mib(double bytes) { return fmt::format("{:.2f} MiB", bytes / (1 << 20)); }

double optimizer_state_slices(const std::string& optimizer) {
  if (optimizer == "adam") return 2;      // first and second moments
  if (optimizer == "momentum") return 1;  // the velocity
  return 0;                               // SGD without momentum
}

void print_estimate(const parallel::PlanEstimate& e, const char* indent) {
  fmt::print("{}predicted step   {} = compute {} + exposed communication {}\n", indent,
             ms(e.predicted_step_s()), ms(e.compute_s), ms(e.exposed_communication_s));
  fmt::print(
      "{}communication    {} (forward and backward collectives and redistributions {}, "
      "gradient reductions {})\n",
      indent, ms(e.communication_s), ms(e.communication_s - e.gradient_s), ms(e.gradient_s));
  fmt::print("{}search cost      {} (compute + beta {} * communication)\n", indent, ms(e.cost),
             e.beta);
  fmt::print(
      "{}memory per rank  {} = parameters {} + gradients {} + optimizer state {} + "
      "activations {} (every op's slices, an upper bound)\n",
      indent, mib(e.memory_bytes()), mib(e.parameter_bytes), mib(e.gradient_bytes),
      mib(e.optimizer_state_bytes), mib(e.activation_bytes));
  fmt::print("{}traffic per rank {} sent per step\n", indent, mib(e.traffic_bytes));
}

void print_ops(const parallel::PlanEstimate& e, int64_t which) {
  std::vector<const parallel::OpEstimate*> ops;
  for (const parallel::OpEstimate& op : e.ops) ops.push_back(&op);
  size_t shown = ops.size();
  if (which > 0 && static_cast<size_t>(which) < ops.size()) {
    shown = static_cast<size_t>(which);
    std::stable_sort(ops.begin(), ops.end(),
                     [](const auto* a, const auto* b) { return a->cost > b->cost; });
    ops.resize(shown);
    fmt::print("\noperators: the {} most costly of {} (--ops 0: every one, in graph order)\n",
               shown, e.ops.size());
  } else {
    fmt::print("\noperators: all {}, in graph order (--ops K: the K most costly)\n", e.ops.size());
  }
  size_t width = 4, prim = 9, strat = 8;
  for (const auto* op : ops) {
    width = std::max(width, op->name.size());
    prim = std::max(prim, op->op.size());
    strat = std::max(strat, op->strategy.size() + 2);
  }
  fmt::print("  {:<{}}  {:<{}}  {:<{}} {:>10} {:>3} {:>10} {:>10} {:>10}\n", "name", width,
             "primitive", prim, "strategy", strat, "compute", "c", "comm", "redistrib", "memory");
  for (const auto* op : ops) {
    fmt::print("  {:<{}}  {:<{}}  {:<{}} {:>10} {:>3} {:>10} {:>10} {:>10}\n", op->name, width,
               op->op, prim, op->strategy + (op->given ? " *" : ""), strat, ms(op->compute_s),
               op->measured ? std::string("t") : fmt::format("{}", op->compute_factor),
               ms(op->comm_s), ms(op->redistribution_s), mib(op->memory_bytes));
  }
  fmt::print(
      "  (per rank, forward only; * = given with shard(); the step costs c times each op's "
      "compute: 1 plus its backward, 3 for a product whose operands both need gradients; c = t: "
      "the slice's forward and backward as timed on the machine (--time-ops); and m = {} times "
      "the communication)\n",
      e.comm_factor);
}

void print_parameters(const parallel::PlanEstimate& e, int64_t device_num, int64_t shown) {
  std::vector<const parallel::ParameterEstimate*> sharded;
  double replicated_bytes = 0;
  for (const parallel::ParameterEstimate& p : e.parameters) {
    if (p.replicas < device_num) {
      sharded.push_back(&p);
    } else {
      replicated_bytes += p.slice_bytes;
    }
  }
  fmt::print("\nparameters: {} of {} sharded; the other {} ({}) whole on every rank{}\n",
             sharded.size(), e.parameters.size(), e.parameters.size() - sharded.size(),
             mib(replicated_bytes),
             e.training && device_num > 1
                 ? fmt::format(", their gradients all-reduced over {} ranks", device_num)
                 : "");
  std::stable_sort(sharded.begin(), sharded.end(),
                   [](const auto* a, const auto* b) { return a->slice_bytes > b->slice_bytes; });
  if (shown > 0 && static_cast<int64_t>(sharded.size()) > shown) {
    fmt::print("  the {} largest sharded (--ops 0: every one):\n", shown);
    sharded.resize(static_cast<size_t>(shown));
  }
  for (const auto* p : sharded) {
    fmt::print("  {}: {} per rank, {} replica{}{} -- {}\n", p->name, mib(p->slice_bytes),
               p->replicas, p->replicas == 1 ? "" : "s",
               p->gradient_s > 0 ? fmt::format(", gradient reduction {}", ms(p->gradient_s))
                                 : std::string(p->trainable ? "" : ", no gradient"),
               p->layout);
  }
}

// What the chosen plan is compared with: every op with its default strategy (data parallel
// where its batch allows).
void print_references(const ir::Graph& traced, const parallel::EstimateOptions& options,
                      double chosen_cost) {
  ir::Graph defaults = traced;
  for (ir::Node& n : defaults.nodes) {
    if (n.is_op() && n.strategy_derived) n.strategy.clear();
  }
  const parallel::PlanEstimate e = parallel::estimate_plan(defaults, options);
  fmt::print(
      "\nreference: every op that has no given strategy with its default one (data parallel where "
      "it can be), "
      "search cost {} ({:+.1f}% against the chosen plan)\n",
      ms(e.cost), 100 * (e.cost / chosen_cost - 1));
  print_estimate(e, "  ");
}

// NOTE [Measured op slices]: times every slice the search may cost of `traced` with each
// thread count of `profile`'s tables, into those tables, and writes the profile to `path`.
void time_ops(const ir::Graph& traced, const parallel::SearchOptions& o,
              parallel::MachineProfile& profile, const std::string& path) {
  const std::vector<parallel::OpSlice> slices = parallel::op_slices(traced, o);
  const int threads_before = threads::intra_op_threads();
  for (parallel::ComputeTable& table : profile.compute) {
    const auto start = Clock::now();
    threads::set_intra_op_threads(static_cast<int>(table.threads));
    const runtime::OpTimingReport r = runtime::time_op_slices(slices);
    parallel::add_op_timings(table, r.timings);
    fmt::print("  timed {} op slices with {} thread{} in {:.2f} s{}\n", r.timings.size(),
               table.threads, table.threads == 1 ? "" : "s", seconds_since(start),
               r.skipped.empty() ? "" : fmt::format(", {} skipped:", r.skipped.size()));
    for (const std::string& why : r.skipped) fmt::print("    {}\n", why);
  }
  threads::set_intra_op_threads(threads_before);
  parallel::save_machine_profile(profile, path);
  fmt::print("  wrote the profile with its op slices to {}\n", path);
}

int plan(const Settings& s) {
  std::unique_ptr<parallel::CostModel> own_model;
  const parallel::CostModel* model = nullptr;
  std::string model_source = s.profile.empty() ? "the profile shipped with cleave" : s.profile;
  parallel::MachineProfile profile = s.profile.empty() ? parallel::default_machine_profile()
                                                       : parallel::load_machine_profile(s.profile);
  if (!s.time_ops.empty()) {
    // Op timings belong with the curves and collectives of the machine they were timed on.
    CLEAVE_CHECK_ARG(!s.profile.empty(),
                     "--time-ops {} needs --profile FILE, a profile cleave-calibrate measured on "
                     "this machine: the op slices are timed here and added to it",
                     s.time_ops);
    const std::string diff =
        parallel::machine_difference(profile.machine, parallel::this_machine());
    CLEAVE_CHECK_ARG(diff.empty(),
                     "--time-ops {}: the profile {} was measured on another machine ({}); the op "
                     "slices are timed on this one. Run `cleave-calibrate -o FILE` here and give "
                     "--profile FILE",
                     s.time_ops, s.profile, diff);
  }
  parallel::warn_if_other_machine(profile, model_source);

  // The forward with global shapes: a model's traced as the compile pipeline traces it (no
  // process: the options say which job), or an IR text.
  const auto start = Clock::now();
  ir::Graph traced;
  std::string what;
  bool training = !s.eval;
  parallel::StepParallelOptions step;
  step.device_num = s.device_num;
  if (!s.graph_file.empty()) {
    traced = ir::parse_file(s.graph_file).graph;
    step.dataset = parallel::DatasetSplit::kFullBatch;
    what = fmt::format("{} (inputs read whole by every rank)", s.graph_file);
  } else {
    Model m = make_model(s);
    auto net_with_loss = std::make_shared<nn::WithLossCell>(m.net, m.loss);
    auto optimizer = std::make_shared<optim::Momentum>(m.net->trainable_params(), 0.01, 0.9);
    optim::TrainOneStep train(net_with_loss, optimizer);
    optim::Forward forward(m.net);
    const ir::TensorMeta data{m.input, DType::kFloat32};
    const ir::TensorMeta label{Shape{s.batch_per_device}, m.label_dtype};
    runtime::StepProgram program = training ? train.program(data, label) : forward.program(data);
    runtime::CompileOptions options;
    options.world_size = s.device_num;
    options.mode = runtime::AUTO_PARALLEL;
    options.device_num = s.device_num;
    options.step_parallel = step;
    runtime::CompileState state{.program = program, .options = options};
    runtime::run_pass("trace", state);
    traced = std::move(state.graph);
    what = fmt::format("{}, batch {} per device ({} in all)", m.what, s.batch_per_device,
                       s.batch_per_device * s.device_num);
  }
  fmt::print("cleave-plan: {}\n", what);
  fmt::print("  {} step on {} devices, search {} level {} ({}), cost model: {} (backend {}, {})\n",
             training ? "training" : "evaluation", s.device_num, s.search_mode, s.level,
             s.level == 0   ? "computation over communication"
             : s.level == 1 ? "memory"
                            : "speed",
             model_source, s.backend, profile.machine.cpu_model);
  fmt::print("  traced in {:.2f} s: {} nodes\n", seconds_since(start), traced.nodes.size());
  if (!s.time_ops.empty()) {
    time_ops(traced, {.step_parallel = step, .training = training}, profile, s.time_ops);
    model_source = s.time_ops;
  }
  // NOTE [Ranks sharing cores]: as a job of ranks_per_host ranks on a host of the profile's
  // cores plans (runtime::shared_cores_slowdown), its gradient reductions hidden only with a core
  // left for them (as plan_train_bench predicts).
  const double cores = static_cast<double>(std::max<int64_t>(1, profile.machine.cores));
  const double slowdown = std::max(1.0, static_cast<double>(s.ranks_per_host) / cores);
  if (s.ranks_per_host > 0) {
    fmt::print("  {} ranks on a host of {} cores: computation costed {:.2f} times slower{}\n",
               s.ranks_per_host, profile.machine.cores, slowdown,
               slowdown > 1 ? ", collectives as ranks sharing cores" : "");
  }
  own_model = std::make_unique<parallel::CalibratedCostModel>(
      profile,
      parallel::CalibratedCostModel::Options{.backend = s.backend, .compute_slowdown = slowdown},
      model_source);
  model = own_model.get();

  if (!s.load_strategy.empty()) {
    const int loaded = parallel::load_strategy_file(s.load_strategy, traced, s.device_num);
    for (ir::Node& n : traced.nodes) n.strategy_derived = false;  // given, as shard()'s
    fmt::print("  {} strategies given by {}\n", loaded, s.load_strategy);
  }

  parallel::EstimateOptions eo;
  eo.search = {.step_parallel = step, .cost_model = model, .training = training};
  if (s.ranks_per_host > 0) eo.overlap_gradients = static_cast<double>(s.ranks_per_host) < cores;
  // The search's objective; the estimate below still costs every plan by time.
  parallel::SearchOptions searched = eo.search;
  searched.objective = static_cast<parallel::SearchObjective>(s.level);
  eo.optimizer_state_per_parameter = optimizer_state_slices(s.optimizer);

  ir::Graph chosen = traced;
  const auto search_start = Clock::now();
  std::vector<parallel::RunnerUp> runner_ups;
  parallel::CostGraph cost_graph;
  if (s.search_mode == "dynamic_programming") {
    cost_graph = parallel::build_cost_graph(chosen, searched);
    const double build_s = seconds_since(search_start);
    const parallel::SearchResult best = parallel::solve_dynamic_programming(cost_graph, searched);
    parallel::apply_choice(chosen, cost_graph, best.choice);
    const double search_s = seconds_since(search_start);
    fmt::print(
        "  searched in {:.2f} s (cost graph {:.2f} s, solve {:.2f} s): {} cost-graph nodes, {} "
        "eliminations, {} left to the exact solver; its cost {}\n",
        search_s, build_s, search_s - build_s, cost_graph.nodes.size(), best.eliminations.total(),
        best.exact_nodes, ms(best.cost));
    if (s.runner_ups > 0) {
      const auto runner_start = Clock::now();
      runner_ups =
          parallel::runner_up_plans(cost_graph, best, searched, static_cast<int>(s.runner_ups));
      fmt::print("  runner-ups found in {:.2f} s\n", seconds_since(runner_start));
    }
  } else if (s.search_mode == "sharding_propagation") {
    parallel::propagate_strategies(chosen, step);
    fmt::print("  propagated in {:.2f} s\n", seconds_since(search_start));
  } else {
    runtime::StepProgram none;
    none.name = "plan";
    none.traced = std::make_shared<ir::Graph>(std::move(chosen));
    runtime::CompileOptions options;
    options.world_size = s.device_num;
    options.mode = runtime::AUTO_PARALLEL;
    options.search_mode = s.search_mode;
    options.search_level = static_cast<int>(s.level);
    options.cost_model_profile = s.time_ops.empty() ? s.profile : s.time_ops;
    options.compute_slowdown = slowdown;
    options.device_num = s.device_num;
    options.step_parallel = step;
    runtime::CompileState state{.program = none, .options = options};
    runtime::run_pass("trace", state);
    runtime::run_pass("search_strategies", state);
    chosen = std::move(state.graph);
    fmt::print("  searched in {:.2f} s\n", seconds_since(search_start));
  }

  const parallel::PlanEstimate e = parallel::estimate_plan(chosen, eo);
  fmt::print("\nchosen plan\n");
  print_estimate(e, "  ");
  print_ops(e, s.ops);
  print_parameters(e, s.device_num, s.ops);

  if (!runner_ups.empty()) {
    fmt::print(
        "\nrunner-ups: the best plans that give one of the most costly operators another "
        "strategy\n");
    for (size_t k = 0; k < runner_ups.size(); ++k) {
      const parallel::RunnerUp& u = runner_ups[k];
      ir::Graph alt = traced;
      parallel::apply_choice(alt, cost_graph, u.result.choice);
      const parallel::PlanEstimate a = parallel::estimate_plan(alt, eo);
      const int node = cost_graph.nodes[static_cast<size_t>(u.changed_node)].graph_node;
      fmt::print("  {}. search cost {} ({:+.1f}%): {} {} instead of {}\n", k + 1, ms(a.cost),
                 100 * (a.cost / e.cost - 1),
                 parallel::path_name(traced.nodes[static_cast<size_t>(node)]), u.to, u.from);
      fmt::print("     compute {}, communication {}, memory per rank {}\n", ms(a.compute_s),
                 ms(a.communication_s), mib(a.memory_bytes()));
    }
  }
  print_references(traced, eo, e.cost);

  if (!s.save_strategy.empty()) {
    ir::Graph g = chosen;
    const parallel::ParallelPlan p = parallel::plan_step_parallel(g, step);
    parallel::save_strategy_file(s.save_strategy, g, p);
    fmt::print("\nwrote the strategies to {}\n", s.save_strategy);
  }
  fmt::print("\ncleave-plan: done in {:.2f} s\n", seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "The strategy search as a dry run: the plan AUTO_PARALLEL would run for a model on N "
      "devices, its predicted step time, memory and traffic per rank, and the runner-up plans. "
      "No process is started."};
  cleave::flags::setup(app);
  Settings s;
  app.add_option("model", s.model, "lenet, mlp, resnet50 or transformer")
      ->check(cleave::flags::one_of({"lenet", "mlp", "resnet50", "transformer"}));
  app.add_option("--graph", s.graph_file, "plan an IR text (a save_graphs dump) instead");
  app.add_option("--device-num", s.device_num, "the devices to plan for")
      ->required()
      ->check(cleave::flags::positive());
  app.add_option("--batch-per-device", s.batch_per_device, "each device's batch (a model)")
      ->check(cleave::flags::positive())
      ->capture_default_str();
  app.add_option("--search-mode", s.search_mode, "the search")
      ->check(cleave::flags::one_of(
          {"dynamic_programming", "recursive_programming", "sharding_propagation"}))
      ->capture_default_str();
  app.add_option("--level", s.level,
                 "the search's objective: 0 computation over communication, 1 memory, 2 speed")
      ->check(cleave::flags::integer_in(0, 2))
      ->capture_default_str();
  app.add_option("--profile", s.profile,
                 "a machine profile (cleave-calibrate); default: the one shipped with cleave");
  app.add_option("--backend", s.backend, "the collectives' backend in the cost model")
      ->check(cleave::flags::one_of({"shm", "gloo", "mpi", "nccl"}))
      ->capture_default_str();
  app.add_flag("--eval", s.eval, "plan an evaluation step (forward only) instead of training");
  app.add_option("--optimizer", s.optimizer, "whose state counts in memory")
      ->check(cleave::flags::one_of({"momentum", "sgd", "adam"}))
      ->capture_default_str();
  app.add_option("--ops", s.ops, "how many operators to list, most costly first (0: all)")
      ->check(cleave::flags::non_negative())
      ->capture_default_str();
  app.add_option("--runner-ups", s.runner_ups, "runner-up plans to show (dynamic_programming)")
      ->check(cleave::flags::integer_in(0, 10))
      ->capture_default_str();
  app.add_option("--load-strategy", s.load_strategy,
                 "take the strategies of a strategy file as given (shard()'s), as "
                 "strategy_ckpt_load_file does; the search decides the others");
  app.add_option("--save-strategy", s.save_strategy,
                 "write the chosen strategies as a strategy file (strategy_ckpt_load_file)");
  app.add_option("--time-ops", s.time_ops,
                 "time every product and convolution slice the search may cost on this machine, "
                 "add them to --profile's tables and write that profile to FILE (then plan with "
                 "it)");
  app.add_option("--ranks-per-host", s.ranks_per_host,
                 "plan for a job whose R ranks share one host: with more ranks than the "
                 "profile's cores, computation and collectives are costed as sharing them; 0: "
                 "every rank has cores of its own")
      ->check(cleave::flags::non_negative())
      ->capture_default_str();
  app.add_option("--layers", s.layers, "transformer: blocks")
      ->check(cleave::flags::positive())
      ->capture_default_str();
  app.add_option("--hidden", s.hidden, "transformer: hidden size")
      ->check(cleave::flags::positive())
      ->capture_default_str();
  app.add_option("--heads", s.heads, "transformer: attention heads")
      ->check(cleave::flags::positive())
      ->capture_default_str();
  app.add_option("--seq", s.seq, "transformer: sequence length")
      ->check(cleave::flags::positive())
      ->capture_default_str();
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  if (s.model.empty() == s.graph_file.empty()) {
    std::fprintf(stderr,
                 "cleave-plan: %s; expected a model (lenet, mlp, resnet50, transformer) or "
                 "--graph FILE.ir (run 'cleave-plan --help' for every flag)\n",
                 s.model.empty() ? "nothing to plan" : "both a model and --graph given");
    return 2;
  }
  if (s.ranks_per_host > s.device_num) {
    std::fprintf(stderr,
                 "cleave-plan: --ranks-per-host %lld is more than --device-num %lld; expected at "
                 "most the job's devices\n",
                 static_cast<long long>(s.ranks_per_host), static_cast<long long>(s.device_num));
    return 2;
  }
  try {
    return plan(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cleave-plan: %s\n", e.what());
    return 1;
  }
}
