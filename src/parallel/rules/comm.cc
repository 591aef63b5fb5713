// The communication primitives have no sharding: a SEMI_AUTO_PARALLEL or AUTO_PARALLEL graph gets
// its communication from the rewrite (redistribution, forward and mirror operators), and a
// collective the user wrote into such a graph is an error, as in MindSpore.
#include "cleave/core/error.h"
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

class CommRule : public ShardingRule {
 public:
  std::string summary() const override {
    return "none: a communication primitive in a SEMI_AUTO_PARALLEL or AUTO_PARALLEL graph is an "
           "error (the rewrite inserts the communication)";
  }
  OpSharding infer(const RuleContext& ctx, const ir::Strategy&) const override { reject(ctx); }
  ir::Strategy default_strategy(const RuleContext& ctx) const override { reject(ctx); }
  std::vector<OpSharding> shardings(const RuleContext&) const override { return {}; }

 private:
  [[noreturn]] static void reject(const RuleContext& ctx) {
    CLEAVE_FAIL(
        "{}: a communication primitive cannot be part of a SEMI_AUTO_PARALLEL or AUTO_PARALLEL "
        "graph; the parallel rewrite inserts the communication its strategies need (use "
        "collectives in STAND_ALONE or DATA_PARALLEL mode, or shard() the operators instead)",
        describe_op(ctx));
  }
};

}  // namespace

void register_comm() {
  add({"AllReduce", "FusedAllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce",
       "AlltoAll", "NeighborExchange", "NeighborExchangeV2", "NeighborExchangeV2Grad", "Send",
       "Recv", "RpcSend", "RpcRecv"},
      std::make_shared<CommRule>());
}

}  // namespace cleave::parallel::rules
