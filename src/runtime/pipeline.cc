// The compile pipeline (NOTE [Compile pipeline] in cleave/runtime/pipeline.h): the options, the
// list of passes and the loop that runs it.
#include "cleave/runtime/pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <functional>

#include "cleave/autodiff/graph_grad.h"
#include "cleave/cluster/cluster.h"
#include "cleave/comm/group_registry.h"
#include "cleave/core/threads.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/passes.h"
#include "cleave/ir/registry.h"
#include "cleave/ops/elementwise.h"
#include "cleave/ops/shape.h"
#include "cleave/parallel/batch_split.h"
#include "cleave/parallel/calibrated_cost_model.h"
#include "cleave/parallel/data_parallel.h"
#include "cleave/parallel/partition.h"
#include "cleave/parallel/propagation.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/search.h"
#include "cleave/parallel/step_parallel.h"
#include "cleave/parallel/strategy_file.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/sharded_parameters.h"
#include "runtime/dump.h"

namespace cleave::runtime {
namespace {

std::atomic<int> g_graph_counter{0};

// The metas the step is traced with: micro-batch slices, or the global batch of a step planned
// over several devices whose ranks each read their slice of it.
std::vector<ir::TensorMeta> traced_inputs(const StepProgram& p, const CompileOptions& o) {
  std::vector<ir::TensorMeta> metas;
  for (const StepProgram::Input& in : p.inputs) {
    ir::TensorMeta m = in.meta;
    if (o.micro_batches > 1) {
      CLEAVE_CHECK_ARG(m.shape.rank() >= 1 && m.shape[0] % o.micro_batches == 0,
                       "{}: {} has shape {}; with pipeline_micro_batches = {} its batch dimension "
                       "must be divisible by {} (set a batch size that is a multiple of the "
                       "micro-batch count)",
                       p.name, in.name, m.shape.to_string(), o.micro_batches, o.micro_batches);
      m.shape[0] /= o.micro_batches;
    }
    if (o.sharded() && o.step_parallel.dataset == parallel::DatasetSplit::kDataParallel &&
        m.shape.rank() >= 1) {
      m.shape[0] *= o.device_num;  // this rank's batch is one slice of the global batch
    }
    metas.push_back(m);
  }
  return metas;
}

bool placed(const CompileState& s) {
  return s.options.world_size > 1 && parallel::has_placement(s.graph);
}

bool sharded(const CompileState& s) { return s.options.sharded(); }

// NOTE [Parallel optimizer] (cleave/parallel/parallel_optimizer.h): on for a step of a parallel
// mode over several devices.
bool parallel_optimizer(const CompileState& s) {
  return s.options.parallel_optimizer && s.options.device_num > 1 &&
         (s.options.mode == DATA_PARALLEL || sharded(s));
}

// The shape a parameter has in the model (one a step sharded earlier holds a slice of it).
Shape global_shape(const Tensor& param) {
  if (const std::optional<ParameterShard> shard = parameter_shard(param)) {
    return shard->global.shape;
  }
  return param.shape();
}

// How the parallel optimizer splits `param`, laid out as `layout` by the step's plan (every
// parameter is replicated in DATA_PARALLEL): only trainable parameters are split, the same way
// whichever step (training or evaluation) is compiled first.
parallel::OptimizerShard optimizer_shard_of(const CompileState& s, const Tensor& param,
                                            const parallel::Layout* layout) {
  const parallel::Layout plan_layout =
      layout != nullptr
          ? *layout
          : parallel::Layout::replicated({s.options.device_num}, global_shape(param).rank());
  if (!param.requires_grad()) return {.layout = plan_layout};
  return parallel::optimizer_shard(plan_layout, global_shape(param), param.dtype(),
                                   s.options.optimizer_shard);
}

// ---- the passes ----

void check_placement_and_mode(const CompileState& s) {
  CLEAVE_CHECK_ARG(!s.options.sharded() || !parallel::has_placement(s.graph),
                   "{}: the network has operators placed with Cell::place / Primitive::place, "
                   "which cannot be combined with parallel_mode {} (as in MindSpore); use "
                   "STAND_ALONE for a placed network",
                   s.program.name, parallel_mode_name(s.options.mode));
}

// 01: the forward with global shapes.
void trace(CompileState& s) {
  const StepProgram& p = s.program;
  if (p.traced != nullptr) {
    CLEAVE_CHECK_ARG(!p.traced->nodes.empty(),
                     "{}: the traced graph is empty (a program with a traced graph compiles once: "
                     "the trace pass takes the graph)",
                     p.name);
    s.graph = std::move(*p.traced);
    p.traced->nodes.clear();
    check_placement_and_mode(s);
    return;
  }
  if (s.graph.name == ir::Graph{}.name) {  // a retrace keeps the name (NOTE [Threads split ...])
    s.graph.name = fmt::format("{}_{}", p.name, g_graph_counter++);
  }
  const std::vector<ir::TensorMeta> metas = traced_inputs(p, s.options);
  ir::Tracer tracer(s.graph);
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < metas.size(); ++k) {
    inputs.push_back(tracer.add_input(metas[k], p.inputs[k].name));
  }
  for (const auto& [name, t] : p.parameters) {
    if (const std::optional<ParameterShard> shard = parameter_shard(t)) {
      tracer.add_parameter(t, name, shard->global);
    } else {
      tracer.add_parameter(t, name);
    }
  }
  const std::vector<Tensor> outputs = p.forward(inputs);
  if (p.training()) {
    CLEAVE_CHECK_ARG(!outputs.empty() && outputs[0].is_symbolic() && outputs[0].numel() == 1,
                     "{}: the network returned {}; expected a one-element loss computed from its "
                     "inputs",
                     p.name,
                     outputs.empty() ? std::string("nothing")
                                     : fmt::format("{} {}", dtype_name(outputs[0].dtype()),
                                                   outputs[0].shape().to_string()));
  }
  for (const Tensor& t : outputs) s.graph.outputs.push_back(tracer.value_of(t));
  check_placement_and_mode(s);
}

void load_strategy_file(CompileState& s) {
  parallel::load_strategy_file(s.options.strategy_load_file, s.graph, s.options.device_num);
}

// NOTE [Sharding propagation]: rank 0 says where layouts disagree.
void propagate_strategies(CompileState& s) {
  const parallel::PropagationReport r =
      parallel::propagate_strategies(s.graph, s.options.step_parallel);
  if (r.inconsistencies.empty()) return;
  std::string lines;
  for (const std::string& line : r.inconsistencies) lines += "\n  " + line;
  s.messages.push_back(fmt::format(
      "sharding propagation: {} edge{} between operators need a redistribution (inserted; see "
      "the step_parallel_begin dump):{}",
      r.inconsistencies.size(), r.inconsistencies.size() == 1 ? "" : "s", lines));
}

// AUTO_PARALLEL's search, as search_mode names it: sharding propagation, the dynamic
// programming or the recursive programming (NOTE [Dynamic programming search], [Recursive
// programming search]), of which rank 0 prints a summary line.
void search_strategies(CompileState& s) {
  const std::string& mode = s.options.search_mode;
  if (mode == "dynamic_programming" || mode == "recursive_programming") {
    const AlgoParameters& algo = s.options.algo;
    const parallel::SearchOptions o{
        .step_parallel = s.options.step_parallel,
        .cost_model = &parallel::cost_model_for_profile(
            s.options.cost_model_profile, {.compute_slowdown = s.options.compute_slowdown}),
        .beta = s.options.cost_model.costmodel_beta,
        .memory_capacity_bytes = s.options.cost_model.device_memory_capacity,
        .training = s.program.training(),
        .fully_use_devices = algo.fully_use_devices,
        .elementwise_op_strategy_follow = algo.elementwise_op_strategy_follow,
        .enable_algo_approxi = algo.enable_algo_approxi,
        .algo_approxi_epsilon = algo.algo_approxi_epsilon,
        .tensor_slice_align_enable = algo.tensor_slice_align_enable,
        .tensor_slice_align_size = algo.tensor_slice_align_size,
        .objective = static_cast<parallel::SearchObjective>(s.options.search_level)};
    std::string summary = mode == "dynamic_programming"
                              ? parallel::search_strategies(s.graph, o).summary()
                              : parallel::search_strategies_recursive(s.graph, o).summary();
    if (s.options.compute_slowdown > 1) {
      summary += fmt::format(
          " (computation costed {:.3g}x: the job's {} ranks share this host's {} cores; NOTE "
          "[Ranks sharing cores])",
          s.options.compute_slowdown, s.options.world_size, cores_to_share());
    }
    s.messages.push_back(std::move(summary));
    return;
  }
  CLEAVE_CHECK_ARG(mode.empty() || mode == "sharding_propagation",
                   "{}: search_mode is \"{}\"; expected \"sharding_propagation\", "
                   "\"dynamic_programming\" or \"recursive_programming\"",
                   s.program.name, mode);
  propagate_strategies(s);
}

void step_parallel_begin(CompileState& s) {
  s.parallel_plan = parallel::plan_step_parallel(s.graph, s.options.step_parallel);
  s.dump_notes = parallel::redistribution_notes(s.graph, *s.parallel_plan);
}

// The plan's strategies and layouts; the parallel optimizer's layouts for the parameters it
// splits (which are all a DATA_PARALLEL step's file holds).
void save_strategy_file(CompileState& s) {
  std::map<std::string, parallel::Layout> split;
  if (parallel_optimizer(s)) {
    for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
      const ir::Node& n = s.graph.nodes[i];
      if (n.kind != ir::NodeKind::kParameter) continue;
      const parallel::Layout* layout = s.parallel_plan && !s.parallel_plan->layouts[i].empty()
                                           ? &s.parallel_plan->layouts[i][0]
                                           : nullptr;
      const parallel::OptimizerShard shard = optimizer_shard_of(s, n.value, layout);
      if (shard.split()) split.emplace(n.name, shard.layout);
    }
  }
  const parallel::ParallelPlan data_parallel{
      .device_num = s.options.device_num,
      .layouts = std::vector<std::vector<parallel::Layout>>(s.graph.nodes.size())};
  parallel::save_strategy_file(s.options.strategy_save_file, s.graph,
                               s.parallel_plan ? *s.parallel_plan : data_parallel, split);
}

// This rank's forward; its parameters are sliced by load() (NOTE [Sharded parameters]) and
// traced with their slices' shapes meanwhile.
void step_parallel_end(CompileState& s) {
  const StepProgram& p = s.program;
  parallel::LocalStep local = parallel::materialize(s.graph, *s.parallel_plan, s.options.rank);
  for (const auto& [node, layout] : local.parameters) {
    const ir::Node& n = local.graph.nodes[static_cast<size_t>(node)];
    std::vector<Tensor> like;
    for (size_t i = 0; i < p.wrt.size() && i < p.wrt_like.size(); ++i) {
      if (p.wrt[i].impl() == n.value.impl()) like = p.wrt_like[i];
    }
    s.parameter_slices.push_back({n.value, n.name, layout, like});
    s.layouts.emplace(n.value.impl(), layout);
  }
  s.graph = std::move(local.graph);
  s.graph.name = fmt::format("{}_rank{}", s.graph.name, s.options.rank);
  s.rank_graph = true;
  s.loss_seed = 1.0 / static_cast<double>(local.output_replicas);
}

// NOTE [Parallel optimizer]: each split parameter holds its slice of L' and is gathered back
// (AllGather over its shard group) where the forward reads it; its gradient then comes from the
// AllGather's gradient, a ReduceScatter.
void split_parameters(CompileState& s) {
  ir::Graph& g = s.graph;
  const int count = static_cast<int>(g.nodes.size());
  std::vector<std::pair<int, std::vector<int64_t>>> gathers;  // parameter node, shard group
  for (int i = 0; i < count; ++i) {
    ir::Node& n = g.nodes[static_cast<size_t>(i)];
    if (n.kind != ir::NodeKind::kParameter) continue;
    const Tensor param = n.value;
    const auto planned = s.layouts.find(param.impl());
    const parallel::OptimizerShard shard =
        optimizer_shard_of(s, param, planned == s.layouts.end() ? nullptr : &planned->second);
    if (!shard.not_split.empty()) {
      s.messages.push_back(fmt::format("parallel optimizer: parameter '{}' {} stays replicated: {}",
                                       n.name, global_shape(param).to_string(), shard.not_split));
    }
    if (!shard.split()) continue;
    n.outputs[0].shape = shard.layout.slice_shape(global_shape(param));
    gathers.emplace_back(i, parallel::optimizer_shard_ranks(shard, s.options.rank));
    s.optimizer_shards.emplace(param.impl(), shard);
    if (planned != s.layouts.end()) planned->second = shard.layout;
    auto slice =
        std::find_if(s.parameter_slices.begin(), s.parameter_slices.end(),
                     [&](const ParameterSlice& p) { return p.tensor.impl() == param.impl(); });
    if (slice == s.parameter_slices.end()) {
      std::vector<Tensor> like;
      for (size_t k = 0; k < s.program.wrt.size() && k < s.program.wrt_like.size(); ++k) {
        if (s.program.wrt[k].impl() == param.impl()) like = s.program.wrt_like[k];
      }
      s.parameter_slices.push_back({param, n.name, shard.layout, like});
    } else {
      slice->layout = shard.layout;
    }
  }
  if (gathers.empty()) return;
  // NOTE [Parallel optimizer buckets]
  // The split parameters are gathered in buckets, as DATA_PARALLEL all-reduces its gradients (NOTE
  // [Gradient buckets] in cleave/parallel/data_parallel.h): consecutive parameters (in graph
  // order, the order the forward first reads them) of one dtype and one shard group, at most
  // bucket_cap_mb gathered per bucket and at most 1 MiB in the first, so that the forward
  // can start while the rest is gathered. A bucket's slices are flattened and joined, one
  // AllGather over the group gives every rank's join, one after another, and each parameter is
  // its columns of that (group size, bucket) table (Split with size_splits), reshaped: the rows of
  // each rank's slice in rank order, the plan's slice of it (the whole tensor in DATA_PARALLEL).
  // The backward runs the same ops in reverse,
  // so autodiff gives one ReduceScatter per bucket where there was one per parameter. Every
  // element is gathered, and its gradient summed, as by its own collectives: training is
  // bit-identical. bucket_cap_mb = 0: one AllGather per parameter.
  const double cap = s.options.bucket_cap_mb * (1 << 20);
  const auto gathered_bytes = [&](size_t i) {  // of gathers[i]'s parameter, once gathered
    const ir::Node& n = g.nodes[static_cast<size_t>(gathers[i].first)];
    return static_cast<double>(n.outputs[0].shape.numel() * dtype_size(n.outputs[0].dtype)) *
           static_cast<double>(gathers[i].second.size());
  };
  std::map<int, int> gathered;                    // parameter node -> the node giving it whole
  std::vector<std::vector<int>> bucket_params;    // per bucket, its parameter nodes
  std::vector<std::pair<int, int>> bucket_nodes;  // per bucket, the range of nodes it traced
  {
    ir::Tracer tracer(g);
    for (size_t b = 0; b < gathers.size();) {
      const std::vector<int64_t>& ranks = gathers[b].second;
      const DType dtype = g.nodes[static_cast<size_t>(gathers[b].first)].value.dtype();
      const double limit = bucket_params.empty() ? std::min(cap, double{1 << 20}) : cap;
      size_t e = b + 1;
      for (double bytes = gathered_bytes(b);
           e < gathers.size() && gathers[e].second == ranks &&
           g.nodes[static_cast<size_t>(gathers[e].first)].value.dtype() == dtype &&
           bytes + gathered_bytes(e) <= limit;
           ++e) {
        bytes += gathered_bytes(e);
      }
      const int first_node = static_cast<int>(g.nodes.size());
      std::vector<int>& params = bucket_params.emplace_back();
      if (e == b + 1) {
        const int node = gathers[b].first;
        params.push_back(node);
        const Tensor whole = parallel::all_gather_over(tracer.symbolic({node, 0}), ranks, 0);
        gathered[node] = tracer.value_of(whole).node;
      } else {
        const auto k = static_cast<int64_t>(ranks.size());
        std::vector<Tensor> flat;
        std::vector<int64_t> sizes;
        std::vector<Shape> gathered_shapes;  // the plan's slice: k of L' stacked on dimension 0
        for (size_t i = b; i < e; ++i) {
          const int node = gathers[i].first;
          params.push_back(node);
          const Tensor slice = tracer.symbolic({node, 0});
          sizes.push_back(slice.numel());
          flat.push_back(ops::reshape(slice, Shape({slice.numel()})));
          Shape shape = slice.shape();
          shape[0] *= k;
          gathered_shapes.push_back(shape);
        }
        const Tensor joined = ops::concat(flat, 0);
        const Tensor all = parallel::all_gather_over(joined, ranks, 0);
        const std::vector<Tensor> columns =
            ops::split(ops::reshape(all, Shape({k, joined.numel()})), 1, sizes);
        for (size_t i = b; i < e; ++i) {
          const Tensor whole = ops::reshape(columns[i - b], gathered_shapes[i - b]);
          gathered[gathers[i].first] = tracer.value_of(whole).node;
        }
      }
      bucket_nodes.emplace_back(first_node, static_cast<int>(g.nodes.size()));
      b = e;
    }
  }
  for (int j = 0; j < count; ++j) {
    for (ir::ValueRef& v : g.nodes[static_cast<size_t>(j)].inputs) {
      if (const auto it = gathered.find(v.node); it != gathered.end()) v.node = it->second;
    }
  }
  for (ir::ValueRef& v : g.outputs) {
    if (const auto it = gathered.find(v.node); it != gathered.end()) v.node = it->second;
  }
  // Each bucket's parameters (which read nothing) and then its nodes at the place of its first
  // parameter, before anything reads them.
  std::map<int, size_t> bucket_of;  // parameter node -> its bucket
  for (size_t b = 0; b < bucket_params.size(); ++b) {
    for (int node : bucket_params[b]) bucket_of[node] = b;
  }
  std::vector<int> order;
  for (int i = 0; i < count; ++i) {
    const auto it = bucket_of.find(i);
    if (it == bucket_of.end()) {
      order.push_back(i);
      continue;
    }
    const std::vector<int>& params = bucket_params[it->second];
    if (params.front() != i) continue;  // placed with its bucket's first
    order.insert(order.end(), params.begin(), params.end());
    const auto [begin, end] = bucket_nodes[it->second];
    for (int n = begin; n < end; ++n) {
      ir::Node& node = g.nodes[static_cast<size_t>(n)];
      if (node.is_op() && node.op->name == "AllGather") {
        node.name = params.size() == 1 ? fmt::format("{}/optimizer_all_gather",
                                                     g.nodes[static_cast<size_t>(params[0])].name)
                                       : fmt::format("optimizer_all_gather_bucket{}", it->second);
        s.optimizer_gathers.insert(node.name);
      }
      order.push_back(n);
    }
  }
  CLEAVE_ASSERT(order.size() == g.nodes.size(), "split_parameters: {} nodes ordered of {}",
                order.size(), g.nodes.size());
  ir::reorder_nodes(g, order);
}

void autodiff(CompileState& s) {
  s.backward_begin = static_cast<int>(s.graph.nodes.size());
  ir::Tracer tracer(s.graph);
  const Tensor loss = tracer.symbolic(s.graph.outputs[0]);
  s.grads = autodiff::graph_grad(loss, s.program.wrt, s.loss_seed);
  s.mirrors_begin = static_cast<int>(s.graph.nodes.size());
}

// The gradient reduction's nodes, named as MindSpore names its mirror operators.
void name_mirror_ops(CompileState& s) {
  for (size_t j = static_cast<size_t>(s.mirrors_begin); j < s.graph.nodes.size(); ++j) {
    s.graph.nodes[j].name = "gradients/mirror_op";
    s.graph.nodes[j].scope = "Default/gradients";
  }
}

// Each parameter's gradient summed over the ranks holding the same slice (NOTE [Step-parallel
// rewrite]).
void mirror_gradients(CompileState& s) {
  ir::Tracer tracer(s.graph);
  for (size_t i = 0; i < s.grads.size(); ++i) {
    if (!s.grads[i].defined()) continue;
    auto it = s.layouts.find(s.program.wrt[i].impl());
    if (it == s.layouts.end()) continue;
    s.grads[i] =
        parallel::all_reduce_over(s.grads[i], parallel::replica_ranks(it->second, s.options.rank));
  }
  name_mirror_ops(s);
}

// The gradients all-reduced in buckets; a parameter the parallel optimizer splits has its
// slice's gradient reduce-scattered already (NOTE [Parallel optimizer]): only the replicas its
// shard group leaves out still sum it, and gradients_mean divides it by the device count.
void bucket_gradients(CompileState& s) {
  ir::Tracer tracer(s.graph);
  std::vector<Tensor> split(s.grads.size());
  for (size_t i = 0; i < s.grads.size(); ++i) {
    if (s.grads[i].defined() && s.optimizer_shards.contains(s.program.wrt[i].impl())) {
      std::swap(split[i], s.grads[i]);
    }
  }
  parallel::all_reduce_gradients_in_buckets(s.grads, {.device_num = s.options.device_num,
                                                      .mean = s.options.gradients_mean,
                                                      .cap_mb = s.options.bucket_cap_mb});
  for (size_t i = 0; i < split.size(); ++i) {
    if (!split[i].defined()) continue;
    const parallel::OptimizerShard& shard = s.optimizer_shards.at(s.program.wrt[i].impl());
    Tensor grad =
        parallel::all_reduce_over(split[i], parallel::replica_ranks(shard.layout, s.options.rank));
    if (s.options.gradients_mean) {
      grad = ops::mul(grad, 1.0 / static_cast<double>(s.options.device_num));
    }
    s.grads[i] = grad;
  }
  name_mirror_ops(s);
}

void optimizer(CompileState& s) {
  ir::Tracer tracer(s.graph);
  // Optimizer state laid out like a sharded parameter is sliced with it at load (state of the
  // global shape: a step compiled earlier may have sliced the parameter without it).
  for (const ParameterSlice& slice : s.parameter_slices) {
    if (slice.layout.is_replicated()) continue;
    const Shape global = global_shape(slice.tensor);
    for (const Tensor& t : slice.like) {
      if (t.defined() && t.shape() == global) {
        tracer.expect_meta(t, {slice.layout.slice_shape(global), t.dtype()});
      }
    }
  }
  s.step_begin = static_cast<int>(s.graph.nodes.size());
  s.program.update(s.grads);
}

// Constants only the graph holds become literals, which constant folding may fold (NOTE [Graph
// IR]); once the tracing code has dropped its tensors.
void mark_literals(CompileState& s) { ir::Tracer(s.graph).finish(); }

void hoist_collectives(CompileState& s) {
  // NOTE [Parallel optimizer buckets]: first each bucket's ReduceScatter, which autodiff puts
  // where the backward reaches the bucket's AllGather (its end: the gathers come first in the
  // forward), with the ops joining its gradients, to right after the last of them, so that it runs
  // while the backward goes on (NOTE [Collectives in flight] in cleave/runtime/executor.h).
  // Nothing else in the backward moves, and nothing crosses into the gradient reduction (its
  // inputs all come before it), so mirrors_begin and step_begin still hold.
  if (!s.optimizer_gathers.empty()) {
    parallel::hoist_collectives(s.graph, s.backward_begin, s.mirrors_begin, [&](const ir::Node& n) {
      const size_t grad = n.name.find(".grad.");
      return grad != std::string::npos && s.optimizer_gathers.contains(n.name.substr(0, grad));
    });
  }
  s.tail_begin = parallel::hoist_collectives(s.graph, s.mirrors_begin, s.step_begin);
}

void order_tail_by_collectives(CompileState& s) {
  parallel::order_tail_by_collectives(s.graph, s.tail_begin);
  parallel::hoist_updates(s.graph, s.tail_begin);
}

// A hash of what the partition depends on: every node's kind, primitive, attributes, inputs,
// output types and placement, and the graph's inputs and outputs.
int64_t fingerprint(const ir::Graph& graph) {
  std::string text;
  for (const ir::Node& n : graph.nodes) {
    text += fmt::format("{}|{}|{}|{}|{}|", static_cast<int>(n.kind), n.is_op() ? n.op->name : "",
                        n.attrs.to_string(), n.placement.role, n.placement.rank);
    for (const ir::ValueRef& v : n.inputs) text += fmt::format("{}.{},", v.node, v.output);
    for (const ir::TensorMeta& m : n.outputs) {
      text += fmt::format("{}{};", dtype_name(m.dtype), m.shape.to_string());
    }
  }
  for (int i : graph.inputs) text += fmt::format("in{},", i);
  for (const ir::ValueRef& v : graph.outputs) text += fmt::format("out{}.{},", v.node, v.output);
  return static_cast<int64_t>(std::hash<std::string>{}(text) >> 1);
}

void partition(CompileState& s) {
  const bool is_placed = placed(s);
  if (is_placed) s.trace_fingerprint = fingerprint(s.graph);
  parallel::PartitionOptions po;
  po.world_size = is_placed ? static_cast<int>(s.options.world_size) : 1;
  po.micro_batches = s.options.micro_batches;
  po.step_begin = s.step_begin;
  po.use_placement = is_placed;
  po.send_op = &ir::Registry::global().get("RpcSend");
  po.recv_op = &ir::Registry::global().get("RpcRecv");
  parallel::Partition parts = parallel::partition(s.graph, po);
  s.placed = is_placed;
  for (size_t r = 0; r < parts.ranks.size(); ++r) {
    s.dump(parts.ranks[r], fmt::format("partition_rank{}", r), s.graph.name);
  }
  s.graph = std::move(parts.ranks[static_cast<size_t>(is_placed ? s.options.rank : 0)]);
  parts.ranks.clear();
  s.partition = std::move(parts);
  s.rank_graph = true;
}

bool training(const CompileState& s) { return s.program.training(); }
// A training step whose gradient reductions (DATA_PARALLEL's buckets, a parallel step's mirror
// operators) may run while the rest of the backward computes: one micro-batch, not placed.
bool overlapped_gradients(const CompileState& s) {
  return (s.options.mode == DATA_PARALLEL || sharded(s)) && training(s) &&
         s.options.micro_batches == 1 && !parallel::has_placement(s.graph);
}
bool always(const CompileState&) { return true; }

}  // namespace

const std::vector<Pass>& compile_passes() {
  using D = Pass::Dump;
  static const std::vector<Pass> passes = {
      {"trace", "the forward traced from construct, with global shapes", "always", always, trace},
      {"load_strategy_file", "every op's strategy from strategy_ckpt_load_file",
       "SEMI_AUTO/AUTO_PARALLEL with strategy_ckpt_load_file",
       [](const CompileState& s) { return sharded(s) && !s.options.strategy_load_file.empty(); },
       load_strategy_file, D::kNone},
      // One pass for every search_mode: the dumps after it keep their numbers whichever runs.
      {"search_strategies",
       "every op's strategy: spread from the shard() ones (sharding_propagation) or searched "
       "on the cost graph (dynamic_programming)",
       "AUTO_PARALLEL", [](const CompileState& s) { return s.options.mode == AUTO_PARALLEL; },
       search_strategies, D::kNone},
      {"step_parallel_begin", "every op's strategy (given or derived) and its layouts",
       "SEMI_AUTO/AUTO_PARALLEL", sharded, step_parallel_begin},
      {"save_strategy_file", "the strategies and layouts written to strategy_ckpt_save_file",
       "SEMI_AUTO/AUTO_PARALLEL (or DATA_PARALLEL's parallel optimizer) with "
       "strategy_ckpt_save_file",
       [](const CompileState& s) {
         return (sharded(s) || parallel_optimizer(s)) && !s.options.strategy_save_file.empty();
       },
       save_strategy_file, D::kNone},
      {"step_parallel_end",
       "this rank's forward: local shapes, redistributions, forward communication",
       "SEMI_AUTO/AUTO_PARALLEL", sharded, step_parallel_end},
      {"parallel_optimizer",
       "each trainable parameter split once more over its replicas, gathered where the forward "
       "reads it (NOTE [Parallel optimizer])",
       "enable_parallel_optimizer in a parallel mode on several devices", parallel_optimizer,
       split_parameters},
      {"autodiff", "+ the backward, whose communication comes from the primitives' gradients",
       "training", training, autodiff},
      {"mirror_gradients",
       "each parameter's gradient summed over the ranks holding its slice (mirror operators)",
       "SEMI_AUTO/AUTO_PARALLEL training",
       [](const CompileState& s) { return sharded(s) && training(s); }, mirror_gradients},
      {"bucket_gradients", "the gradients all-reduced in buckets (NOTE [Gradient buckets])",
       "DATA_PARALLEL training on several devices",
       [](const CompileState& s) {
         return s.options.mode == DATA_PARALLEL && training(s) && s.options.device_num > 1;
       },
       bucket_gradients},
      {"optimizer", "+ the optimizer's in-place updates", "training", training, optimizer},
      {"mark_literals", "constants only the graph holds become foldable literals", "always", always,
       mark_literals},
      {"hoist_collectives",
       "each gradient reduction (a bucket's or a mirror AllReduce, the parallel optimizer's "
       "ReduceScatters) right after its last gradient",
       "DATA_PARALLEL, SEMI_AUTO/AUTO_PARALLEL training, one micro-batch, not placed",
       overlapped_gradients, hoist_collectives},
      {"order_tail_by_collectives",
       "each update right after its own gradient reduction, or its gradient where none "
       "(NOTE [Updates at their gradients])",
       "DATA_PARALLEL, SEMI_AUTO/AUTO_PARALLEL training, one micro-batch, not placed",
       overlapped_gradients, order_tail_by_collectives},
      {"partition", "one graph per rank joined by RpcSend/RpcRecv (place(), micro-batches)",
       "a placed step in a job, or pipeline_micro_batches > 1",
       [](const CompileState& s) { return placed(s) || s.options.micro_batches > 1; }, partition,
       D::kPartition},
      {"verify", "every node checked against its primitive's inference", "always", always,
       [](CompileState& s) { ir::verify(s.graph, ir::Bindings::kDeferred); }, D::kNone},
      {"constant_fold", "ops on literal constants computed now", "always", always,
       [](CompileState& s) { ir::constant_folding(s.graph); }},
      {"cse", "identical ops merged", "always", always,
       [](CompileState& s) { ir::common_subexpression_elimination(s.graph); }},
      {"dce", "ops nothing uses removed", "always", always,
       [](CompileState& s) { ir::dead_code_elimination(s.graph); }},
  };
  return passes;
}

void run_pass(const std::string& name, CompileState& state) {
  const std::vector<Pass>& passes = compile_passes();
  for (size_t k = 0; k < passes.size(); ++k) {
    if (passes[k].name != name) continue;
    state.pass_number = static_cast<int>(k) + 1;
    state.dump_notes.clear();
    const parallel::AllToAllScope alltoall(state.options.enable_alltoall);
    passes[k].run(state);
    if (passes[k].dump == Pass::Dump::kGraph) {
      state.dump(state.graph, passes[k].name, "", state.dump_notes);
    }
    return;
  }
  std::vector<std::string> names;
  for (const Pass& p : passes) names.push_back(p.name);
  CLEAVE_FAIL("run_pass: no pass '{}'; the passes are {}", name, fmt::join(names, ", "));
}

double shared_cores_slowdown() {
  if (!is_initialized()) return 1;
  const int local = get_local_size();
  if (local <= 1 || local != get_group_size()) return 1;
  return std::max(1.0, static_cast<double>(local) / cores_to_share());
}

bool core_left_for_communication() {
  if (!is_initialized()) return true;
  const int local = get_local_size();
  if (local <= 1 || local != get_group_size()) return true;
  return local * threads::intra_op_threads() < cores_to_share();
}

CompileOptions compile_options(const StepProgram& program) {
  const Context& ctx = get_context();
  const AutoParallelContext& c = get_auto_parallel_context();
  CompileOptions o;
  o.world_size = comm::world_size();
  o.rank = comm::world_rank();
  o.mode = c.parallel_mode;
  o.search_mode = c.search_mode;
  o.cost_model_profile = c.cost_model_profile;
  o.compute_slowdown = shared_cores_slowdown();
  o.algo = get_algo_parameters();
  o.cost_model = get_cost_model_context();
  o.enable_alltoall = c.enable_alltoall;
  // Micro-batches pipeline a training step; an evaluation runs its batch at once.
  o.micro_batches = program.training() ? c.pipeline_micro_batches : 1;
  if (program.training() && ctx.split_batch_over_threads && o.mode == STAND_ALONE &&
      o.micro_batches == 1) {
    o.thread_split = threads::intra_op_threads();  // NOTE [Threads split the batch]
  }
  o.device_num = c.device_num > 0 ? c.device_num : o.world_size;
  o.gradients_mean = c.gradients_mean || c.mirror_mean;
  o.parameter_broadcast = c.parameter_broadcast;
  o.bucket_cap_mb = c.bucket_cap_mb;
  o.parallel_optimizer = c.enable_parallel_optimizer;
  o.optimizer_shard = {
      .threshold_bytes = c.parallel_optimizer_config.parallel_optimizer_threshold * 1024,
      .shard_size = c.parallel_optimizer_config.optimizer_weight_shard_size};
  o.strategy_load_file = c.strategy_ckpt_load_file;
  o.strategy_save_file = c.strategy_ckpt_save_file;
  o.save_graphs = ctx.save_graphs;
  o.save_graphs_path = ctx.save_graphs_path;
  if (o.mode == STAND_ALONE) return o;
  CLEAVE_CHECK_ARG(o.device_num == o.world_size,
                   "{}: parallel_mode {} with device_num {}, but this job has {} rank{}; "
                   "device_num must be the number of ranks the step runs on (leave it 0 for the "
                   "world size, or launch {} ranks: cleave-run --worker_num {}, mpirun -n {})",
                   program.name, parallel_mode_name(o.mode), o.device_num, o.world_size,
                   o.world_size == 1 ? "" : "s", o.device_num, o.device_num, o.device_num);
  CLEAVE_CHECK_ARG(c.global_rank < 0 || c.global_rank == o.rank,
                   "{}: global_rank is {}, but this process is rank {} of the job; leave "
                   "global_rank at -1 to use the job's rank",
                   program.name, c.global_rank, o.rank);
  const std::string kind = dataset_strategy_kind(c);
  if (kind == "full_batch") {
    o.step_parallel.dataset = parallel::DatasetSplit::kFullBatch;
  } else if (kind.empty()) {
    o.step_parallel.dataset = parallel::DatasetSplit::kStrategy;
    o.step_parallel.dataset_strategy = std::get<ir::Strategy>(c.dataset_strategy);
  }
  o.step_parallel.device_num = o.device_num;
  return o;
}

void CompileState::dump(const ir::Graph& g, const std::string& stage, const std::string& folder,
                        const ir::NodeNotes& notes) const {
  dump_graph(options, g, pass_number, stage, notes, folder);
}

namespace {

// The passes from the second on (the trace has run on `s`), and the plan they make.
CompiledPlan finish_compile(CompileState& s) {
  const std::vector<Pass>& passes = compile_passes();
  for (size_t k = 1; k < passes.size(); ++k) {
    if (passes[k].applies(s)) run_pass(passes[k].name, s);
  }
  const StepProgram& program = s.program;
  const CompileOptions& options = s.options;
  CompiledPlan plan;
  plan.options = options;
  plan.num_inputs = program.inputs.size();
  plan.placed = s.placed;
  if (s.partition) plan.cuts = s.partition->cuts;
  plan.trace_fingerprint = s.trace_fingerprint;
  plan.parameter_slices = std::move(s.parameter_slices);
  if (options.mode == DATA_PARALLEL && options.parameter_broadcast && options.world_size > 1) {
    // Parameters the parallel optimizer splits are broadcast before they are sliced, at load.
    for (const auto& [name, t] : program.parameters) {
      const bool sliced =
          parameter_shard(t) ||
          std::any_of(plan.parameter_slices.begin(), plan.parameter_slices.end(),
                      [&t = t](const ParameterSlice& p) { return p.tensor.impl() == t.impl(); });
      if (!sliced) plan.broadcast_parameters.push_back(t);
    }
  }
  plan.messages = std::move(s.messages);
  plan.execute_dump_number = static_cast<int>(passes.size()) + 1;
  plan.graph = std::move(s.graph);
  return plan;
}

// Traces `program` for `options` (keeping the graph name `name` when one is given) and compiles.
CompiledPlan compile_traced(const StepProgram& program, const CompileOptions& options,
                            const std::string& name) {
  CompileState s{.program = program, .options = options};
  if (!name.empty()) s.graph.name = name;
  run_pass(compile_passes().front().name, s);
  return finish_compile(s);
}

// NOTE [Threads split the batch]: below this a block's forward is too short for the threads'
// hand-over (an OpenMP team's start and join, a few microseconds) to pay. On 2 threads
// (bench/README.md, "Threads split the batch"): TwoMatMul at batch 16 (13 kFLOP a block) ran
// 0.63x one thread when split, LeNet and the MLP at batch 32 (14 and 22 MFLOP a block) 1.88x and
// 1.50x.
constexpr double kMinBlockFlops = 1e6;

// Why the batch of `p` cannot be cut into `parts` blocks before it is traced; empty when it may be
// (NOTE [Threads split the batch]).
std::string thread_split_precheck(const StepProgram& p, int parts) {
  if (p.traced != nullptr) return "the step is a graph traced already, which compiles once";
  for (const StepProgram::Input& in : p.inputs) {
    const Shape& shape = in.meta.shape;
    if (shape.rank() == 0 || shape[0] % parts != 0 || shape[0] / parts % parts != 0) {
      return fmt::format(
          "{} has shape {}: its batch is not {} blocks whose rows divide {} ways again", in.name,
          shape.to_string(), parts, parts);
    }
  }
  return "";
}

}  // namespace

CompiledPlan compile(const StepProgram& program, const CompileOptions& options) {
  if (options.thread_split <= 1) return compile_traced(program, options, "");
  // NOTE [Threads split the batch]: traced for one block, kept when the blocks are exact.
  CompileOptions split = options;
  split.micro_batches = options.thread_split;
  std::string why = thread_split_precheck(program, options.thread_split);
  std::string name;
  if (why.empty()) {
    CompileState s{.program = program, .options = split};
    try {
      run_pass(compile_passes().front().name, s);
      why = placed(s)
                ? "the network is placed on the job's workers (its micro-batches are "
                  "pipeline_micro_batches)"
                : parallel::batch_split_blocker(s.graph, options.thread_split, kMinBlockFlops);
    } catch (const std::exception& e) {
      // A forward written for its batch size (a Reshape to (32, -1)) cannot trace one block's
      // rows; traced for the whole batch it either works or raises its error again there.
      why = fmt::format("the forward traced for 1/{} of the batch failed: {}", options.thread_split,
                        e.what());
    }
    if (why.empty()) return finish_compile(s);
    name = s.graph.name == ir::Graph{}.name ? "" : s.graph.name;
  }
  CompileOptions whole = options;
  whole.thread_split = 1;
  CompiledPlan plan = compile_traced(program, whole, name);
  plan.thread_split_blocker = std::move(why);
  return plan;
}

}  // namespace cleave::runtime
