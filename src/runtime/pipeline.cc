// The compile pipeline (NOTE [Compile pipeline] in cleave/runtime/pipeline.h).
#include "cleave/runtime/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <queue>

#include "cleave/autodiff/graph_grad.h"
#include "cleave/comm/group_registry.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/passes.h"
#include "cleave/ops/shape.h"
#include "cleave/parallel/partition.h"
#include "cleave/parallel/propagation.h"
#include "cleave/parallel/step_parallel.h"
#include "cleave/parallel/strategy_file.h"
#include "cleave/runtime/collectives.h"
#include "cleave/runtime/compile.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/sharded_parameters.h"

namespace cleave::runtime {
namespace {

std::atomic<int> g_graph_counter{0};

// How this process takes part in the step: the parallel mode, the devices it is planned for and
// this process's rank among them.
struct Setup {
  ParallelMode mode = STAND_ALONE;
  int64_t device_num = 1;
  int64_t rank = 0;
  int micro_batches = 1;
  parallel::StepParallelOptions options;
  // SEMI_AUTO_PARALLEL or AUTO_PARALLEL: the step-parallel rewrite runs.
  bool sharded() const { return mode == SEMI_AUTO_PARALLEL || mode == AUTO_PARALLEL; }
};

Setup resolve_setup(const std::string& step, bool training) {
  const AutoParallelContext& c = get_auto_parallel_context();
  Setup s;
  s.mode = c.parallel_mode;
  // Micro-batches pipeline a training step; an evaluation runs its batch at once.
  s.micro_batches = training ? c.pipeline_micro_batches : 1;
  const int64_t world = comm::world_size();
  s.rank = comm::world_rank();
  s.device_num = c.device_num > 0 ? c.device_num : world;
  if (s.mode == STAND_ALONE) return s;
  CLEAVE_CHECK_ARG(s.device_num == world,
                   "{}: parallel_mode {} with device_num {}, but this job has {} rank{}; "
                   "device_num must be the number of ranks the step runs on (leave it 0 for the "
                   "world size, or launch {} ranks: cleave-run --worker_num {}, mpirun -n {})",
                   step, parallel_mode_name(s.mode), s.device_num, world, world == 1 ? "" : "s",
                   s.device_num, s.device_num, s.device_num);
  CLEAVE_CHECK_ARG(c.global_rank < 0 || c.global_rank == s.rank,
                   "{}: global_rank is {}, but this process is rank {} of the job; leave "
                   "global_rank at -1 to use the job's rank",
                   step, c.global_rank, s.rank);
  const std::string kind = dataset_strategy_kind(c);
  if (kind == "full_batch") {
    s.options.dataset = parallel::DatasetSplit::kFullBatch;
  } else if (kind.empty()) {
    s.options.dataset = parallel::DatasetSplit::kStrategy;
    s.options.dataset_strategy = std::get<ir::Strategy>(c.dataset_strategy);
  }
  s.options.device_num = s.device_num;
  return s;
}

// The metas the step is traced with: micro-batch slices, or the global batch of a step planned
// over several devices whose ranks each read their slice of it.
std::vector<ir::TensorMeta> traced_inputs(const StepProgram& p, const Setup& s) {
  std::vector<ir::TensorMeta> metas;
  for (const StepProgram::Input& in : p.inputs) {
    ir::TensorMeta m = in.meta;
    if (s.micro_batches > 1) {
      CLEAVE_CHECK_ARG(m.shape.rank() >= 1 && m.shape[0] % s.micro_batches == 0,
                       "{}: {} has shape {}; with pipeline_micro_batches = {} its batch dimension "
                       "must be divisible by {} (set a batch size that is a multiple of the "
                       "micro-batch count)",
                       p.name, in.name, m.shape.to_string(), s.micro_batches, s.micro_batches);
      m.shape[0] /= s.micro_batches;
    }
    if (s.sharded() && s.options.dataset == parallel::DatasetSplit::kDataParallel &&
        m.shape.rank() >= 1) {
      m.shape[0] *= s.device_num;  // this rank's batch is one slice of the global batch
    }
    metas.push_back(m);
  }
  return metas;
}

// Rank 0 says where propagation left layouts that disagree (NOTE [Sharding propagation]).
void report_propagation(const parallel::PropagationReport& r, int64_t rank) {
  if (rank != 0 || r.inconsistencies.empty()) return;
  std::string lines;
  for (const std::string& line : r.inconsistencies) lines += "\n  " + line;
  std::fprintf(stderr,
               "cleave: sharding propagation: %zu edge%s between operators need a "
               "redistribution (inserted; see the step_parallel_begin dump):%s\n",
               r.inconsistencies.size(), r.inconsistencies.size() == 1 ? "" : "s", lines.c_str());
}

std::string rank_folder(const ir::Graph& g, int64_t rank) {
  return fmt::format("{}_rank{}", g.name, rank);
}

// NOTE [Gradient buckets]
// DATA_PARALLEL all-reduces the gradients in buckets. The gradients are taken in the order the
// backward pass computes them (the graph order of the ops producing them: the last layer's
// first) and cut into runs of one dtype of at most bucket_cap_mb each; the first bucket is
// capped at 1 MB so that communication starts early (PyTorch DDP's first bucket does the same),
// and when there is more than that in all, the last gradients computed (the first layers') get a
// last bucket of at most 1 MB and an eighth of all: its AllReduce starts only when the backward
// pass ends, so only the other buckets' updates can hide it (NOTE [Updates in bucket order]).
// Measured (bench/run.sh dp, 2 processes on 2 cores): ResNet-50 blocked 3.6 ms per step on its
// buckets with a last bucket of ~19 MB, 0.2 ms with one of 1 MB; resnet_small (1.95 MB in all)
// 0.1 ms with two buckets, 0.03-0.07 ms with a last one of 0.24 MB.
// A bucket of several gradients is one AllReduce of their flat concatenation, sliced and reshaped
// back afterwards. hoist_collectives() then moves each bucket's Reshape/Concat/AllReduce to right
// after the last op its gradients need, so the AllReduce runs on the group's communication thread
// while the rest of the backward pass computes (NOTE [Collectives in flight] in
// cleave/runtime/executor.h), and is waited for where its slices are first read, before the
// update. Each element's sum is the same reduction of the same values as without buckets: the
// inproc engine sums in rank order, so the results are bit-identical; Gloo's ring sums each
// element in an order that depends on where it falls in the buffer, which for 2 ranks (a + b ==
// b + a) changes nothing and for more ranks may change the last bit. bucket_cap_mb = 0 gives one
// AllReduce per gradient.
constexpr double kFirstBucketBytes = 1 << 20;
constexpr double kLastBucketBytes = 1 << 20;

void all_reduce_gradients(ir::Tracer& tracer, std::vector<Tensor>& grads, bool mean,
                          double cap_mb) {
  const ops::AllReduceOptions options{.op = mean ? comm::ReduceOp::kMean : comm::ReduceOp::kSum};
  std::vector<size_t> order;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tracer.value_of(grads[a]).node < tracer.value_of(grads[b]).node;
  });
  if (cap_mb <= 0) {
    for (size_t i : order) grads[i] = ops::all_reduce(grads[i], options);
    return;
  }
  const double cap = cap_mb * (1 << 20);
  std::vector<size_t> bucket;
  double bytes = 0;
  int buckets = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    if (bucket.size() == 1) {
      grads[bucket[0]] = ops::all_reduce(grads[bucket[0]], options);
    } else {
      std::vector<Tensor> flat;
      for (size_t i : bucket) flat.push_back(ops::reshape(grads[i], Shape{grads[i].numel()}));
      const Tensor sum = ops::all_reduce(ops::concat(flat, 0), options);
      int64_t offset = 0;
      for (size_t i : bucket) {
        const Shape shape = grads[i].shape();
        grads[i] = ops::reshape(ops::slice(sum, {offset}, {shape.numel()}), shape);
        offset += shape.numel();
      }
    }
    bucket.clear();
    bytes = 0;
    ++buckets;
  };
  // The last gradients computed (at most kLastBucketBytes and an eighth of all, when there is
  // more than a first bucket's worth in all) get a bucket of their own: nothing but the updates of
  // the other buckets can hide its AllReduce, so the smaller the better. (Gradients that fit one
  // first bucket stay one: for LeNet's 0.24 MB a second AllReduce cost more than it hid.)
  size_t last_begin = order.size();
  double total = 0, last_bytes = 0;
  for (size_t i : order) total += static_cast<double>(grads[i].nbytes());
  if (total > std::min(cap, kFirstBucketBytes)) {
    const double last_cap = std::min({cap, kLastBucketBytes, total / 8});
    while (last_begin > 1) {
      const double size = static_cast<double>(grads[order[last_begin - 1]].nbytes());
      if (last_begin < order.size() && last_bytes + size > last_cap) break;
      last_bytes += size;
      --last_begin;
    }
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const auto size = static_cast<double>(grads[i].nbytes());
    const double limit = buckets == 0 ? std::min(cap, kFirstBucketBytes) : cap;
    if (!bucket.empty() &&
        (k == last_begin || bytes + size > limit || grads[bucket[0]].dtype() != grads[i].dtype())) {
      flush();
    }
    bucket.push_back(i);
    bytes += size;
  }
  flush();
}

// Moves the communication ops among nodes [begin, end), and the ops there that only feed them,
// to right after the last node they read (NOTE [Gradient buckets]); everything else keeps its
// place. Returns the new index of the first node of [begin, end) that stayed (the start of the
// step's tail: the buckets' slices, then the optimizer), or the node count when none stayed.
int hoist_collectives(ir::Graph& g, int begin, int end) {
  const int count = static_cast<int>(g.nodes.size());
  std::vector<std::vector<int>> consumers(static_cast<size_t>(count));
  for (int j = 0; j < count; ++j) {
    for (const ir::ValueRef& v : g.nodes[static_cast<size_t>(j)].inputs) {
      consumers[static_cast<size_t>(v.node)].push_back(j);
    }
  }
  std::vector<bool> returned(static_cast<size_t>(count), false);
  for (const ir::ValueRef& v : g.outputs) returned[static_cast<size_t>(v.node)] = true;
  std::vector<bool> movable(static_cast<size_t>(count), false);
  for (int i = end - 1; i >= begin; --i) {
    const ir::Node& n = g.nodes[static_cast<size_t>(i)];
    if (!n.is_op() || n.op->mutates_inputs || returned[static_cast<size_t>(i)]) continue;
    if (n.op->communicates) {
      movable[static_cast<size_t>(i)] = true;
      continue;
    }
    const std::vector<int>& users = consumers[static_cast<size_t>(i)];
    movable[static_cast<size_t>(i)] =
        !users.empty() && std::all_of(users.begin(), users.end(),
                                      [&](int u) { return movable[static_cast<size_t>(u)]; });
  }
  // anchor: the node a movable node goes right after.
  std::vector<int> anchor(static_cast<size_t>(count), -1);
  std::vector<std::vector<int>> after(static_cast<size_t>(count));
  std::vector<int> order;
  for (int i = begin; i < end; ++i) {
    if (!movable[static_cast<size_t>(i)]) continue;
    int a = -1;
    for (const ir::ValueRef& v : g.nodes[static_cast<size_t>(i)].inputs) {
      a = std::max(
          a, movable[static_cast<size_t>(v.node)] ? anchor[static_cast<size_t>(v.node)] : v.node);
    }
    anchor[static_cast<size_t>(i)] = a;
    if (a < 0) {
      order.push_back(i);
    } else {
      after[static_cast<size_t>(a)].push_back(i);
    }
  }
  std::function<void(int)> emit = [&](int i) {
    order.push_back(i);
    for (int m : after[static_cast<size_t>(i)]) emit(m);
  };
  int tail = count;
  for (int i = 0; i < count; ++i) {
    if (movable[static_cast<size_t>(i)]) continue;
    if (i >= begin && tail == count) tail = static_cast<int>(order.size());
    emit(i);
  }
  ir::reorder_nodes(g, order);
  return tail;
}

// NOTE [Updates in bucket order]
// After hoisting, the step ends with a tail that reads the buckets' AllReduces: each bucket's
// slices and reshapes, then the optimizer's updates in the order of the parameters — the first
// layer's first, whose gradient is in the bucket issued last. Run in that order, the first update
// would wait for the last AllReduce, and so every update for every bucket. This pass orders the
// tail by the latest communication op each node depends on (in issue order), then by trace order,
// so the slices and updates of the first bucket run while the later buckets are still in flight,
// and each update waits only for its own bucket. Only the order changes, never what a node
// computes: data dependences are kept, and so are the anti-dependences of in-place updates — a
// node that reads a tensor (or a view of it) which an in-place op writes (OpDef::mutated_inputs)
// stays on the same side of that op as in the trace (BatchNorm's moving statistics, a shared
// counter); read-only inputs that every update shares (the learning rate) order nothing.
// Communication ops in the tail keep their relative order (their own index is their key), which is
// the same on every rank.
void order_tail_by_collectives(ir::Graph& g, int tail) {
  const int count = static_cast<int>(g.nodes.size());
  if (tail >= count) return;
  const auto at = [](int i) { return static_cast<size_t>(i); };
  // latest[i]: the index of the last communication op node i depends on (-1: none); base[i]: the
  // node whose storage node i's output shares (itself unless a view).
  std::vector<int> latest(at(count), -1), base(at(count));
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[at(i)];
    int l = -1;
    for (const ir::ValueRef& v : n.inputs) l = std::max(l, latest[at(v.node)]);
    if (n.is_op() && n.op->communicates) l = i;
    latest[at(i)] = l;
    base[at(i)] =
        n.is_op() && n.op->output_is_view && !n.inputs.empty() ? base[at(n.inputs[0].node)] : i;
  }
  std::vector<std::vector<int>> next(at(count));
  std::vector<int> waiting(at(count), 0);
  const auto edge = [&](int a, int b) {
    next[at(a)].push_back(b);
    ++waiting[at(b)];
  };
  std::map<int, std::vector<int>> readers;  // base -> tail nodes reading it, in trace order
  for (int i = tail; i < count; ++i) {
    for (const ir::ValueRef& v : g.nodes[at(i)].inputs) {
      if (v.node >= tail) edge(v.node, i);
      std::vector<int>& r = readers[base[at(v.node)]];
      if (r.empty() || r.back() != i) r.push_back(i);
    }
  }
  for (int m = tail; m < count; ++m) {
    const ir::Node& n = g.nodes[at(m)];
    if (!n.is_op() || !n.op->mutates_inputs) continue;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::vector<int>& written = n.op->mutated_inputs;
      if (!written.empty() &&
          std::find(written.begin(), written.end(), static_cast<int>(k)) == written.end()) {
        continue;
      }
      for (int u : readers[base[at(n.inputs[k].node)]]) {
        if (u < m) edge(u, m);
        if (u > m) edge(m, u);
      }
    }
  }
  using Key = std::pair<int, int>;  // (latest communication op, trace index)
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  for (int i = tail; i < count; ++i) {
    if (waiting[at(i)] == 0) ready.emplace(latest[at(i)], i);
  }
  std::vector<int> order(at(tail));
  for (int i = 0; i < tail; ++i) order[at(i)] = i;
  while (!ready.empty()) {
    const int i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (int j : next[at(i)]) {
      if (--waiting[at(j)] == 0) ready.emplace(latest[at(j)], j);
    }
  }
  ir::reorder_nodes(g, order);  // checks that every node was placed after its inputs
}

}  // namespace

CompiledStep::CompiledStep(std::unique_ptr<Executor> executor, int micro_batches, size_t num_inputs)
    : executor_(std::move(executor)), micro_batches_(micro_batches), num_inputs_(num_inputs) {}

std::vector<Tensor> CompiledStep::run(const std::vector<Tensor>& inputs) {
  CLEAVE_CHECK_ARG(inputs.size() == num_inputs_, "graph '{}': {} inputs given; expected {}",
                   executor_->graph().name, inputs.size(), num_inputs_);
  if (micro_batches_ == 1) return executor_->run(inputs);
  // Micro-batch-major: (data_0, label_0, data_1, label_1, ...) (NOTE [Micro-batches]).
  std::vector<Tensor> feed;
  for (int k = 0; k < micro_batches_; ++k) {
    for (const Tensor& t : inputs) {
      CLEAVE_CHECK_ARG(t.defined() && t.rank() >= 1 && t.shape()[0] % micro_batches_ == 0,
                       "graph '{}': an input of shape {} cannot be cut into {} micro-batches",
                       executor_->graph().name,
                       t.defined() ? t.shape().to_string() : std::string("(undefined)"),
                       micro_batches_);
      const int64_t rows = t.shape()[0] / micro_batches_;
      feed.push_back(t.narrow_rows(k * rows, rows));
    }
  }
  return executor_->run(feed);
}

std::vector<bool> CompiledStep::inputs_read() const {
  std::vector<bool> read(num_inputs_, false);
  const std::vector<bool>& per_input = executor_->inputs_read();
  for (size_t k = 0; k < per_input.size(); ++k) {
    read[k % num_inputs_] = read[k % num_inputs_] || per_input[k];
  }
  return read;
}

std::unique_ptr<CompiledStep> compile_step(const StepProgram& p) {
  const bool training = p.update != nullptr;
  const Setup s = resolve_setup(p.name, training);
  const AutoParallelContext& apc = get_auto_parallel_context();
  ir::Graph graph;
  graph.name = fmt::format("{}_{}", p.name, g_graph_counter++);

  // 01: the forward with global shapes.
  const std::vector<ir::TensorMeta> metas = traced_inputs(p, s);
  {
    ir::Tracer tracer(graph);
    std::vector<Tensor> inputs;
    for (size_t k = 0; k < metas.size(); ++k) {
      inputs.push_back(tracer.add_input(metas[k], p.inputs[k].name));
    }
    for (const auto& [name, t] : p.parameters) {
      const std::optional<ParameterShard> shard = parameter_shard(t);
      if (shard) {
        tracer.add_parameter(t, name, shard->global);
      } else {
        tracer.add_parameter(t, name);
      }
    }
    const std::vector<Tensor> outputs = p.forward(inputs);
    if (training) {
      CLEAVE_CHECK_ARG(!outputs.empty() && outputs[0].is_symbolic() && outputs[0].numel() == 1,
                       "{}: the network returned {}; expected a one-element loss computed from its "
                       "inputs",
                       p.name,
                       outputs.empty() ? std::string("nothing")
                                       : fmt::format("{} {}", dtype_name(outputs[0].dtype()),
                                                     outputs[0].shape().to_string()));
    }
    for (const Tensor& t : outputs) graph.outputs.push_back(tracer.value_of(t));
  }
  dump_stage(graph, 1, "trace");

  // 02-03: the step-parallel rewrite.
  double seed = 1.0;
  std::map<const TensorImpl*, parallel::Layout> layouts;  // sharded tensors of this step
  if (s.sharded()) {
    CLEAVE_CHECK_ARG(!parallel::has_placement(graph),
                     "{}: the network has operators placed with Cell::place / Primitive::place, "
                     "which cannot be combined with parallel_mode {} (as in MindSpore); use "
                     "STAND_ALONE for a placed network",
                     p.name, parallel_mode_name(s.mode));
    if (!apc.strategy_ckpt_load_file.empty()) {
      parallel::load_strategy_file(apc.strategy_ckpt_load_file, graph, s.device_num);
    }
    if (s.mode == AUTO_PARALLEL)
      report_propagation(parallel::propagate_strategies(graph, s.options), s.rank);
    const parallel::ParallelPlan plan = parallel::plan_step_parallel(graph, s.options);
    dump_stage(graph, 2, "step_parallel_begin", parallel::redistribution_notes(graph, plan));
    if (!apc.strategy_ckpt_save_file.empty()) {
      parallel::save_strategy_file(apc.strategy_ckpt_save_file, graph, plan);
    }
    parallel::LocalStep local = parallel::materialize(graph, plan, s.rank);
    for (const auto& [node, layout] : local.parameters) {
      const ir::Node& n = local.graph.nodes[static_cast<size_t>(node)];
      std::vector<Tensor> like;
      for (size_t i = 0; i < p.wrt.size() && i < p.wrt_like.size(); ++i) {
        if (p.wrt[i].impl() == n.value.impl()) like = p.wrt_like[i];
      }
      shard_parameter(n.value, n.name, layout, s.rank, like);
      layouts.emplace(n.value.impl(), layout);
    }
    graph = std::move(local.graph);
    graph.name = rank_folder(graph, s.rank);
    seed = 1.0 / static_cast<double>(local.output_replicas);
    dump_stage(graph, 3, "step_parallel_end");
  } else if (s.mode == DATA_PARALLEL && apc.parameter_broadcast) {
    std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
    if (world != nullptr && world->size() > 1) {
      for (const auto& [name, t] : p.parameters) world->broadcast(t, 0);
    }
  }

  // 05-06: backward, gradient reduction, optimizer.
  int step_begin = -1, mirrors = -1;
  {
    ir::Tracer tracer(graph);
    if (training) {
      const Tensor loss = tracer.symbolic(graph.outputs[0]);
      std::vector<Tensor> grads = autodiff::graph_grad(loss, p.wrt, seed);
      dump_stage(graph, 5, "autodiff");
      mirrors = static_cast<int>(graph.nodes.size());
      const bool mean = apc.gradients_mean || apc.mirror_mean;
      if (s.sharded()) {
        for (size_t i = 0; i < grads.size(); ++i) {
          if (!grads[i].defined()) continue;
          auto it = layouts.find(p.wrt[i].impl());
          if (it != layouts.end()) {
            grads[i] =
                parallel::all_reduce_over(grads[i], parallel::replica_ranks(it->second, s.rank));
          }
        }
      } else if (s.mode == DATA_PARALLEL && s.device_num > 1) {
        all_reduce_gradients(tracer, grads, mean, apc.bucket_cap_mb);
      }
      for (size_t j = static_cast<size_t>(mirrors); j < graph.nodes.size(); ++j) {
        graph.nodes[j].name = "gradients/mirror_op";
        graph.nodes[j].scope = "Default/gradients";
      }
      step_begin = static_cast<int>(graph.nodes.size());
      p.update(grads);
      dump_stage(graph, 6, "optimizer");
    }
    tracer.finish();
  }
  if (s.mode == DATA_PARALLEL && step_begin >= 0 && s.micro_batches == 1 &&
      !parallel::has_placement(graph)) {
    order_tail_by_collectives(graph, hoist_collectives(graph, mirrors, step_begin));
  }
  std::unique_ptr<Executor> executor = compile_distributed(
      std::move(graph), {.step_begin = step_begin, .micro_batches = s.micro_batches});
  return std::make_unique<CompiledStep>(std::move(executor), s.micro_batches, p.inputs.size());
}

}  // namespace cleave::runtime
