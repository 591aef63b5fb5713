// The execution context (MindSpore's set_context): GRAPH_MODE or PYNATIVE_MODE, IR dumps.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "cleave/ir/graph.h"

namespace cleave::runtime {

// GRAPH_MODE (the default, as in the seeds) traces a training step into a graph, compiles it once
// per input signature and executes the compiled graph; PYNATIVE_MODE runs each op at once.
enum Mode { GRAPH_MODE = 0, PYNATIVE_MODE = 1 };

struct Context {
  Mode mode = GRAPH_MODE;
  // >= 1: write the graph after each compiler stage as NN_<stage>.ir and NN_<stage>.dot under
  // save_graphs_path/<graph name>/ (NOTE [Compile pipeline] in cleave/runtime/pipeline.h).
  int save_graphs = 0;
  std::string save_graphs_path = ".";
  // GRAPH_MODE training on several threads: the threads split each batch into blocks computed
  // apart when that gives the same step (NOTE [Threads split the batch] in
  // cleave/runtime/pipeline.h); false: every op spreads over the threads on its own.
  bool split_batch_over_threads = true;
};

// Replaces the process-wide context. save_graphs must be >= 0.
void set_context(const Context& context);
const Context& get_context();

// MindSpore's parallel modes (ms.ParallelMode):
//   STAND_ALONE         every process trains the whole model on its own data (the default);
//   DATA_PARALLEL       every rank holds the whole model and reads its slice of each batch; the
//                       gradients are all-reduced (averaged with gradients_mean) before the update;
//   SEMI_AUTO_PARALLEL  operators are sharded by their shard() strategies (the others data
//                       parallel when their batch allows, else replicated): the step-parallel
//                       rewrite (cleave/parallel/step_parallel.h) slices parameters and inserts
//                       the communication; training equals one device's;
//   AUTO_PARALLEL       as SEMI_AUTO_PARALLEL, but the operators without a strategy get one
//                       from the search (search_mode): "sharding_propagation" spreads the
//                       shard() strategies to their neighbours (cleave/parallel/propagation.h);
//                       "dynamic_programming" searches every operator's strategy from the cost
//                       model for the cheapest plan (cleave/parallel/search.h);
//                       "recursive_programming" (SAPP) bisects the devices level by level, a
//                       fast heuristic for large graphs and device counts. Both read
//                       set_algo_parameters and set_cost_model_context below.
enum ParallelMode : int {
  STAND_ALONE = 0,
  DATA_PARALLEL = 1,
  SEMI_AUTO_PARALLEL = 2,
  AUTO_PARALLEL = 3
};
// "STAND_ALONE", "DATA_PARALLEL", ...
const char* parallel_mode_name(ParallelMode mode);

// MindSpore's set_auto_parallel_context. Fields a program does not set keep these defaults; every
// value is checked by set_auto_parallel_context, whose errors name the field and what is allowed.
struct AutoParallelContext {
  ParallelMode parallel_mode = STAND_ALONE;
  // AUTO_PARALLEL's strategy search: "sharding_propagation", "dynamic_programming" or
  // "recursive_programming" (MindSpore's names and default).
  std::string search_mode = "dynamic_programming";
  // Devices the strategies are planned for; 0: the job's world size. A parallel step compiled in
  // a job of another size is an error.
  int64_t device_num = 0;
  // This process's rank in the plan; -1: its world rank (another value in a job is an error).
  int64_t global_rank = -1;
  // DATA_PARALLEL: average the all-reduced gradients over the ranks (MindSpore's gradients_mean;
  // seed 001's older name mirror_mean means the same, either turns it on). SEMI_AUTO_PARALLEL
  // computes the single-device gradient either way (NOTE [Step-parallel rewrite]).
  bool gradients_mean = false;
  bool mirror_mean = false;
  // DATA_PARALLEL: broadcast rank 0's parameters before the first step.
  bool parameter_broadcast = false;
  // DATA_PARALLEL: the gradients are all-reduced in buckets of at most this many MiB (the first
  // at most 1 MiB), each started as soon as its last gradient is computed (NOTE [Gradient
  // buckets] in cleave/parallel/data_parallel.h); 0: one AllReduce per gradient. PyTorch DDP's
  // bucket_cap_mb, with its default.
  double bucket_cap_mb = 25;
  // How each rank's dataset batches relate to the global batch the step is planned for:
  // "data_parallel" (each rank's batch is its slice of dim 0: the global batch is device_num
  // times larger), "full_batch" (every rank reads the whole batch), or one strategy per input
  // (ir::Strategy{{8, 1}, {8}}). Empty: "full_batch" when full_batch is set, else
  // "data_parallel" (MindSpore's default).
  std::variant<std::string, ir::Strategy> dataset_strategy = std::string();
  // The deprecated form of dataset_strategy = "full_batch".
  bool full_batch = false;
  // Strategy files (SEMI_AUTO_PARALLEL, AUTO_PARALLEL; DATA_PARALLEL with the parallel
  // optimizer may save one, holding the layouts of the parameters it splits, for checkpoints
  // between device counts): every compiled step writes its
  // operators' strategies and its parameters' layouts to strategy_ckpt_save_file, and takes the
  // strategies strategy_ckpt_load_file names instead of shard()'s or propagation's
  // (cleave/parallel/strategy_file.h, NOTE [Strategy file]).
  std::string strategy_ckpt_save_file;
  std::string strategy_ckpt_load_file;
  // The machine profile (JSON, written by cleave-calibrate) whose calibrated cost model the
  // strategy search plans with (cleave/parallel/calibrated_cost_model.h); empty: the profile
  // shipped with cleave. set_auto_parallel_context reads and checks the file.
  std::string cost_model_profile;
  // For a placed network (Cell::place / Primitive::place after cleave::init()): > 1 splits each
  // training batch into this many micro-batches (the batch size must be divisible by it) that run
  // through the placed stages on a 1F1B schedule, so that ranks compute at the same time;
  // gradients and the loss are averaged over the micro-batches, which equals the unpipelined step
  // when the loss is a mean over the batch. 1 (the default): no micro-batching.
  int pipeline_micro_batches = 1;
  // MindSpore's switch for AlltoAll in redistribution (parallel::AllToAllScope). On, the
  // planner moves a split from one dimension to another with one AlltoAll; off, with an
  // AllGather and a local slice, as MindSpore does by default. cleave's default is on: the
  // AlltoAll sends 1/n of the bytes, and every backend here has one (docs/design/search.md,
  // section 7).
  bool enable_alltoall = true;
  // MindSpore's parallel optimizer (NOTE [Parallel optimizer] in
  // cleave/parallel/parallel_optimizer.h): in DATA_PARALLEL, SEMI_AUTO_PARALLEL and
  // AUTO_PARALLEL training on several devices, each trainable parameter's weight, gradient and
  // optimizer state are split by their first dimension over the ranks that would otherwise hold
  // replicas of them (its mirror group); the forward gathers the weight (AllGather), the backward
  // reduce-scatters its gradient, and each rank updates only its slice. Off by default, as in
  // MindSpore.
  bool enable_parallel_optimizer = false;
  struct ParallelOptimizerConfig {
    // MindSpore shards the accumulated gradients of gradient accumulation with it. cleave
    // accumulates gradients only over the micro-batches of a placed (STAND_ALONE) network, which
    // has no replicas to shard over: accepted, and without effect.
    bool gradient_accumulation_shard = false;
    // Parameters smaller than this many KB (numel * dtype size / 1024) stay replicated: their
    // gathers would cost more than the memory they save. >= 0; MindSpore's default.
    int64_t parallel_optimizer_threshold = 64;
    // The ranks a parameter is split over: -1 (the default) every rank of its mirror group; a
    // power of two k >= 1 splits it over k of them (the group's innermost ranks: consecutive
    // ones in DATA_PARALLEL), the remaining replicas still all-reduce. A parameter whose mirror
    // group k does not divide is split over the whole group (as in MindSpore).
    int64_t optimizer_weight_shard_size = -1;
  };
  ParallelOptimizerConfig parallel_optimizer_config;
};

// Replaces the process-wide auto-parallel context. Throws Error (and keeps the previous context)
// for a value or combination that is not allowed, naming the field and the accepted values.
void set_auto_parallel_context(const AutoParallelContext& context);
const AutoParallelContext& get_auto_parallel_context();
// Back to the defaults (MindSpore's reset_auto_parallel_context).
void reset_auto_parallel_context();
// MindSpore's set_algo_parameters: how AUTO_PARALLEL's searches ("dynamic_programming",
// "recursive_programming") choose candidates (NOTE [Algorithm parameters] in
// cleave/parallel/search.h; docs/design/search.md has the table). MindSpore's names and defaults.
struct AlgoParameters {
  // Only strategies using every device (an op that cannot: those using the most it can).
  bool fully_use_devices = true;
  // An elementwise op takes the layout its producer's output has (no redistribution between).
  bool elementwise_op_strategy_follow = false;
  // Thin each op's candidates: drop one costing at most (1 + algo_approxi_epsilon) times a kept
  // one that needs no more memory. algo_approxi_epsilon must be > 0.
  bool enable_algo_approxi = false;
  double algo_approxi_epsilon = 0.1;
  // MatMul and BatchMatMul: a split of an input's last two dimensions must leave slices of a
  // multiple of tensor_slice_align_size elements (in [1, 1024]).
  bool tensor_slice_align_enable = false;
  int64_t tensor_slice_align_size = 16;
};
// Replaces the algorithm parameters; throws Error (keeping the previous ones) naming the key and
// the accepted values.
void set_algo_parameters(const AlgoParameters& parameters);
const AlgoParameters& get_algo_parameters();
void reset_algo_parameters();

// MindSpore's cost-model context (set_cost_model_context), the keys cleave's cost model in
// seconds honours:
struct CostModelContext {
  // Bytes each rank may hold for the slices the cost model counts (NOTE [Cost graph]); a search
  // whose every plan needs more fails naming the least any plan needs. MindSpore's default is
  // 16 GiB for its accelerators; cleave's 0 means no limit, for CPU ranks: they share the host's
  // memory (and its paging) with one another, and a limit that never binds only slows the
  // dynamic programming (Pareto fronts instead of single minima).
  double device_memory_capacity = 0;
  // beta, the weight of communication against computation (compute + beta * communication).
  // MindSpore's costmodel_beta (400 on Ascend, 50 on GPU) weighs its byte-count costs; cleave's
  // costs are both seconds, so its default is 1: a second of either costs the same. >= 0.
  double costmodel_beta = 1.0;
};
// Replaces the cost-model context; throws Error (keeping the previous one) naming the key and the
// accepted values.
void set_cost_model_context(const CostModelContext& context);
const CostModelContext& get_cost_model_context();
void reset_cost_model_context();

// The dataset strategy in effect: "data_parallel", "full_batch", or "" when it is per input
// (context.dataset_strategy holds the strategies).
std::string dataset_strategy_kind(const AutoParallelContext& context);

// What this process spent running placed (partitioned) graphs since it started or since
// reset_placed_run_stats(): time inside op kernels, time blocked waiting for data from other
// ranks (RpcRecv), and the number of graph runs.
struct PlacedRunStats {
  double compute_seconds = 0;
  double recv_wait_seconds = 0;
  int64_t runs = 0;
};
PlacedRunStats placed_run_stats();
// Adds one run (the executor of placed graphs calls it).
void add_placed_run_stats(double compute_seconds, double recv_wait_seconds);
void reset_placed_run_stats();

// Per-op times of the placed graphs, for measuring what a perfect schedule would take (bench/run.sh
// place): off by default; while on, the executor of each placed graph adds every op's time to
// these sums (reset_placed_run_stats() clears them). One entry per op of each graph, in the order
// the graph runs them. `seconds` is the CPU time of the thread running the op (not counting the
// time it was descheduled); for RpcSend/RpcRecv, the CPU time spent sending or waiting. Costs
// two clock_gettime calls per op: for a separate measuring run.
struct PlacedOpTime {
  std::string graph;  // the graph's name
  std::string op;     // the primitive
  std::string node;   // the node's name
  int tag = -1;       // RpcSend/RpcRecv: the cut edge's tag
  double seconds = 0;
  int64_t runs = 0;
};
void set_placed_op_profiling(bool on);
bool placed_op_profiling();
std::vector<PlacedOpTime> placed_op_times();
// The executor adds one run of `graph` with the given time per node (0 for nodes that are not ops).
void add_placed_op_times(const ir::Graph& graph, const std::vector<double>& node_seconds);

}  // namespace cleave::runtime
