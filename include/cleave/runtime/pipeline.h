// The compile pipeline of GRAPH_MODE: one ordered list of passes from a traced step to the graph
// this rank runs, and the load step that makes a compiled plan run on this process.
//
// NOTE [Compile pipeline]
// compile() runs the passes of compile_passes() top to bottom on a CompileState: a pass reads
// the state (the graph so far, what earlier passes decided) and the options, and changes the
// state. A pass that does not apply to the options is skipped, keeping its number k, which names
// its dumps NN_<name>.ir and .dot (NN = k) when the context's save_graphs >= 1 (where they are
// written: docs/design/graph.md, "Compile stages and dumps"). `cleave-ir --passes` prints the
// list for a context.
// Compiling is pure: graph in, graph out. No pass communicates, writes a user's tensor or reads an
// environment variable: what the passes need from the world (the job's size and this rank, the
// contexts) is read once, up front, into CompileOptions, so one process can compile any rank of
// any job (a backend that fails every call is enough). A pass may run user code that traces (the
// forward, the optimizer's update) and write the files it is asked for (dumps, the strategy
// file). What needs the other processes happens in load(): slicing or broadcasting parameters,
// comparing the ranks' traces, making the groups the graph names, the shared-memory mailboxes of a
// placed step, and the executor's memory.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/dump.h"
#include "cleave/ir/graph.h"
#include "cleave/parallel/layout.h"
#include "cleave/parallel/parallel_optimizer.h"
#include "cleave/parallel/partition.h"
#include "cleave/parallel/step_parallel.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/executor.h"

namespace cleave::runtime {

// A step as the user layers describe it (TrainOneStep, Forward).
struct StepProgram {
  std::string name;  // the graph's name prefix ("train_step", "forward")
  struct Input {
    ir::TensorMeta meta;  // as the caller feeds it to run(): this rank's whole batch
    std::string name;     // "data", "label"
  };
  std::vector<Input> inputs;
  // Bound before the forward is traced, in this order, under these names.
  std::vector<std::pair<std::string, Tensor>> parameters;
  // Traces the forward on symbolic inputs (one per `inputs`) and returns its outputs; a
  // training step returns its one-element loss first.
  std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)> forward;
  // Training: the tensors to differentiate (the optimizer's parameters), for each of them the
  // tensors laid out like it (optimizer state of its shape), and the update, traced from one
  // gradient per tensor of `wrt` (undefined where the loss does not reach it). Empty `wrt` and
  // no `update`: an evaluation step without gradients.
  std::vector<Tensor> wrt;
  std::vector<std::vector<Tensor>> wrt_like;
  std::function<void(const std::vector<Tensor>& grads)> update;
  // A forward traced already (parsed from text: ir::parse_text): when set, the trace pass moves
  // the graph out of it instead of calling `forward` (such a program compiles once). Its
  // parameters are the tensors bound to it; its constants are literals when only the graph holds
  // them, as in a trace.
  std::shared_ptr<ir::Graph> traced;
  bool training() const { return update != nullptr; }
};

// Everything the passes read besides the program, read once before they run (NOTE [Compile
// pipeline]).
struct CompileOptions {
  int64_t world_size = 1;  // the job's ranks (1: standalone)
  int64_t rank = 0;        // this process's rank in it
  ParallelMode mode = STAND_ALONE;
  std::string search_mode;         // AUTO_PARALLEL's (empty: sharding_propagation)
  std::string cost_model_profile;  // the search's machine profile (empty: the shipped one)
  // The search's computation costed this many times slower: the job's ranks outnumber the host's
  // cores (NOTE [Ranks sharing cores]; shared_cores_slowdown()).
  double compute_slowdown = 1;
  // The search's objective: parallel::SearchObjective (2, speed; a sharded block's level).
  int search_level = 2;
  AlgoParameters algo;          // the search's (set_algo_parameters)
  CostModelContext cost_model;  // the search's memory capacity and beta
  bool enable_alltoall = true;  // AutoParallelContext::enable_alltoall
  int64_t device_num = 1;       // the devices a parallel step is planned for
  int micro_batches = 1;        // of a training step (an evaluation runs its batch at once)
  // > 1: the threads that may split the batch (NOTE [Threads split the batch]); compile() sets
  // micro_batches to it when the step allows, else sets it back to 1.
  int thread_split = 1;
  parallel::StepParallelOptions step_parallel;
  bool gradients_mean = false;  // gradients_mean or mirror_mean
  bool parameter_broadcast = false;
  double bucket_cap_mb = 25;
  // enable_parallel_optimizer and its config (NOTE [Parallel optimizer] in
  // cleave/parallel/parallel_optimizer.h).
  bool parallel_optimizer = false;
  parallel::OptimizerShardOptions optimizer_shard;
  std::string strategy_load_file, strategy_save_file;
  int save_graphs = 0;
  std::string save_graphs_path = ".";
  // SEMI_AUTO_PARALLEL or AUTO_PARALLEL: the step-parallel rewrite runs.
  bool sharded() const { return mode == SEMI_AUTO_PARALLEL || mode == AUTO_PARALLEL; }
};

// NOTE [Ranks sharing cores]
// The search costs computation with the machine profile's one-thread table: a rank computing at
// one core's rate (parallel::default_cost_model). When a job has more ranks on its host than the
// host has cores -- 4 ranks on 2 cores -- each rank gets cores / ranks of a core, whatever its
// thread count (the model scales a subgroup's collectives likewise: NOTE [Collectives of ranks
// sharing cores] in cleave/parallel/calibrated_cost_model.h). A
// search that did not know it saw computation half as expensive against communication as it is,
// and kept more data parallelism than pays (bench/README.md, "search": 4 workers on 2 cores,
// 10-26% behind the best hand plan). So AUTO_PARALLEL's search costs computation
// shared_cores_slowdown() times slower. Every rank must reach the same plan, and a rank knows
// only its own host: the factor applies where all of the job's ranks share one host
// (cleave::get_local_size() = the world size), and is 1 otherwise (ranks on several hosts; a
// process that joined no job, as thread ranks in one process). The search's summary line says
// when it applies.
//
// max(1, ranks / available cores) for a job whose ranks all run on this host; 1 otherwise. The
// available cores are those before a worker bound itself to one (cores_to_share in
// cleave/runtime/core_binding.h), so every step of the job is costed alike.
double shared_cores_slowdown();

// NOTE [Collectives in place]
// A collective in flight (NOTE [Collectives in flight] in cleave/runtime/executor.h) runs on its
// group's communication thread while the step's thread computes on. Between ranks on one host
// (the shared-memory transport) a collective is work for a core: copying and summing the buffers.
// When the host's ranks times their OpenMP threads fill its cores, no core is left for that
// thread. The collective then only takes turns with the computation, and each of its barriers
// costs a wake-up, because a waiting communication thread sleeps at once (NOTE [Waiting beside
// computation] in src/comm/wait.h). So a job whose ranks all run on this host and fill its cores
// runs every collective in place, on the step's thread. It waits there by polling, as a blocking
// call does.
//
// Measured with `plan_train_bench` under `cleave-run` on 2 cores (bench/README.md, "search"):
// - the MLP's data-parallel step took 7.05 ms in flight against 5.65 ms in place on 4 ranks, and
//   2.50 ms against 2.21 ms on 2 ranks;
// - LeNet's took 2.78 ms against 2.65 ms on 2 ranks;
// - plans with little to reduce did not change.
//
// A job with ranks on other hosts keeps collectives in flight: a network transfer proceeds in the
// kernel and the NIC while the step computes. So does a process that joined no job (ranks as
// threads). This is what the search's prediction assumes too: a gradient reduction hides behind
// the backward only with a core left for it.
//
// Whether a core is left for a communication thread: false for a job whose ranks all run on this
// host when their count times this thread's OpenMP threads is at least the host's available
// cores (cores_to_share); true otherwise.
bool core_left_for_communication();

// NOTE [Threads split the batch]
// A small batch spread op by op over a process's threads gains little: each op is too short for
// its threads to pay (LeNet, batch 32, 2 threads: 1.04-1.09x one thread, bench/README.md "core"),
// while two processes each training half the batch reach 1.9x. So a GRAPH_MODE training step of
// STAND_ALONE on T > 1 intra-op threads (threads::intra_op_threads()), one micro-batch, not
// placed on a job's workers, whose batch T divides, is traced for batch / T rows and expanded
// into T blocks (NOTE [Micro-batches]: the blocks' losses and gradients averaged before the one
// update), when that is the same step (NOTE [Exact batch blocks] in cleave/parallel/batch_split.h:
// no batch statistics, random numbers or sum losses) and a block's forward costs at least 1 MFLOP.
// load() then runs block b's forward and backward on thread b, each with one intra-op thread and
// its own memory, and the update on all T (runtime/thread_split.h). Results equal the one-thread
// step up to the order of the sums (tests/runtime/thread_split_test.cc: losses and parameters
// within 1e-5 relative over 20 steps; like any change of summation order, the difference grows
// slowly as training goes on: 2.5e-5 after 100 MLP steps). Otherwise -- BatchNorm in training,
// Dropout, a batch T does not divide, a step too small -- the step compiles as before, and
// CompiledPlan::thread_split_blocker says why. Context::split_batch_over_threads = false turns it
// off.
//
// The options of `program` in this process: the contexts (get_context,
// get_auto_parallel_context) and the world group's size and this rank. Throws Error for a context
// the job cannot run (a device_num other than the world size, a global_rank other than the job's).
CompileOptions compile_options(const StepProgram& program);

// A parameter (or optimizer state laid out like it) that load() replaces by this rank's slice
// (NOTE [Sharded parameters] in cleave/runtime/sharded_parameters.h).
struct ParameterSlice {
  Tensor tensor;
  std::string name;
  parallel::Layout layout;
  std::vector<Tensor> like;
};

// What the passes share: the graph so far and what earlier passes decided.
struct CompileState {
  const StepProgram& program;
  const CompileOptions& options;
  ir::Graph graph;
  // step_parallel_end onwards in a parallel step; partition onwards in a placed one: `graph` is
  // this rank's (its name ends in _rank<R>).
  bool rank_graph = false;
  std::optional<parallel::ParallelPlan> parallel_plan;
  std::vector<ParameterSlice> parameter_slices;
  std::map<const TensorImpl*, parallel::Layout> layouts;  // sharded parameters of this step
  // The parameters the parallel optimizer splits, with their split (parallel_optimizer onwards).
  std::map<const TensorImpl*, parallel::OptimizerShard> optimizer_shards;
  // The names of its AllGathers (NOTE [Parallel optimizer buckets] in pipeline.cc): their
  // gradients, the ReduceScatters autodiff adds, are named "<name>.grad.<...>".
  std::set<std::string> optimizer_gathers;
  double loss_seed = 1.0;     // the loss's gradient seed (NOTE [Step-parallel rewrite])
  std::vector<Tensor> grads;  // one per program.wrt (autodiff onwards)
  int backward_begin = -1;    // the first node autodiff added
  int mirrors_begin = -1;     // the first node of the gradient reduction
  int step_begin = -1;        // the first node of the optimizer's update
  int tail_begin = -1;        // hoist_collectives: the first node of the step's tail
  std::optional<parallel::Partition> partition;
  int64_t trace_fingerprint = 0;      // placed: what every rank must have traced alike
  bool placed = false;                // partition cut a placed step
  std::vector<std::string> messages;  // for rank 0 to print (propagation's report)
  ir::NodeNotes dump_notes;           // extra lines for this pass's dump
  int pass_number = 0;                // of the pass running: its dump files' NN

  // Writes `graph` as the running pass's NN_<stage>.ir and .dot, under `folder` (empty: the
  // graph's name) of save_graphs_path, when the options ask for dumps (NOTE [Compile pipeline]).
  void dump(const ir::Graph& graph, const std::string& stage, const std::string& folder = "",
            const ir::NodeNotes& notes = {}) const;
};

struct Pass {
  enum class Dump {
    kNone,      // bookkeeping: the graph does not change
    kGraph,     // NN_<name>.ir of the state's graph
    kPartition  // NN_<name>_rank<R>.ir of every rank's graph, in the global graph's folder
  };
  std::string name;
  std::string what;  // what it does, one line for `cleave-ir --passes`
  std::string when;  // when it applies, in words
  // Whether it runs, from the state it would run on (options, program, the graph so far).
  std::function<bool(const CompileState&)> applies;
  std::function<void(CompileState&)> run;
  Dump dump = Dump::kGraph;
};

// The pipeline (NOTE [Compile pipeline]), in order.
const std::vector<Pass>& compile_passes();

// Runs the pass named `name` on `state` as compile() would at its place in the list (its dump
// number), whether or not it applies: for tests and tools that start from a graph. Throws Error
// naming the passes for an unknown name.
void run_pass(const std::string& name, CompileState& state);

// A compiled step: this rank's graph and what load() must do to run it.
struct CompiledPlan {
  CompileOptions options;
  ir::Graph graph;
  size_t num_inputs = 0;  // StepProgram::inputs
  bool placed = false;    // a placed step cut into per-rank graphs
  std::vector<parallel::CutEdge> cuts;
  int64_t trace_fingerprint = 0;
  std::vector<ParameterSlice> parameter_slices;
  std::vector<Tensor> broadcast_parameters;  // DATA_PARALLEL with parameter_broadcast
  std::vector<std::string> messages;
  int execute_dump_number = 0;  // the load step's NN_execute dump
  // Why the threads do not split this step's batch (NOTE [Threads split the batch]), when
  // options.thread_split asked and the step did not allow it; empty otherwise.
  std::string thread_split_blocker;
};

// Traces and compiles `program` for options.rank (NOTE [Compile pipeline]). Throws Error for a
// program the options cannot run (an invalid strategy, a batch the micro-batches do not divide,
// placement combined with a parallel mode).
CompiledPlan compile(const StepProgram& program, const CompileOptions& options);

class ThreadSplit;  // runtime/thread_split.h

// A step loaded on this process, and how to feed it.
class CompiledStep {
 public:
  CompiledStep(std::unique_ptr<Executor> executor, int micro_batches, size_t num_inputs);
  // A step whose batch the threads split (NOTE [Threads split the batch]).
  CompiledStep(std::unique_ptr<ThreadSplit> split, size_t num_inputs);
  ~CompiledStep();

  // Runs the step on this rank's inputs (one per StepProgram::inputs, whole batches: with
  // micro-batches they are cut here). Returns the outputs; none on a rank of a placed step that
  // does not produce them.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // Per input of StepProgram::inputs: whether the step reads it (any micro-batch's slice of it).
  std::vector<bool> inputs_read() const;
  // The step's executor; with threads splitting the batch, the update's (the blocks' executors
  // are ThreadSplit's).
  Executor& executor();
  const Executor& executor() const;
  int micro_batches() const { return micro_batches_; }
  // The threads splitting the batch (1: none).
  int thread_split() const;

 private:
  std::vector<Tensor> micro_batch_feed(const std::vector<Tensor>& inputs) const;

  std::unique_ptr<Executor> executor_;
  std::unique_ptr<ThreadSplit> split_;
  int micro_batches_;
  size_t num_inputs_;
};

// Makes `plan` run on this process (NOTE [Compile pipeline]): slices its parameters (a parallel
// step) or broadcasts them (parameter_broadcast), checks that every worker of a placed step traced
// the same step, makes the groups its graph names, sets up the shared-memory mailboxes of its cut
// edges, and plans and allocates the executor's memory (the NN_execute dump). Collective in a job:
// every rank loads the plan of the same step at the same time. Throws Error when the ranks differ
// or a resource cannot be had.
std::unique_ptr<CompiledStep> load(CompiledPlan plan);

// load(compile(program, compile_options(program))): what TrainOneStep and Forward call; rank 0
// prints the plan's messages on stderr.
std::unique_ptr<CompiledStep> compile_step(const StepProgram& program);

}  // namespace cleave::runtime
