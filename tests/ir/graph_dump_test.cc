// Golden tests of the IR text at each compiler stage, for a small net.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <regex>

#include "cleave/cleave.h"
#include "testing/golden.h"
#include "testing/gradcheck.h"

namespace cleave::ir {
namespace {

// relu(x·w) with w (4, 3), trained with MSE against y (2, 3).
class TinyNet : public nn::Cell {
 public:
  TinyNet() : Cell("TinyNet") { w = register_parameter("w", Tensor::full({4, 3}, 0.5)); }
  Tensor construct(const Tensor& x) override { return ops::relu(ops::matmul(x, w)); }
  Tensor w;
};

using testing::read_text;

class GraphDump : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("cleave_dump_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    saved_ = runtime::get_context();
    runtime::set_context(
        {.mode = runtime::GRAPH_MODE, .save_graphs = 1, .save_graphs_path = dir_.string()});
    auto net = std::make_shared<TinyNet>();
    net_ = net;
    with_loss_ = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
    opt_ = std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9);
    step_ = std::make_unique<optim::TrainOneStep>(with_loss_, opt_);
    (*step_)(Tensor::ones({2, 4}), Tensor::zeros({2, 3}));
    graph_dir_ = dir_ / step_->last_executor()->graph().name;
  }
  void TearDown() override {
    runtime::set_context(saved_);
    std::filesystem::remove_all(dir_);
  }
  // The stage's text, with the process-wide graph number taken out of the graph name.
  std::string stage(const std::string& name) {
    return std::regex_replace(read_text(graph_dir_ / (name + ".ir")),
                              std::regex("@train_step_[0-9]+"), "@train_step");
  }

  std::filesystem::path dir_, graph_dir_;
  runtime::Context saved_;
  std::shared_ptr<nn::Cell> net_, with_loss_;
  std::shared_ptr<optim::Momentum> opt_;
  std::unique_ptr<optim::TrainOneStep> step_;
};

// Each stage's text against tests/ir/golden/<stage>.ir (CLEAVE_UPDATE_GOLDEN: NOTE [Golden
// files] in testing/golden.h).
TEST_F(GraphDump, EveryStageMatchesItsGoldenText) {
  const std::filesystem::path golden_dir = std::filesystem::path(CLEAVE_TESTS_DIR) / "ir/golden";
  for (const char* s : {"01_trace", "08_autodiff", "11_optimizer", "17_constant_fold", "18_cse",
                        "19_dce", "20_execute"}) {
    const std::string text = stage(s);
    ASSERT_FALSE(text.empty()) << s << ".ir was not written";
    EXPECT_TRUE(std::filesystem::exists(graph_dir_ / (std::string(s) + ".dot"))) << s;
    EXPECT_TRUE(testing::matches_golden(text, golden_dir / (std::string(s) + ".ir")))
        << "stage " << s;
  }
}

TEST_F(GraphDump, DotFileIsAGraphvizDigraph) {
  const std::string dot = read_text(graph_dir_ / "20_execute.dot");
  EXPECT_EQ(dot.rfind("digraph \"train_step_", 0), 0u);
  EXPECT_NE(dot.find("ApplyMomentum"), std::string::npos);
  EXPECT_NE(dot.find("%para3__backbone.w"), std::string::npos);
  EXPECT_EQ(dot.back(), '\n');
  // Graphviz accepts it (when installed; scripts/install_deps.sh installs it).
  if (std::system("command -v dot >/dev/null 2>&1") == 0) {
    const std::string cmd = "dot -Tsvg '" + (graph_dir_ / "20_execute.dot").string() + "' -o '" +
                            (graph_dir_ / "20_execute.svg").string() + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    EXPECT_GT(std::filesystem::file_size(graph_dir_ / "20_execute.svg"), 100u);
  }
}

TEST_F(GraphDump, NothingIsWrittenWithoutSaveGraphs) {
  runtime::set_context(
      {.mode = runtime::GRAPH_MODE, .save_graphs = 0, .save_graphs_path = (dir_ / "off").string()});
  optim::TrainOneStep step(with_loss_, opt_);
  step(Tensor::ones({2, 4}), Tensor::zeros({2, 3}));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "off"));
}

}  // namespace
}  // namespace cleave::ir
