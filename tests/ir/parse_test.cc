// The IR text read back (NOTE [IR text] in cleave/ir/parse.h): every dump the repository keeps as
// a golden file parses and prints back to the same text; hand-written text builds the graph it
// says; text that is not a dump is an error naming the line and column.
#include "cleave/ir/parse.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "cleave/core/error.h"
#include "cleave/ir/passes.h"
#include "cleave/ir/registry.h"
#include "testing/golden.h"

namespace cleave::ir {
namespace {

namespace fs = std::filesystem;

using testing::read_text;

std::string error_of(std::string_view text) {
  try {
    parse_text(text, "t.ir");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ParseText, EveryGoldenDumpPrintsBackToItsText) {
  int files = 0;
  for (const char* dir : {"tests/ir/golden", "tests/parallel/golden", "tests/runtime/golden",
                          "examples/sharding_propagation/golden"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(CLEAVE_SOURCE_DIR) / dir)) {
      if (e.path().extension() != ".ir") continue;
      const std::string text = read_text(e.path());
      const ParsedGraph parsed = parse_file(e.path());
      EXPECT_EQ(dump_text(parsed.graph, parsed.notes), text) << e.path();
      ++files;
    }
  }
  EXPECT_GT(files, 150);
  // The hand-written per-rank dumps of the cleave-ir tests parse too (they omit the side-effect
  // marks a dump prints).
  for (const auto& e :
       fs::directory_iterator(fs::path(CLEAVE_SOURCE_DIR) / "tests/tools/partition")) {
    EXPECT_NO_THROW(parse_file(e.path())) << e.path();
  }
}

constexpr const char* kSmall = R"(# IR entry: @small
# Total inputs: 1
# Total params: 1
# Total ops: 3
%para1_x: <Tensor[Float32], (2, 3)> : input
%para2_w: <Tensor[Float32], (3, 4)> : parameter
%const4: <Tensor[Float32], ()> : constant (literal) = 0.5
%const6: <Tensor[Int64], (3)> : constant = [1, 2, 3]

subgraph @small(%para1_x, %para2_w) {
  %2(out) = MatMul(%para1_x, %para2_w) {instance name: fc.matmul} primitive_attrs: {transpose_a: false, transpose_b: false} {in_strategy: ((2, 1), (1, 4)), derived: true} {placement: (role: MS_WORKER, rank: 1)}
      : (<Tensor[Float32], (2, 3)>, <Tensor[Float32], (3, 4)>) -> (<Tensor[Float32], (2, 4)>)
      # scope: (Default/fc-Dense)
  %3(out) = ReLU(%2) {instance name: relu}
      : (<Tensor[Float32], (2, 4)>) -> (<Tensor[Float32], (2, 4)>)
      # scope: (Default)
      # a note
  %5(out) = Mul(%3, %const4) {instance name: scale}
      : (<Tensor[Float32], (2, 4)>, <Tensor[Float32], ()>) -> (<Tensor[Float32], (2, 4)>)
      # scope: (Default)
  return(%5)
}
)";

TEST(ParseText, HandWrittenTextBuildsTheGraphItSays) {
  const ParsedGraph p = parse_text(kSmall);
  const Graph& g = p.graph;
  EXPECT_EQ(g.name, "small");
  ASSERT_EQ(g.nodes.size(), 7u);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0], 0);
  EXPECT_EQ(g.nodes[0].name, "x");
  EXPECT_EQ(g.nodes[1].kind, NodeKind::kParameter);
  const Node& mm = g.nodes[2];
  ASSERT_TRUE(mm.is_op());
  EXPECT_EQ(mm.op->name, "MatMul");
  EXPECT_EQ(mm.name, "fc.matmul");
  EXPECT_EQ(mm.scope, "Default/fc-Dense");
  EXPECT_EQ(mm.strategy, (Strategy{{2, 1}, {1, 4}}));
  EXPECT_TRUE(mm.strategy_derived);
  EXPECT_EQ(mm.placement, (Placement{"MS_WORKER", 1}));
  EXPECT_FALSE(mm.attrs.get<bool>("transpose_a"));
  EXPECT_EQ(g.nodes[4].value.item(), 0.5);
  EXPECT_TRUE(g.nodes[4].literal);
  EXPECT_EQ(g.nodes[6].value.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(p.notes[3], "a note");
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.outputs[0], (ValueRef{5, 0}));
  // Printed, it reads back to the same text.
  const std::string text = dump_text(g, p.notes);
  const ParsedGraph again = parse_text(text);
  EXPECT_EQ(dump_text(again.graph, again.notes), text);
}

TEST(ParseText, AttributesKeepTheirTypes) {
  const ParsedGraph p = parse_file(fs::path(CLEAVE_SOURCE_DIR) / "tests/ir/golden/20_execute.ir");
  for (const Node& n : p.graph.nodes) {
    if (!n.is_op() || n.op->name != "ApplyMomentum") continue;
    EXPECT_EQ(n.attrs.get<double>("momentum"), 0.9);
    EXPECT_EQ(n.attrs.get<double>("weight_decay"), 0.0);
    EXPECT_FALSE(n.attrs.get<bool>("use_nesterov"));
  }
}

TEST(ParseText, NumberedFreelyTheNodesGoInputsFirst) {
  // Hand-written: op numbers with gaps; the graph keeps the text's order of values and ops.
  const ParsedGraph p = parse_text(R"(# IR entry: @g
%para1_x: <Tensor[Float32], (2)> : input

subgraph @g(%para1_x) {
  %10(out) = Neg(%para1_x) {instance name: neg}
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %20(out) = Neg(%10) {instance name: neg_1}
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  return(%20)
}
)");
  ASSERT_EQ(p.graph.nodes.size(), 3u);
  EXPECT_EQ(p.graph.nodes[2].inputs[0], (ValueRef{1, 0}));
  EXPECT_EQ(p.graph.outputs[0], (ValueRef{2, 0}));
}

TEST(ParseText, TextThatIsNotADumpIsAnErrorNamingTheLineAndColumn) {
  EXPECT_EQ(error_of("digraph {}"), "t.ir:1:1: expected '# IR entry: @', got 'digraph {}'");
  std::string unknown = kSmall;
  unknown.replace(unknown.find("ReLU(%2)"), 4, "Relu");
  EXPECT_EQ(error_of(unknown), "t.ir:14:13: unknown primitive 'Relu'");
  std::string dtype = kSmall;
  dtype.replace(dtype.find("Tensor[Int64]"), 13, "Tensor[Int16]");
  EXPECT_NE(error_of(dtype).find("t.ir:8:18: expected a dtype (Float32, Float64, Int32, Int64 or "
                                 "Bool), got 'Int16]"),
            std::string::npos)
      << error_of(dtype);
  std::string before = kSmall;
  before.replace(before.find("ReLU(%2)"), 8, "ReLU(%5)");
  EXPECT_NE(error_of(before).find("t.ir:14:"), std::string::npos) << error_of(before);
  EXPECT_NE(error_of(before).find("value %5 is used before it is defined"), std::string::npos);
  std::string missing = kSmall;
  missing.replace(missing.find("Mul(%3, %const4)"), 16, "Mul(%3, %const9)");
  EXPECT_NE(error_of(missing).find("value %const9 is not defined"), std::string::npos);
  std::string truncated = kSmall;
  truncated.replace(truncated.find("Total ops: 3"), 12, "Total ops: 4");
  EXPECT_EQ(error_of(truncated),
            "t.ir: the header says 4 ops but the graph has 3 (a truncated or edited dump?)");
  std::string types = kSmall;
  types.replace(types.find(": (<Tensor[Float32], (2, 4)>) -> (<Tensor[Float32], (2, 4)>)"), 30,
                ": (<Tensor[Float32], (2, 5)>)");
  EXPECT_NE(error_of(types).find("input 0 of %3 is recorded as <Tensor[Float32], (2, 5)> but %2 "
                                 "is <Tensor[Float32], (2, 4)>"),
            std::string::npos)
      << error_of(types);
  std::string outputs = kSmall;  // Mul's output recorded as what inference does not give
  outputs.replace(outputs.rfind("-> (<Tensor[Float32], (2, 4)>)"), 30,
                  "-> (<Tensor[Float32], (2, 5)>)");
  EXPECT_NE(error_of(outputs).find("%5 (Mul 'scale')"), std::string::npos) << error_of(outputs);
  std::string values = kSmall;
  values.replace(values.find("[1, 2, 3]"), 9, "[1, 2]");
  EXPECT_NE(error_of(values).find("the constant has 3 elements but 2 values are given"),
            std::string::npos)
      << error_of(values);
}

// Numbers out of range in names and references (fuzz/regressions/ir_text/): each threw
// std::out_of_range or std::invalid_argument from std::stoi/stoll instead of a named error.
TEST(ParseText, NumbersOutOfRangeAreErrorsNamingTheLine) {
  auto edited = [](std::string_view from, std::string_view to) {
    std::string text = kSmall;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  EXPECT_NE(error_of(edited("%const4:", "%const99999999999:")).find("t.ir:7:"), std::string::npos);
  EXPECT_NE(error_of(edited("%const4:", "%const99999999999:"))
                .find("a constant must be named %const<K>, got '%const99999999999'"),
            std::string::npos);
  EXPECT_NE(error_of(edited("%const4:",
                            "%const\xff"
                            "7:"))
                .find("a constant must be named %const<K>"),
            std::string::npos);
  EXPECT_NE(error_of(edited("%2(out)", "%9999999999999999999(out)"))
                .find("expected an integer from -9223372036854775808 to 9223372036854775807"),
            std::string::npos);
  EXPECT_NE(error_of(edited("%2(out)", "%4294967298(out)"))
                .find("an op's number must be from 0 to 2147483647, got %4294967298"),
            std::string::npos);
  const std::string ref = error_of(edited("ReLU(%2)", "ReLU(%2[99999999999])"));
  EXPECT_NE(ref.find("t.ir:14:"), std::string::npos) << ref;
  EXPECT_NE(ref.find("%2[99999999999]"), std::string::npos) << ref;
}

// A constant larger than the machine's memory (fuzz/regressions/ir_text/
// constant_larger_than_memory.ir): its zeros were allocated, which a sanitizer aborts on and the
// kernel may grant and kill later; and a shape whose element count overflows int64.
TEST(ParseText, ConstantsLargerThanMemoryAreErrorsNamingTheLine) {
  auto edited = [](std::string_view to) {
    std::string text = kSmall;
    const std::string_view from = "<Tensor[Int64], (3)> : constant = [1, 2, 3]";
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  const std::string huge = error_of(edited("<Tensor[Int64], (2, 99999999999993)> : constant"));
  EXPECT_NE(huge.find("t.ir:8:"), std::string::npos) << huge;
  EXPECT_NE(huge.find("cannot allocate 1599999999999888 bytes for a tensor"), std::string::npos)
      << huge;
  const std::string overflow =
      error_of(edited("<Tensor[Int64], (4294967296, 4294967296)> : constant"));
  EXPECT_NE(overflow.find("more elements than an int64 holds"), std::string::npos) << overflow;
}

TEST(ParseStrategy, ReadsWhatStrategyToStringWrites) {
  for (const Strategy& s : {Strategy{}, Strategy{{2, 4}, {4, 1}}, Strategy{{8}}, Strategy{{}}}) {
    EXPECT_EQ(parse_strategy(strategy_to_string(s)), s) << strategy_to_string(s);
  }
  EXPECT_THROW(parse_strategy("((2, 4)"), Error);
}

}  // namespace
}  // namespace cleave::ir
