#include "cleave/runtime/context.h"

#include <cmath>

#include "cleave/core/error.h"
#include "cleave/ir/graph.h"
#include "cleave/parallel/machine_profile.h"

namespace cleave::runtime {
namespace {
Context& global_context() {
  static Context context;
  return context;
}
}  // namespace

void set_context(const Context& context) {
  CLEAVE_CHECK_ARG(context.mode == GRAPH_MODE || context.mode == PYNATIVE_MODE,
                   "set_context: mode is {}; expected GRAPH_MODE or PYNATIVE_MODE",
                   static_cast<int>(context.mode));
  CLEAVE_CHECK_ARG(context.save_graphs >= 0, "set_context: save_graphs is {}; expected >= 0",
                   context.save_graphs);
  global_context() = context;
}

const Context& get_context() { return global_context(); }

namespace {
AutoParallelContext& global_auto_parallel_context() {
  static AutoParallelContext context;
  return context;
}
}  // namespace

const char* parallel_mode_name(ParallelMode mode) {
  switch (mode) {
    case STAND_ALONE:
      return "STAND_ALONE";
    case DATA_PARALLEL:
      return "DATA_PARALLEL";
    case SEMI_AUTO_PARALLEL:
      return "SEMI_AUTO_PARALLEL";
    case AUTO_PARALLEL:
      return "AUTO_PARALLEL";
  }
  return "?";
}

std::string dataset_strategy_kind(const AutoParallelContext& context) {
  if (const auto* kind = std::get_if<std::string>(&context.dataset_strategy)) {
    if (!kind->empty()) return *kind;
    return context.full_batch ? "full_batch" : "data_parallel";
  }
  return "";
}

void set_auto_parallel_context(const AutoParallelContext& context) {
  const char* who = "set_auto_parallel_context";
  CLEAVE_CHECK_ARG(context.parallel_mode >= STAND_ALONE && context.parallel_mode <= AUTO_PARALLEL,
                   "{}: parallel_mode is {}; expected STAND_ALONE, DATA_PARALLEL, "
                   "SEMI_AUTO_PARALLEL or AUTO_PARALLEL",
                   who, static_cast<int>(context.parallel_mode));
  const std::string& search = context.search_mode;
  CLEAVE_CHECK_ARG(search == "sharding_propagation" || search == "dynamic_programming" ||
                       search == "recursive_programming",
                   "{}: search_mode is \"{}\"; expected \"sharding_propagation\", "
                   "\"dynamic_programming\" or \"recursive_programming\"",
                   who, search);
  CLEAVE_CHECK_ARG(context.device_num >= 0,
                   "{}: device_num is {}; expected a positive device count (0: the world size)",
                   who, context.device_num);
  CLEAVE_CHECK_ARG(
      context.global_rank >= -1 &&
          (context.device_num == 0 || context.global_rank < context.device_num),
      "{}: global_rank is {}; expected -1 (this process's rank) or a rank in [0, {})", who,
      context.global_rank,
      context.device_num == 0 ? std::string("device_num") : std::to_string(context.device_num));
  if (const auto* kind = std::get_if<std::string>(&context.dataset_strategy)) {
    CLEAVE_CHECK_ARG(kind->empty() || *kind == "data_parallel" || *kind == "full_batch",
                     "{}: dataset_strategy is \"{}\"; expected \"data_parallel\", "
                     "\"full_batch\" or one strategy per dataset column",
                     who, *kind);
    CLEAVE_CHECK_ARG(!(context.full_batch && *kind == "data_parallel"),
                     "{}: full_batch = true contradicts dataset_strategy \"data_parallel\"; set "
                     "one of them",
                     who);
  } else {
    const auto& strategy = std::get<ir::Strategy>(context.dataset_strategy);
    CLEAVE_CHECK_ARG(!strategy.empty(),
                     "{}: dataset_strategy is an empty strategy; expected one entry per dataset "
                     "column",
                     who);
    for (const auto& entry : strategy) {
      for (int64_t s : entry) {
        CLEAVE_CHECK_ARG(s >= 1, "{}: dataset_strategy {} has a split {}; splits must be >= 1", who,
                         ir::strategy_to_string(strategy), s);
      }
    }
    CLEAVE_CHECK_ARG(!context.full_batch,
                     "{}: full_batch = true contradicts the dataset_strategy {}; set one of them",
                     who, ir::strategy_to_string(strategy));
  }
  CLEAVE_CHECK_ARG(std::isfinite(context.bucket_cap_mb) && context.bucket_cap_mb >= 0,
                   "{}: bucket_cap_mb is {}; expected a size in MiB >= 0 (0: one AllReduce per "
                   "gradient)",
                   who, context.bucket_cap_mb);
  const AutoParallelContext::ParallelOptimizerConfig& po = context.parallel_optimizer_config;
  CLEAVE_CHECK_ARG(po.parallel_optimizer_threshold >= 0,
                   "{}: parallel_optimizer_config.parallel_optimizer_threshold is {}; expected a "
                   "size in KB >= 0 (parameters smaller than it stay replicated)",
                   who, po.parallel_optimizer_threshold);
  const int64_t k = po.optimizer_weight_shard_size;
  CLEAVE_CHECK_ARG(k == -1 || (k >= 1 && (k & (k - 1)) == 0),
                   "{}: parallel_optimizer_config.optimizer_weight_shard_size is {}; expected -1 "
                   "(every rank of a parameter's mirror group) or a power of two >= 1",
                   who, k);
  CLEAVE_CHECK_ARG(k == -1 || context.device_num <= 0 || k <= context.device_num,
                   "{}: parallel_optimizer_config.optimizer_weight_shard_size is {}, more than "
                   "device_num {}; expected at most the device count",
                   who, k, context.device_num);
  CLEAVE_CHECK_ARG(!context.enable_parallel_optimizer || context.parallel_mode != STAND_ALONE,
                   "{}: enable_parallel_optimizer needs parallel_mode DATA_PARALLEL, "
                   "SEMI_AUTO_PARALLEL or AUTO_PARALLEL (it splits what replicas hold); "
                   "parallel_mode is STAND_ALONE",
                   who);
  CLEAVE_CHECK_ARG(context.pipeline_micro_batches >= 1,
                   "{}: pipeline_micro_batches is {}; expected >= 1", who,
                   context.pipeline_micro_batches);
  CLEAVE_CHECK_ARG(context.pipeline_micro_batches == 1 || context.parallel_mode == STAND_ALONE,
                   "{}: pipeline_micro_batches = {} is for placed networks (Cell::place) in "
                   "STAND_ALONE mode; with parallel_mode {} it is not supported yet",
                   who, context.pipeline_micro_batches, parallel_mode_name(context.parallel_mode));
  const bool sharded =
      context.parallel_mode == SEMI_AUTO_PARALLEL || context.parallel_mode == AUTO_PARALLEL;
  CLEAVE_CHECK_ARG(
      sharded || context.strategy_ckpt_load_file.empty(),
      "{}: strategy_ckpt_load_file holds operator strategies, which only SEMI_AUTO_PARALLEL and "
      "AUTO_PARALLEL have; parallel_mode is {}",
      who, parallel_mode_name(context.parallel_mode));
  CLEAVE_CHECK_ARG(
      sharded || context.strategy_ckpt_save_file.empty() ||
          (context.parallel_mode == DATA_PARALLEL && context.enable_parallel_optimizer),
      "{}: strategy_ckpt_save_file holds operator strategies and parameter layouts, which only "
      "SEMI_AUTO_PARALLEL and AUTO_PARALLEL have (and DATA_PARALLEL with "
      "enable_parallel_optimizer, whose parameters are split); parallel_mode is {}",
      who, parallel_mode_name(context.parallel_mode));
  if (!context.cost_model_profile.empty()) {
    try {
      parallel::load_machine_profile(context.cost_model_profile);
    } catch (const Error& e) {
      CLEAVE_FAIL("{}: cost_model_profile: {}", who, e.what());
    }
  }
  global_auto_parallel_context() = context;
}

namespace {
AlgoParameters& global_algo_parameters() {
  static AlgoParameters parameters;
  return parameters;
}
CostModelContext& global_cost_model_context() {
  static CostModelContext context;
  return context;
}
}  // namespace

void set_algo_parameters(const AlgoParameters& parameters) {
  CLEAVE_CHECK_ARG(
      std::isfinite(parameters.algo_approxi_epsilon) && parameters.algo_approxi_epsilon > 0,
      "set_algo_parameters: algo_approxi_epsilon is {}; expected a finite value > 0 (default 0.1)",
      parameters.algo_approxi_epsilon);
  CLEAVE_CHECK_ARG(
      parameters.tensor_slice_align_size >= 1 && parameters.tensor_slice_align_size <= 1024,
      "set_algo_parameters: tensor_slice_align_size is {}; expected an element count in "
      "[1, 1024] (default 16)",
      parameters.tensor_slice_align_size);
  global_algo_parameters() = parameters;
}

const AlgoParameters& get_algo_parameters() { return global_algo_parameters(); }

void reset_algo_parameters() { global_algo_parameters() = AlgoParameters{}; }

void set_cost_model_context(const CostModelContext& context) {
  CLEAVE_CHECK_ARG(
      std::isfinite(context.device_memory_capacity) && context.device_memory_capacity >= 0,
      "set_cost_model_context: device_memory_capacity is {}; expected bytes per rank >= 0 (0: no "
      "limit)",
      context.device_memory_capacity);
  CLEAVE_CHECK_ARG(std::isfinite(context.costmodel_beta) && context.costmodel_beta >= 0,
                   "set_cost_model_context: costmodel_beta is {}; expected a finite weight >= 0 "
                   "(default 1)",
                   context.costmodel_beta);
  global_cost_model_context() = context;
}

const CostModelContext& get_cost_model_context() { return global_cost_model_context(); }

void reset_cost_model_context() { global_cost_model_context() = CostModelContext{}; }

void reset_auto_parallel_context() { global_auto_parallel_context() = AutoParallelContext{}; }

const AutoParallelContext& get_auto_parallel_context() { return global_auto_parallel_context(); }

}  // namespace cleave::runtime
