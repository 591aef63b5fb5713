// Sharded blocks in PYNATIVE_MODE (NOTE [Sharded blocks in PyNative] in cleave/runtime/shard.h).
#include "cleave/runtime/shard.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <variant>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ir/passes.h"
#include "cleave/ops/elementwise.h"
#include "cleave/ops/reduce.h"
#include "cleave/parallel/step_parallel.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/pipeline.h"
#include "cleave/runtime/sharded_parameters.h"

namespace cleave::runtime {
namespace {

thread_local const ShardedBlock* t_tracing = nullptr;

class TracingScope {
 public:
  explicit TracingScope(const ShardedBlock* block) : previous_(t_tracing) { t_tracing = block; }
  ~TracingScope() { t_tracing = previous_; }
  TracingScope(const TracingScope&) = delete;
  TracingScope& operator=(const TracingScope&) = delete;

 private:
  const ShardedBlock* previous_;
};

std::string meta_text(const ir::TensorMeta& m) {
  return fmt::format("{}{}", dtype_name(m.dtype), m.shape.to_string());
}

// The settings a block needs, checked when it is made and at each call.
void check_context(const std::string& name) {
  CLEAVE_CHECK_ARG(get_context().mode == PYNATIVE_MODE,
                   "shard '{}': the context's mode is GRAPH_MODE; shard compiles one part of "
                   "eager code and needs PYNATIVE_MODE: set runtime::set_context({{.mode = "
                   "runtime::PYNATIVE_MODE}}) (in GRAPH_MODE the whole step is compiled already: "
                   "give its operators strategies with Primitive::shard instead)",
                   name);
  const AutoParallelContext& c = get_auto_parallel_context();
  CLEAVE_CHECK_ARG(c.parallel_mode == AUTO_PARALLEL && c.search_mode == "sharding_propagation",
                   "shard '{}': parallel_mode is {} with search_mode \"{}\"; shard needs "
                   "parallel_mode AUTO_PARALLEL with search_mode \"sharding_propagation\" (the "
                   "strategies of the operators inside the block are propagated from in_strategy "
                   "and parameter_plan): set runtime::set_auto_parallel_context({{.parallel_mode "
                   "= runtime::AUTO_PARALLEL, .search_mode = \"sharding_propagation\"}})",
                   name, parallel_mode_name(c.parallel_mode), c.search_mode);
}

// How the eager code around a block holds its tensors (NOTE [Sharded blocks in PyNative], layout
// for the eager code): the context's dataset_strategy.
struct Boundary {
  std::string kind;       // "full_batch", "data_parallel", or "strategy" (one entry per input)
  ir::Strategy strategy;  // "strategy"

  std::string key() const { return kind + ir::strategy_to_string(strategy); }
};

Boundary boundary() {
  const AutoParallelContext& c = get_auto_parallel_context();
  const std::string kind = dataset_strategy_kind(c);
  if (!kind.empty()) return {kind, {}};
  return {"strategy", std::get<ir::Strategy>(c.dataset_strategy)};
}

// Every rank's dim-0 slice of a tensor, gathered in rank order (collective over the world group).
Tensor gather_rows(const Tensor& local) {
  std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
  if (world == nullptr || world->size() == 1) return local;
  const int64_t n = world->size();
  const Tensor in = local.detach().clone();
  Shape global = in.shape();
  global[0] *= n;
  Tensor all = Tensor::empty(global, in.dtype());
  world->all_gather(all.view(Shape({all.numel()})), in.view(Shape({in.numel()})));
  return all;
}

// This rank's dim-0 slice of a whole tensor.
Tensor rows_of_rank(const Tensor& whole) {
  const int n = comm::world_size();
  if (n == 1) return whole;
  const int64_t rows = whole.shape()[0] / n;
  return whole.narrow_rows(comm::world_rank() * rows, rows).clone();
}

// Writes this rank's slice of `whole` into `holder` (laid out by the load of its program).
void write_holder(const Tensor& holder, const Tensor& whole) {
  NoGradGuard no_grad;
  if (const std::optional<ParameterShard> shard = parameter_shard(holder)) {
    holder.copy_from(local_slice(whole, shard->layout, shard->rank));
  } else {
    holder.copy_from(whole.detach());
  }
}

// The whole value of a tensor laid out like `holder` (a gradient of it).
Tensor gather_like(const Tensor& local, const Tensor& holder) {
  const std::optional<ParameterShard> shard = parameter_shard(holder);
  if (!shard || local.shape() == shard->global.shape) return local;
  return gather_slices(local, shard->global, shard->layout);
}

// The annotation of a Cast that lays a tensor out as `entry`.
ir::AnnotationGuard::Sharding sharding_of(const LayoutEntry& entry) {
  ir::AnnotationGuard::Sharding s{.in = {entry.splits}};
  if (entry.named) s.in_layouts = {*entry.named};
  return s;
}

// Ops made for blocks live as long as the process: the tape's GradNodes point at them.
const ir::OpDef* keep_op(std::unique_ptr<ir::OpDef> op) {
  static std::mutex mutex;
  static std::deque<std::unique_ptr<ir::OpDef>> ops;
  std::lock_guard<std::mutex> lock(mutex);
  ops.push_back(std::move(op));
  return ops.back().get();
}

}  // namespace

std::string LayoutEntry::to_string() const {
  return named ? named->to_string() : fmt::format("({})", fmt::join(splits, ", "));
}

// One compiled program of a block and the tensors its graph binds (NOTE [Sharded blocks in
// PyNative], holders): block inputs, then parameters, then (backward) output gradients.
struct CompiledBlock {
  std::unique_ptr<CompiledStep> step;
  std::vector<Tensor> inputs, parameters, output_grads;
  std::vector<bool> grad_defined;  // backward: per input then parameter, whether it has a gradient
};

struct BlockEntry {
  // How every rank holds each input in the eager code, under a dataset_strategy of one entry per
  // input (empty otherwise).
  std::vector<parallel::Layout> input_layouts;
  std::vector<ir::TensorMeta> global_inputs;
  std::vector<ir::TensorMeta> global_outputs;
  CompiledBlock forward;
  std::unique_ptr<CompiledBlock> backward;
};

struct ShardedBlock::State {
  ShardedBlockSpec spec;
  const ShardedBlock* self = nullptr;
  const ir::OpDef* op = nullptr;
  // parameter_plan resolved to parameter indices.
  std::vector<std::pair<size_t, LayoutEntry>> plan;
  std::set<std::string> warned;
  std::map<std::string, BlockEntry> cache;
  size_t compiled = 0;

  void warn_once(const std::string& key, const std::string& text) {
    if (!warned.insert(key).second) return;
    std::fprintf(stderr, "cleave: warning: %s\n", text.c_str());
  }

  size_t num_inputs() const { return spec.in_strategy.size(); }

  std::string key_of(std::span<const ir::TensorMeta> metas, const Boundary& b) const {
    std::string key = fmt::format("{}|{}|{}|", b.key(), comm::world_size(),
                                  spec.signature ? spec.signature() : std::string());
    for (size_t i = 0; i < num_inputs(); ++i) key += meta_text(metas[i]) + ";";
    return key;
  }

  void check_inputs(std::span<const ir::TensorMeta> metas) const {
    for (size_t i = 0; i < num_inputs(); ++i) {
      const std::optional<LayoutEntry>& s = spec.in_strategy[i];
      CLEAVE_CHECK_ARG(!s || static_cast<int64_t>(s->splits.size()) == metas[i].shape.rank(),
                       "shard '{}': in_strategy[{}] is {} ({} dimensions), but input {} is {}; "
                       "give one number per dimension of the input, or std::nullopt to derive it",
                       spec.name, i, s ? s->to_string() : std::string(), s ? s->splits.size() : 0,
                       i, meta_text(metas[i]));
    }
  }

  // The block's outputs, traced on the input holders through their in_strategy Casts.
  std::vector<Tensor> trace_block(const std::vector<Tensor>& holders) const {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < holders.size(); ++i) {
      Tensor x = holders[i];
      if (const std::optional<LayoutEntry>& s = spec.in_strategy[i]) {
        ir::AnnotationGuard guard(ir::Placement{}, sharding_of(*s), "in_strategy");
        x = ops::cast(x, x.dtype());
      }
      xs.push_back(x);
    }
    TracingScope tracing(self);
    std::vector<Tensor> out = spec.fn(xs);
    CLEAVE_CHECK_ARG(!out.empty(), "shard '{}': the block returned no tensor", spec.name);
    for (size_t i = 0; i < out.size(); ++i) {
      CLEAVE_CHECK_ARG(out[i].defined() && out[i].is_symbolic() && is_floating(out[i].dtype()),
                       "shard '{}': output {} of the block is {}; expected a floating tensor "
                       "computed from its inputs or parameters",
                       spec.name, i,
                       out[i].defined() ? meta_text({out[i].shape(), out[i].dtype()})
                                        : std::string("an undefined Tensor"));
    }
    apply_out_strategy(out);
    return out;
  }

  // Gives the ops producing the block's outputs the out_strategy (NOTE [Output targets] in
  // src/parallel/named_layouts.cc): each output is laid out as asked where it is computed, in the
  // forward and in the backward's recomputation alike.
  void apply_out_strategy(const std::vector<Tensor>& out) const {
    const auto& want = spec.options.out_strategy;
    if (want.empty()) return;
    CLEAVE_CHECK_ARG(want.size() == out.size(),
                     "shard '{}': out_strategy has {} entr{} but the block returns {} output{}; "
                     "give one (or std::nullopt) per output",
                     spec.name, want.size(), want.size() == 1 ? "y" : "ies", out.size(),
                     out.size() == 1 ? "" : "s");
    ir::Tracer* tracer = ir::Tracer::current();
    CLEAVE_ASSERT(tracer != nullptr, "a block is traced under a tracer");
    ir::Graph& g = tracer->graph();
    for (size_t i = 0; i < out.size(); ++i) {
      if (!want[i]) continue;
      const LayoutEntry& entry = *want[i];
      CLEAVE_CHECK_ARG(static_cast<int64_t>(entry.splits.size()) == out[i].rank(),
                       "shard '{}': out_strategy[{}] is {} ({} dimensions), but output {} is {}; "
                       "give one number per dimension of the output",
                       spec.name, i, entry.to_string(), entry.splits.size(), i,
                       meta_text({out[i].shape(), out[i].dtype()}));
      const ir::ValueRef ref = tracer->value_of(out[i]);
      ir::Node& producer = g.nodes[static_cast<size_t>(ref.node)];
      if (!producer.is_op()) continue;  // an input or parameter returned as it is: whole already
      CLEAVE_CHECK_ARG(producer.out_strategy.empty() && producer.out_layouts.empty(),
                       "shard '{}': output {} comes from {} '{}', which has an out_strategy of "
                       "its own already; give the layout in one place",
                       spec.name, i, producer.op->name, producer.name);
      const size_t n_out = producer.outputs.size();
      if (entry.named) {
        // A named layout is one output's whole target: the op must have no other output.
        CLEAVE_CHECK_ARG(n_out == 1,
                         "shard '{}': output {} comes from {} '{}', which has {} outputs; a named "
                         "out layout needs an op of one output there (give splits instead)",
                         spec.name, i, producer.op->name, producer.name, n_out);
        producer.out_layouts = {*entry.named};
      } else {
        producer.out_strategy.resize(n_out);
        producer.out_strategy[static_cast<size_t>(ref.output)] = entry.splits;
      }
    }
  }

  // Puts a Cast carrying the parameter_plan strategy between each planned parameter and its
  // consumers, right after the parameter's node (before propagation sees the graph).
  void apply_parameter_plan(ir::Graph& graph) {
    for (const auto& [index, strategy] : plan) {
      const auto& [name, param] = spec.parameters[index];
      int p = -1;
      for (size_t k = 0; k < graph.nodes.size(); ++k) {
        const ir::Node& n = graph.nodes[k];
        if (n.kind == ir::NodeKind::kParameter && n.value.impl() == param.impl()) {
          p = static_cast<int>(k);
        }
      }
      if (p < 0) continue;  // the block does not read it
      CLEAVE_CHECK_ARG(static_cast<int64_t>(strategy.splits.size()) == param.rank(),
                       "shard '{}': parameter_plan gives '{}' the strategy {} ({} dimensions), "
                       "but the parameter is {}; give one number per dimension",
                       spec.name, name, strategy.to_string(), strategy.splits.size(),
                       meta_text({param.shape(), param.dtype()}));
      bool has_layout = parameter_shard(param).has_value();
      for (const ir::Node& n : graph.nodes) {
        if (!n.is_op() || n.strategy.empty()) continue;
        for (const ir::ValueRef& in : n.inputs) has_layout = has_layout || in.node == p;
      }
      if (has_layout) {
        warn_once("layout:" + name,
                  fmt::format("shard '{}': parameter_plan entry '{}' is skipped: the parameter "
                              "already has a layout (an operator reading it has a shard() "
                              "strategy, or it is sharded already)",
                              spec.name, name));
        continue;
      }
      int cast = -1;
      {
        ir::Tracer tracer(graph);
        ir::AnnotationGuard guard(ir::Placement{}, sharding_of(strategy), "parameter_plan");
        const Tensor c = ops::cast(tracer.symbolic({p, 0}), param.dtype());
        cast = tracer.value_of(c).node;
      }
      for (size_t k = 0; k < graph.nodes.size(); ++k) {
        if (static_cast<int>(k) == cast) continue;
        for (ir::ValueRef& in : graph.nodes[k].inputs) {
          if (in == ir::ValueRef{p, 0}) in = {cast, 0};
        }
      }
      for (ir::ValueRef& out : graph.outputs) {
        if (out == ir::ValueRef{p, 0}) out = {cast, 0};
      }
      std::vector<int> order;
      for (int k = 0; k <= p; ++k) order.push_back(k);
      order.push_back(cast);
      for (int k = p + 1; k < static_cast<int>(graph.nodes.size()); ++k) {
        if (k != cast) order.push_back(k);
      }
      ir::reorder_nodes(graph, order);
    }
  }

  // compile() (NOTE [Compile pipeline]) with the parameter plan applied after the trace, and the
  // graph's parameters rebound to `holders` (NOTE [Sharded blocks in PyNative], holders).
  std::unique_ptr<CompiledStep> compile_and_load(const StepProgram& program,
                                                 const std::vector<Tensor>& holders) {
    CompileOptions options = compile_options(program);
    options.micro_batches = 1;
    options.step_parallel.dataset = parallel::DatasetSplit::kFullBatch;
    options.strategy_load_file.clear();  // the files describe the user's whole-step graphs
    options.strategy_save_file.clear();
    // The eager code around the block holds and updates its parameters whole: the parallel
    // optimizer (a GRAPH_MODE training step's) does not split them.
    options.parallel_optimizer = false;
    if (spec.options.level) {
      // The operators without a strategy get theirs from the dynamic programming under the
      // level's objective (NOTE [Search objectives]) instead of propagation.
      options.search_mode = "dynamic_programming";
      options.search_level = *spec.options.level;
    }
    CompileState s{.program = program, .options = options};
    const std::vector<Pass>& passes = compile_passes();
    try {
      for (const Pass& pass : passes) {
        if (pass.applies(s)) run_pass(pass.name, s);
        if (pass.name == "trace") apply_parameter_plan(s.graph);
      }
    } catch (const Error& e) {
      if (std::string_view(e.what()).starts_with("shard '" + spec.name + "'")) throw;
      bool derived = plan.empty();
      for (const auto& entry : spec.in_strategy) derived = derived && !entry.has_value();
      throw Error(e.kind(),
                  fmt::format("shard '{}': compiling the block failed: {}{}", spec.name, e.what(),
                              derived ? " (every in_strategy entry of the block is std::nullopt "
                                        "and parameter_plan sets no layout: give at least one "
                                        "input a strategy)"
                                      : ""));
    }
    CompiledPlan plan;
    plan.options = options;
    plan.num_inputs = 0;
    plan.parameter_slices = std::move(s.parameter_slices);
    plan.messages = std::move(s.messages);
    plan.execute_dump_number = static_cast<int>(passes.size()) + 1;
    plan.graph = std::move(s.graph);
    // The cell's parameters were bound while tracing (their names and values); the graph reads
    // holders instead.
    std::map<const TensorImpl*, Tensor> rebind;
    for (size_t j = 0; j < spec.parameters.size(); ++j) {
      rebind[spec.parameters[j].second.impl()] = holders[j];
    }
    for (ir::Node& n : plan.graph.nodes) {
      if (n.kind != ir::NodeKind::kParameter) continue;
      if (auto it = rebind.find(n.value.impl()); it != rebind.end()) n.value = it->second;
    }
    for (ParameterSlice& slice : plan.parameter_slices) {
      if (auto it = rebind.find(slice.tensor.impl()); it != rebind.end()) slice.tensor = it->second;
    }
    if (options.rank == 0) {
      for (const std::string& m : plan.messages) std::fprintf(stderr, "cleave: %s\n", m.c_str());
    }
    ++compiled;
    return load(std::move(plan));
  }

  std::vector<Tensor> parameter_holders() const {
    std::vector<Tensor> out;
    for (const auto& [name, p] : spec.parameters) out.push_back(p.detach().clone());
    return out;
  }

  StepProgram base_program(const std::string& what, const CompiledBlock& b) const {
    StepProgram program;
    program.name = fmt::format("shard_{}_{}", spec.name, what);
    for (size_t i = 0; i < b.inputs.size(); ++i) {
      program.parameters.emplace_back(fmt::format("input{}", i), b.inputs[i]);
    }
    for (const auto& [name, p] : spec.parameters) program.parameters.emplace_back(name, p);
    for (size_t i = 0; i < b.output_grads.size(); ++i) {
      program.parameters.emplace_back(fmt::format("output{}_grad", i), b.output_grads[i]);
    }
    return program;
  }

  BlockEntry& entry(std::span<const ir::TensorMeta> metas) {
    check_context(spec.name);
    const Boundary b = boundary();
    check_inputs(metas);
    const std::string key = key_of(metas, b);
    if (auto it = cache.find(key); it != cache.end()) return it->second;

    BlockEntry e;
    const int n = comm::world_size();
    if (b.kind == "strategy") {
      CLEAVE_CHECK_ARG(b.strategy.size() == num_inputs(),
                       "shard '{}': dataset_strategy {} has {} entr{} but the block has {} "
                       "input{}; give one strategy per input of the block (or use \"full_batch\" "
                       "or \"data_parallel\")",
                       spec.name, ir::strategy_to_string(b.strategy), b.strategy.size(),
                       b.strategy.size() == 1 ? "y" : "ies", num_inputs(),
                       num_inputs() == 1 ? "" : "s");
    }
    for (size_t i = 0; i < num_inputs(); ++i) {
      ir::TensorMeta m = metas[i];
      if (b.kind == "data_parallel") {
        CLEAVE_CHECK_ARG(m.shape.rank() >= 1,
                         "shard '{}': input {} is a scalar, but dataset_strategy "
                         "\"data_parallel\" gives each rank a dim-0 slice of every input; use "
                         "\"full_batch\"",
                         spec.name, i);
        m.shape[0] *= n;
      } else if (b.kind == "strategy") {
        const std::vector<int64_t>& splits = b.strategy[i];
        int64_t used = 1;
        for (int64_t v : splits) used *= v;
        CLEAVE_CHECK_ARG(static_cast<int64_t>(splits.size()) == m.shape.rank() && n % used == 0,
                         "shard '{}': dataset_strategy entry {} ({}) does not fit input {}, {} on "
                         "each of {} ranks; expected one split per dimension, their product "
                         "dividing the device count",
                         spec.name, i, Shape(splits).to_string(), i, meta_text(m), n);
        for (size_t d = 0; d < splits.size(); ++d) m.shape[static_cast<int64_t>(d)] *= splits[d];
        e.input_layouts.push_back(parallel::layout_of_splits(splits, n));
      }
      e.global_inputs.push_back(m);
      e.forward.inputs.push_back(Tensor::zeros(m.shape, m.dtype));
    }
    e.forward.parameters = parameter_holders();
    StepProgram program = base_program("forward", e.forward);
    const std::vector<Tensor> inputs = e.forward.inputs;
    program.forward = [this, inputs](const std::vector<Tensor>&) { return trace_block(inputs); };
    std::vector<Tensor> holders = e.forward.parameters;
    e.forward.step = compile_and_load(program, holders);
    const ir::Graph& g = e.forward.step->executor().graph();
    for (const ir::ValueRef& out : g.outputs) e.global_outputs.push_back(g.meta(out));
    return cache.emplace(key, std::move(e)).first->second;
  }

  CompiledBlock& backward_of(BlockEntry& e) {
    if (e.backward != nullptr) return *e.backward;
    auto b = std::make_unique<CompiledBlock>();
    for (const ir::TensorMeta& m : e.global_inputs) {
      b->inputs.push_back(Tensor::zeros(m.shape, m.dtype));
    }
    b->parameters = parameter_holders();
    for (const ir::TensorMeta& m : e.global_outputs) {
      b->output_grads.push_back(Tensor::zeros(m.shape, m.dtype));
    }
    StepProgram program = base_program("backward", *b);
    const std::vector<Tensor> inputs = b->inputs, dys = b->output_grads;
    // The VJP: the gradient of sum_i <block(x)_i, dy_i> is the block's backward for dy.
    program.forward = [this, inputs, dys](const std::vector<Tensor>&) {
      const std::vector<Tensor> out = trace_block(inputs);
      CLEAVE_CHECK_ARG(out.size() == dys.size(),
                       "shard '{}': the block returned {} outputs when traced for its backward "
                       "but {} for its forward; it must return the same outputs every time",
                       spec.name, out.size(), dys.size());
      Tensor loss;
      for (size_t i = 0; i < out.size(); ++i) {
        const Tensor term = ops::reduce_sum(ops::mul(out[i], dys[i]));
        loss = loss.defined() ? ops::add(loss, term) : term;
      }
      return std::vector<Tensor>{loss};
    };
    program.wrt = inputs;
    for (const auto& [name, p] : spec.parameters) program.wrt.push_back(p);
    CompiledBlock* target = b.get();
    // The gradients become the graph's outputs after the loss (no optimizer runs inside).
    program.update = [target](const std::vector<Tensor>& grads) {
      ir::Tracer* tracer = ir::Tracer::current();
      CLEAVE_ASSERT(tracer != nullptr, "the optimizer pass traces the update");
      for (const Tensor& g : grads) {
        target->grad_defined.push_back(g.defined());
        if (g.defined()) tracer->graph().outputs.push_back(tracer->value_of(g));
      }
    };
    std::vector<Tensor> holders = b->parameters;
    b->step = compile_and_load(program, holders);
    e.backward = std::move(b);
    return *e.backward;
  }

  // Input i's whole value from what this rank holds of it in the eager code.
  static Tensor whole_input(const BlockEntry& e, const Boundary& b, size_t i, const Tensor& mine) {
    if (b.kind == "data_parallel") return gather_rows(mine);
    if (b.kind == "strategy") return gather_slices(mine, e.global_inputs[i], e.input_layouts[i]);
    return mine;
  }

  // The op's kernel: runs the forward program and writes the outputs this rank gets.
  void run_forward(std::span<const Tensor> in, std::span<const Tensor> out) {
    std::vector<ir::TensorMeta> metas;
    for (const Tensor& t : in) metas.push_back({t.shape(), t.dtype()});
    BlockEntry& e = entry(metas);
    const Boundary b = boundary();
    const bool rows = b.kind == "data_parallel";
    for (size_t i = 0; i < num_inputs(); ++i) {
      write_holder(e.forward.inputs[i], whole_input(e, b, i, in[i]));
    }
    for (size_t j = 0; j < spec.parameters.size(); ++j) {
      write_holder(e.forward.parameters[j], in[num_inputs() + j]);
    }
    const std::vector<Tensor> result = e.forward.step->run({});
    CLEAVE_ASSERT(result.size() == out.size(), "block outputs {} vs {}", result.size(), out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].copy_from(rows ? rows_of_rank(result[i]) : result[i]);
    }
  }

  std::vector<ir::TensorMeta> infer(std::span<const ir::TensorMeta> in) {
    BlockEntry& e = entry(in);
    std::vector<ir::TensorMeta> out = e.global_outputs;
    if (boundary().kind == "data_parallel") {
      const int n = comm::world_size();
      for (size_t i = 0; i < out.size(); ++i) {
        CLEAVE_CHECK_ARG(out[i].shape.rank() >= 1 && out[i].shape[0] % n == 0,
                         "shard '{}': output {} is {}; with dataset_strategy \"data_parallel\" "
                         "each of the {} ranks gets a dim-0 slice of it, so its dim 0 must be "
                         "divisible by {}; use \"full_batch\"",
                         spec.name, i, meta_text(out[i]), n, n);
        out[i].shape[0] /= n;
      }
    }
    return out;
  }

  // The op's gradient rule: runs the backward program (NOTE [Sharded blocks in PyNative]).
  std::vector<Tensor> run_backward(const ir::GradContext& ctx) {
    std::vector<ir::TensorMeta> metas;
    for (const Tensor& t : ctx.inputs) metas.push_back({t.shape(), t.dtype()});
    BlockEntry& e = entry(metas);
    CompiledBlock& b = backward_of(e);
    const Boundary where = boundary();
    const bool rows = where.kind == "data_parallel";
    for (size_t i = 0; i < num_inputs(); ++i) {
      write_holder(b.inputs[i], whole_input(e, where, i, ctx.inputs[i]));
    }
    for (size_t j = 0; j < spec.parameters.size(); ++j) {
      write_holder(b.parameters[j], ctx.inputs[num_inputs() + j]);
    }
    for (size_t i = 0; i < b.output_grads.size(); ++i) {
      Tensor dy = ctx.output_grads[i];
      if (!dy.defined()) dy = Tensor::zeros(ctx.outputs[i].shape(), ctx.outputs[i].dtype());
      write_holder(b.output_grads[i], rows ? gather_rows(dy) : dy);
    }
    const std::vector<Tensor> result = b.step->run({});
    std::vector<Tensor> grads;
    size_t next = 1;  // after the loss
    for (size_t k = 0; k < ctx.inputs.size(); ++k) {
      const Tensor& holder = k < num_inputs() ? b.inputs[k] : b.parameters[k - num_inputs()];
      if (!b.grad_defined[k]) {
        grads.push_back(Tensor());
        continue;
      }
      Tensor whole = gather_like(result[next++], holder);
      if (k < num_inputs() && rows) whole = rows_of_rank(whole);
      if (k < num_inputs() && where.kind == "strategy") {
        whole = local_slice(whole, e.input_layouts[k], comm::world_rank());
      }
      grads.push_back(whole);
    }
    return grads;
  }
};

ShardedBlock::ShardedBlock(ShardedBlockSpec spec) : state_(std::make_shared<State>()) {
  const std::string name = spec.name;
  CLEAVE_CHECK_ARG(spec.fn != nullptr, "shard '{}': the function is empty", name);
  CLEAVE_CHECK_ARG(!spec.in_strategy.empty(),
                   "shard '{}': in_strategy is empty; give one strategy (or std::nullopt) per "
                   "input of the block",
                   name);
  const ShardOptions& o = spec.options;
  CLEAVE_CHECK_ARG(o.device == "CPU" || o.device == "GPU" || o.device == "Ascend",
                   "shard '{}': device is \"{}\"; expected \"CPU\" (\"GPU\" and \"Ascend\" are "
                   "MindSpore's other values)",
                   name, o.device);
  if (o.device == "GPU") {
    CLEAVE_UNIMPLEMENTED(
        "shard '{}': device \"GPU\": the GPU backend does not run sharded blocks yet; use "
        "device \"CPU\"",
        name);
  }
  if (o.device == "Ascend") {
    CLEAVE_UNIMPLEMENTED(
        "shard '{}': device \"Ascend\": cleave has no Ascend backend; use "
        "device \"CPU\"",
        name);
  }
  if (o.level) {
    CLEAVE_CHECK_ARG(*o.level >= 0 && *o.level <= 2,
                     "shard '{}': level is {}; expected 0 (maximise computation over "
                     "communication), 1 (minimise memory) or 2 (maximise speed)",
                     name, *o.level);
  }
  check_context(name);
  CLEAVE_CHECK_ARG(t_tracing == nullptr,
                   "shard '{}': made while the sharded block '{}' is traced; nested shard is not "
                   "supported (as in MindSpore): shard the outer block only",
                   name, t_tracing == nullptr ? std::string() : t_tracing->name());

  State& s = *state_;
  s.spec = std::move(spec);
  s.self = this;
  for (const auto& [given, strategy] : s.spec.options.parameter_plan) {
    std::string key = given;
    if (key.starts_with("self.")) key = key.substr(5);
    size_t found = s.spec.parameters.size();
    for (size_t j = 0; j < s.spec.parameters.size(); ++j) {
      const std::string& own = s.spec.parameters[j].first;
      if (key == own ||
          (!s.spec.parameter_prefix.empty() && key == s.spec.parameter_prefix + "." + own)) {
        found = j;
      }
    }
    if (found == s.spec.parameters.size()) {
      std::vector<std::string> names;
      for (const auto& [own, p] : s.spec.parameters) {
        names.push_back(s.spec.parameter_prefix.empty() ? own
                                                        : s.spec.parameter_prefix + "." + own);
      }
      s.warn_once("name:" + given,
                  fmt::format("shard '{}': parameter_plan names '{}', which is not a parameter "
                              "of the block; the entry is skipped (the block's parameters: {})",
                              name, given,
                              names.empty() ? std::string("none")
                                            : fmt::to_string(fmt::join(names, ", "))));
      continue;
    }
    s.plan.emplace_back(found, strategy);
  }

  auto op = std::make_unique<ir::OpDef>();
  op->name = fmt::format("Shard[{}]", name);
  op->num_inputs = ir::OpDef::kVariadic;
  op->family = "shard";
  const std::weak_ptr<State> weak = state_;
  auto lock = [weak, name] {
    std::shared_ptr<State> st = weak.lock();
    CLEAVE_CHECK_ARG(st != nullptr,
                     "shard '{}': the sharded block was destroyed before its backward ran; keep "
                     "the shard() result (or the Cell) alive until backward",
                     name);
    return st;
  };
  op->infer = [lock](const ir::InferContext& ctx) { return lock()->infer(ctx.inputs); };
  op->cpu_kernel = [lock](const ir::KernelContext& ctx) {
    lock()->run_forward(ctx.inputs, ctx.outputs);
  };
  op->grad = [lock](const ir::GradContext& ctx) { return lock()->run_backward(ctx); };
  op->no_cuda_kernel = "none, because the GPU backend does not run sharded blocks yet";
  op->no_sharding_rule = "none, because a sharded block is sharded inside (no nested shard)";
  s.op = keep_op(std::move(op));
}

ShardedBlock::~ShardedBlock() = default;

std::vector<Tensor> ShardedBlock::operator()(const std::vector<Tensor>& inputs) {
  State& s = *state_;
  const std::string& name = s.spec.name;
  CLEAVE_CHECK_ARG(t_tracing == nullptr,
                   "shard '{}': called inside the sharded block '{}'; nested shard is not "
                   "supported (as in MindSpore): shard the outer block only, and give the inner "
                   "operators strategies with Primitive::shard if needed",
                   name, t_tracing == nullptr ? std::string() : t_tracing->name());
  CLEAVE_CHECK_ARG(!ir::tracing(),
                   "shard '{}': called while a GRAPH_MODE step is traced; shard runs inside "
                   "PYNATIVE_MODE code only: set runtime::set_context({{.mode = "
                   "runtime::PYNATIVE_MODE}})",
                   name);
  check_context(name);
  CLEAVE_CHECK_ARG(inputs.size() == s.num_inputs(),
                   "shard '{}': called with {} inputs, but in_strategy has {} entries; give one "
                   "strategy (or std::nullopt) per input",
                   name, inputs.size(), s.num_inputs());
  std::vector<Tensor> all = inputs;
  for (const auto& [pname, p] : s.spec.parameters) all.push_back(p);
  return ir::call(*s.op, std::move(all));
}

size_t ShardedBlock::num_compiled() const { return state_->compiled; }
const std::string& ShardedBlock::name() const { return state_->spec.name; }
const ShardedBlock* ShardedBlock::tracing() { return t_tracing; }

}  // namespace cleave::runtime
