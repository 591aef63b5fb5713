// set_auto_parallel_context: every bad value or combination is an error that names the field and
// what is allowed; the search not built yet says so (kUnimplemented), never falls back silently.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cleave/runtime/context.h"
#include "testing/gradcheck.h"

namespace cleave::runtime {
namespace {

class AutoParallelContextTest : public ::testing::Test {
 protected:
  void TearDown() override { reset_auto_parallel_context(); }
};

TEST_F(AutoParallelContextTest, DefaultsAreMindSporesAndValidSettingsAreKept) {
  const AutoParallelContext& c = get_auto_parallel_context();
  EXPECT_EQ(c.parallel_mode, STAND_ALONE);
  EXPECT_EQ(c.search_mode, "dynamic_programming");
  EXPECT_EQ(c.device_num, 0);
  set_auto_parallel_context({.parallel_mode = AUTO_PARALLEL,
                             .search_mode = "sharding_propagation",
                             .device_num = 8,
                             .dataset_strategy = std::string("data_parallel"),
                             .strategy_ckpt_save_file = "/tmp/s.json"});
  EXPECT_EQ(get_auto_parallel_context().parallel_mode, AUTO_PARALLEL);
  EXPECT_EQ(get_auto_parallel_context().strategy_ckpt_save_file, "/tmp/s.json");
  set_auto_parallel_context(
      {.parallel_mode = SEMI_AUTO_PARALLEL, .dataset_strategy = ir::Strategy{{8, 1}, {8}}});
  EXPECT_EQ(get_auto_parallel_context().parallel_mode, SEMI_AUTO_PARALLEL);
}

TEST_F(AutoParallelContextTest, EverySearchModeIsAccepted) {
  set_auto_parallel_context(
      {.parallel_mode = AUTO_PARALLEL, .search_mode = "recursive_programming"});
  EXPECT_EQ(get_auto_parallel_context().search_mode, "recursive_programming");
  reset_auto_parallel_context();
  // The dynamic programming, MindSpore's default, is accepted.
  set_auto_parallel_context({.parallel_mode = AUTO_PARALLEL});
  EXPECT_EQ(get_auto_parallel_context().search_mode, "dynamic_programming");
  EXPECT_EQ(get_auto_parallel_context().parallel_mode, AUTO_PARALLEL);
}

TEST_F(AutoParallelContextTest, BadValuesNameTheFieldAndWhatIsAllowed) {
  EXPECT_ERROR_KIND(set_auto_parallel_context({.search_mode = "sharding_propagaton"}),
                    ErrorKind::kInvalidArgument, "search_mode is \"sharding_propagaton\"",
                    "expected \"sharding_propagation\", \"dynamic_programming\" or "
                    "\"recursive_programming\"");
  EXPECT_ERROR(set_auto_parallel_context({.parallel_mode = static_cast<ParallelMode>(7)}),
               "parallel_mode is 7", "SEMI_AUTO_PARALLEL or AUTO_PARALLEL");
  EXPECT_ERROR(set_auto_parallel_context({.device_num = -2}), "device_num is -2",
               "expected a positive device count");
  EXPECT_ERROR(set_auto_parallel_context({.device_num = 4, .global_rank = 4}), "global_rank is 4",
               "[0, 4)");
  EXPECT_ERROR(set_auto_parallel_context({.dataset_strategy = std::string("full")}),
               "dataset_strategy is \"full\"", "\"data_parallel\", \"full_batch\"");
  EXPECT_ERROR(set_auto_parallel_context({.dataset_strategy = ir::Strategy{}}),
               "dataset_strategy is an empty strategy");
  EXPECT_ERROR(set_auto_parallel_context({.dataset_strategy = ir::Strategy{{8, 0}}}),
               "has a split 0; splits must be >= 1");
  EXPECT_ERROR(set_auto_parallel_context({.pipeline_micro_batches = 0}),
               "pipeline_micro_batches is 0; expected >= 1");
}

TEST_F(AutoParallelContextTest, ContradictionsAreErrors) {
  EXPECT_ERROR(set_auto_parallel_context(
                   {.dataset_strategy = std::string("data_parallel"), .full_batch = true}),
               "full_batch = true contradicts dataset_strategy \"data_parallel\"");
  EXPECT_ERROR(
      set_auto_parallel_context({.dataset_strategy = ir::Strategy{{8, 1}}, .full_batch = true}),
      "full_batch = true contradicts the dataset_strategy ((8, 1))");
  EXPECT_ERROR(
      set_auto_parallel_context({.parallel_mode = SEMI_AUTO_PARALLEL, .pipeline_micro_batches = 4}),
      "pipeline_micro_batches = 4 is for placed networks", "SEMI_AUTO_PARALLEL");
  EXPECT_ERROR(set_auto_parallel_context(
                   {.parallel_mode = DATA_PARALLEL, .strategy_ckpt_load_file = "s.json"}),
               "strategy_ckpt_load_file holds operator strategies",
               "parallel_mode is DATA_PARALLEL");
  EXPECT_ERROR(set_auto_parallel_context(
                   {.parallel_mode = DATA_PARALLEL, .strategy_ckpt_save_file = "s.json"}),
               "strategy_ckpt_save_file holds operator strategies and parameter layouts",
               "DATA_PARALLEL with enable_parallel_optimizer");
  EXPECT_NO_THROW(set_auto_parallel_context({.parallel_mode = DATA_PARALLEL,
                                             .strategy_ckpt_save_file = "s.json",
                                             .enable_parallel_optimizer = true}));
  EXPECT_ERROR(set_auto_parallel_context({.enable_parallel_optimizer = true}),
               "enable_parallel_optimizer needs parallel_mode DATA_PARALLEL",
               "parallel_mode is STAND_ALONE");
}

TEST_F(AutoParallelContextTest, ParallelOptimizerConfigIsChecked) {
  AutoParallelContext c{.parallel_mode = DATA_PARALLEL, .enable_parallel_optimizer = true};
  c.parallel_optimizer_config.parallel_optimizer_threshold = -1;
  EXPECT_ERROR(set_auto_parallel_context(c), "parallel_optimizer_threshold is -1",
               "expected a size in KB >= 0");
  c.parallel_optimizer_config.parallel_optimizer_threshold = 0;
  for (int64_t bad : {0, 3, -2}) {
    c.parallel_optimizer_config.optimizer_weight_shard_size = bad;
    EXPECT_ERROR(set_auto_parallel_context(c),
                 fmt::format("optimizer_weight_shard_size is {}", bad), "a power of two >= 1");
  }
  c.device_num = 4;
  c.parallel_optimizer_config.optimizer_weight_shard_size = 8;
  EXPECT_ERROR(set_auto_parallel_context(c),
               "optimizer_weight_shard_size is 8, more than "
               "device_num 4");
  c.parallel_optimizer_config.optimizer_weight_shard_size = 2;
  EXPECT_NO_THROW(set_auto_parallel_context(c));
  EXPECT_EQ(get_auto_parallel_context().parallel_optimizer_config.optimizer_weight_shard_size, 2);
}

}  // namespace
}  // namespace cleave::runtime
