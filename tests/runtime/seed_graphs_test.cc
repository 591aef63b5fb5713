// The compiled graphs of the seeds' training steps, stage by stage, against golden dumps
// (tests/runtime/golden/seeds/<seed>/): seed 000's LeNet placed on 8 workers (train and eval
// steps), seed 001's ResNet-50 in DATA_PARALLEL on 2 ranks, seed 002's manual data parallel
// network on 8 ranks, seed 003's sharding propagation on 8 ranks. Ranks are threads over the
// inproc backend; every rank compiles and runs one step with save_graphs on, and every dump file
// must equal its golden. Graph names are normalised ("train_step_12" -> "train_step"): the
// counter behind them is process-wide. CLEAVE_UPDATE_GOLDEN=1 rewrites the goldens instead.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "cleave/cleave.h"
#include "comm/thread_world.h"
#include "common/lenet.h"
#include "common/manual_parallel.h"
#include "common/resnet.h"
#include "common/sharding_propagation.h"

namespace cleave {
namespace {

namespace fs = std::filesystem;

std::mutex g_init_mutex;  // the global generator is not thread-safe

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string normalise(const std::string& text) {
  static const std::regex counter("(train_step|forward)_[0-9]+");
  return std::regex_replace(text, counter, "$1");
}

// Every .ir file under `dir`, keyed by its normalised path relative to `dir`.
std::map<std::string, std::string> dumps(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".ir") continue;
    out[normalise(fs::relative(e.path(), dir).string())] = normalise(read_file(e.path()));
  }
  return out;
}

// Runs fn(rank) on `world` thread ranks with save_graphs into a fresh folder and compares the
// dumps with tests/runtime/golden/seeds/<seed>/.
void check_against_golden(const std::string& seed, int world,
                          const runtime::AutoParallelContext& parallel,
                          const std::function<void(int rank)>& fn) {
  const fs::path out = fs::temp_directory_path() / ("cleave_seed_graphs_" + seed);
  fs::remove_all(out);
  runtime::set_context(
      {.mode = runtime::GRAPH_MODE, .save_graphs = 1, .save_graphs_path = out.string()});
  runtime::set_auto_parallel_context(parallel);
  testing::run_thread_job(world, fn);
  runtime::reset_auto_parallel_context();
  runtime::set_context({});
  const std::map<std::string, std::string> got = dumps(out);
  const fs::path golden = fs::path(CLEAVE_TESTS_DIR) / "runtime/golden/seeds" / seed;
  if (const char* update = std::getenv("CLEAVE_UPDATE_GOLDEN"); update && *update == '1') {
    fs::remove_all(golden);
    for (const auto& [name, text] : got) {
      fs::create_directories((golden / name).parent_path());
      std::ofstream(golden / name) << text;
    }
    fs::remove_all(out);
    return;
  }
  const std::map<std::string, std::string> want = dumps(golden);
  ASSERT_FALSE(want.empty()) << "no goldens in " << golden
                             << " (CLEAVE_UPDATE_GOLDEN=1 writes them)";
  std::set<std::string> names;
  for (const auto& [name, text] : got) names.insert(name);
  for (const auto& [name, text] : want) names.insert(name);
  for (const std::string& name : names) {
    auto g = got.find(name), w = want.find(name);
    if (g == got.end()) {
      ADD_FAILURE() << seed << ": " << name << " was not written";
    } else if (w == want.end()) {
      ADD_FAILURE() << seed << ": " << name << " has no golden";
    } else {
      EXPECT_EQ(g->second, w->second) << seed << ": " << name << " differs from its golden";
    }
  }
  fs::remove_all(out);
}

Tensor zeros(Shape shape, DType dtype = DType::kFloat32) { return Tensor::full(shape, 0.0, dtype); }

// Seed 000: LeNet with fc1, fc2, fc3, conv1, conv2 placed on workers 0..4 of 8; a training step
// (Momentum) and an evaluation forward, batch 32 of 1x32x32.
TEST(SeedGraphs, LeNetPlacedOnEightWorkers) {
  ::setenv("CLEAVE_RPC_SHM", "0", 1);  // cut edges over the group: no mailbox channel attributes
  check_against_golden("000_lenet_place", 8, {}, [](int rank) {
    std::shared_ptr<examples::LeNet> net;
    {
      std::lock_guard<std::mutex> lock(g_init_mutex);
      set_seed(1);
      net = std::make_shared<examples::LeNet>();
    }
    net->fc1->place("MS_WORKER", 0);
    net->fc2->place("MS_WORKER", 1);
    net->fc3->place("MS_WORKER", 2);
    net->conv1->place("MS_WORKER", 3);
    net->conv2->place("MS_WORKER", 4);
    auto with_loss = std::make_shared<nn::WithLossCell>(net, examples::get_loss());
    optim::TrainOneStep step(with_loss, examples::get_optimizer(*net));
    step(zeros({32, 1, 32, 32}), zeros({32}, DType::kInt32));
    net->set_train(false);
    optim::Forward forward(net);
    forward(zeros({32, 1, 32, 32}));
  });
  ::unsetenv("CLEAVE_RPC_SHM");
}

// Seed 001: ResNet-50 (32x32 CIFAR-10 images) in DATA_PARALLEL with mirror_mean on 2 ranks,
// batch 2 per rank, the seed's SoftmaxCrossEntropyExpand and Momentum(0.01, 0.9).
TEST(SeedGraphs, ResNet50DataParallel) {
  check_against_golden(
      "001_resnet50_data_parallel", 2,
      {.parallel_mode = runtime::DATA_PARALLEL, .mirror_mean = true}, [](int rank) {
        std::shared_ptr<examples::ResNet> net;
        {
          std::lock_guard<std::mutex> lock(g_init_mutex);
          set_seed(1);
          net = examples::resnet50(2, 10);
        }
        auto loss = std::make_shared<examples::SoftmaxCrossEntropyExpand>(/*sparse=*/true);
        auto with_loss = std::make_shared<nn::WithLossCell>(net, loss);
        optim::TrainOneStep step(
            with_loss, std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9));
        step(zeros({2, 3, 32, 32}), zeros({2}, DType::kInt32));
      });
}

// Seed 002: each of 8 ranks slices its rows of the global batch of 32 inside construct and
// all-reduces the loss; DATA_PARALLEL with gradients_mean averages the gradients; SGD(0.01).
TEST(SeedGraphs, ManualDataParallelOnEightRanks) {
  check_against_golden(
      "002_manual_parallel", 8, {.parallel_mode = runtime::DATA_PARALLEL, .gradients_mean = true},
      [](int rank) {
        std::shared_ptr<examples::Network> net;
        {
          std::lock_guard<std::mutex> lock(g_init_mutex);
          set_seed(1);
          net = std::make_shared<examples::Network>(rank, 8);
        }
        auto with_loss = std::make_shared<examples::NetWithReduceLoss>(net, rank, 8);
        optim::TrainOneStep step(with_loss,
                                 std::make_shared<optim::SGD>(net->trainable_params(), 1e-2));
        step(zeros({32, 1, 28, 28}), zeros({32}, DType::kInt32));
      });
}

// Seed 003: AUTO_PARALLEL with sharding propagation from matmul's ((2, 4), (4, 1)) on 8 ranks,
// 2 rows per rank (dataset_strategy "data_parallel"), MSELoss, Momentum(0.2, 0.1).
TEST(SeedGraphs, ShardingPropagationOnEightRanks) {
  check_against_golden(
      "003_sharding_propagation", 8,
      {.parallel_mode = runtime::AUTO_PARALLEL,
       .search_mode = "sharding_propagation",
       .dataset_strategy = std::string("data_parallel")},
      [](int rank) {
        std::shared_ptr<examples::Net> net;
        {
          std::lock_guard<std::mutex> lock(g_init_mutex);
          set_seed(2);
          net = std::make_shared<examples::Net>(32, 16, 16);
        }
        auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
        optim::TrainOneStep step(
            with_loss, std::make_shared<optim::Momentum>(net->trainable_params(), 0.2, 0.1));
        step(zeros({2, 32}), zeros({2, 16}));
      });
}

}  // namespace
}  // namespace cleave
