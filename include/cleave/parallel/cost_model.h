// Cost model: how long an op and a redistribution are estimated to take, for planning (the
// schedule simulation of partition(), the strategy search).
//
// NOTE [Cost model]
// Two estimates live here. estimate_op_cost() reads only the shapes of a graph and answers in
// abstract units (place()'s schedule simulation uses it). CostModel answers in seconds and bytes
// for one rank: an operator under one sharding (OpCost) and a redistribution plan. Its primitives
// are the time of a computation of a compute class (ShardingRule::compute_class) of so many
// floating-point operations touching so many bytes, and the time of a collective in which each
// rank sends so many bytes (the ring figure that OpSharding::forward_comm_bytes and
// RedistributionStep::bytes already hold) over a group of so many ranks. Everything else
// (op_cost, redistribution_s) is composed from those two, so a model calibrated on a machine
// (measured throughputs, latencies and bandwidths) and a constant one differ only in them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cleave/ir/graph.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel {

// The estimated time of op `node` of `graph`, in cost units (at least 1): a fixed overhead of 1,
// plus memory traffic (1 per 4096 elements read or written), plus, for the ops that multiply (the
// compute class of their sharding rule: MatMul, BatchMatMul, Conv2D and its backward ops), the
// square root of the product of the element counts of their operands and results / 4096: the
// multiply-add count of a matmul (mk * kn * mn = (mkn)^2), and close to it for a convolution.
// Requires node.is_op() and inputs that refer to nodes of `graph`.
double estimate_op_cost(const ir::Graph& graph, const ir::Node& node);

// The collectives a plan can contain, as the cost model tells them apart.
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast };

// What one operator costs one rank under one sharding (NOTE [Cost model]).
struct OpCost {
  double compute_s = 0;     // the rank's slice of the forward computation
  double comm_s = 0;        // the forward communication the sharding needs (partial outputs)
  double memory_bytes = 0;  // the slices of its inputs and outputs that the rank holds
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Seconds for a computation of class `cls` doing `flops` floating-point operations and reading
  // and writing `bytes`, on one rank.
  virtual double compute_s(ShardingRule::ComputeClass cls, double flops, double bytes) const = 0;
  // Seconds for collective `c` over `group_size` ranks in which each rank sends `bytes_sent`
  // (0 for a group of one).
  virtual double collective_s(Collective c, double bytes_sent, int64_t group_size) const = 0;
  // Seconds of the op slice named `key` (op_slice_key in cleave/parallel/search.h: a slice's
  // forward and the gradients the key names) where the model has it timed on the machine; nullopt
  // where not, and always for a model without timings (NOTE [Measured op slices]).
  virtual std::optional<double> measured_s(const std::string& key) const {
    (void)key;
    return std::nullopt;
  }
  // Whether the model holds any timed op slice (callers make keys only then).
  virtual bool has_measured_ops() const { return false; }

  // The cost of `sharding` of the op `ctx` describes, on one rank.
  OpCost op_cost(const RuleContext& ctx, const OpSharding& sharding) const;
  // Seconds for every step of `plan` (a local slice costs its copy).
  double redistribution_s(const RedistributionPlan& plan) const;
  double redistribution_s(const RedistributionCost& cost) const;
};

// A model of constant throughputs, latency and bandwidth (for tests and what-if planning). The
// defaults are round figures of one core of a current x86 server.
class ConstantCostModel : public CostModel {
 public:
  struct Rates {
    double matmul_flops_per_s = 50e9;
    double conv_flops_per_s = 30e9;
    double memory_bytes_per_s = 5e9;
    double latency_s = 20e-6;            // per step of a collective
    double bandwidth_bytes_per_s = 2e9;  // per rank sending
  };
  ConstantCostModel() = default;
  explicit ConstantCostModel(Rates rates) : rates_(rates) {}
  double compute_s(ShardingRule::ComputeClass cls, double flops, double bytes) const override;
  double collective_s(Collective c, double bytes_sent, int64_t group_size) const override;
  const Rates& rates() const { return rates_; }

 private:
  Rates rates_;
};

// The model the search uses when the context names no machine profile: the calibrated model
// (cleave/parallel/calibrated_cost_model.h) of the profile shipped with cleave, for ranks on one
// host (backend "shm"), one thread per rank; cost_model_for_profile("").
const CostModel& default_cost_model();

}  // namespace cleave::parallel
