// AUTO_PARALLEL with search_mode "dynamic_programming" (NOTE [Dynamic programming search] in
// cleave/parallel/search.h) on thread ranks: seed 001's ResNet (examples/common/resnet.h, the
// small configuration on 16x16 images), its SoftmaxCrossEntropyExpand and Momentum(0.01, 0.9),
// trained by 2 ranks each reading its half of the batch, gives one process's losses.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "cleave/cleave.h"
#include "common/resnet.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

std::mutex g_init_mutex;  // the global generator is not thread-safe

std::vector<double> train_resnet(const Tensor& x, const Tensor& y, int steps) {
  std::shared_ptr<examples::ResNet> net;
  {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    set_seed(1);
    net = examples::resnet_small(10);
  }
  auto loss = std::make_shared<examples::SoftmaxCrossEntropyExpand>(/*sparse=*/true);
  auto with_loss = std::make_shared<nn::WithLossCell>(net, loss);
  optim::TrainOneStep step(with_loss,
                           std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(step(x, y).item());
  return losses;
}

TEST(AutoParallelSearch, SeedOnesResNetOnTwoRanksTrainsAsOneProcess) {
  const int steps = 4, world = 2, batch = 4;
  set_seed(3);
  const Tensor x = Tensor::uniform({batch, 3, 16, 16});
  const Tensor y = Tensor::from_vector<int32_t>({3, 7, 1, 3}, Shape{batch});
  runtime::reset_auto_parallel_context();
  const std::vector<double> single = train_resnet(x, y, steps);
  runtime::set_auto_parallel_context({.parallel_mode = runtime::AUTO_PARALLEL,
                                      .search_mode = "dynamic_programming",
                                      .mirror_mean = true});
  std::vector<std::vector<double>> runs(world);
  ::testing::internal::CaptureStderr();
  testing::run_thread_job(world, [&](int rank) {
    const int64_t rows = batch / world;
    runs[rank] = train_resnet(x.narrow_rows(rank * rows, rows).clone(),
                              y.narrow_rows(rank * rows, rows).clone(), steps);
  });
  runtime::reset_auto_parallel_context();
  // Rank 0 said what the search did.
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("dynamic programming: "), std::string::npos) << said;
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(runs[rank].size(), single.size());
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(runs[rank][s], single[s], 1e-5 * std::abs(single[s]))
          << "rank " << rank << " step " << s;
    }
  }
}

}  // namespace
}  // namespace cleave
