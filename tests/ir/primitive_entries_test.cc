// Every registered primitive's entry is whole (NOTE [One primitive, one registry entry] and NOTE
// [Parts absent on purpose] in cleave/ir/op_def.h): each part is present or says why it is not,
// never both and never neither, including the parts the higher layers attach while the program
// starts (sharding rules, the communication primitives' kernels). And every op family has its
// file, of the family's name, in each layer that has a part of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cleave/ir/registry.h"
#include "cleave/parallel/sharding_rule.h"

namespace cleave::ir {
namespace {

// "<op>: <part> ...", one line per problem.
std::vector<std::string> problems_of(const OpDef& op) {
  std::vector<std::string> out;
  auto part = [&](const char* name, bool present, const std::string& why_not) {
    if (present && !why_not.empty()) {
      out.push_back(op.name + ": has a " + name + " and also says why it has none (\"" + why_not +
                    "\")");
    } else if (!present && why_not.empty()) {
      out.push_back(op.name + ": no " + name + " and no reason why (set its no_* field)");
    } else if (!present && why_not.rfind("none", 0) != 0) {
      out.push_back(op.name + ": the reason it has no " + name +
                    " must read \"none, because ...\"; got \"" + why_not + "\"");
    }
  };
  if (op.family.empty()) out.push_back(op.name + ": no family");
  if (op.infer == nullptr) out.push_back(op.name + ": no infer");
  part("CPU kernel", op.cpu_kernel != nullptr, op.no_cpu_kernel);
  part("CUDA kernel", op.cuda_kernel != nullptr, op.no_cuda_kernel);
  part("gradient", op.grad != nullptr, op.no_grad);
  part("sharding rule", op.sharding_rule != nullptr, op.no_sharding_rule);
  if (op.sharding_rule != nullptr && op.sharding_rule->summary().empty()) {
    out.push_back(op.name + ": its sharding rule has no summary");
  }
  return out;
}

TEST(PrimitiveEntries, EveryPartIsPresentOrSaysWhyNot) {
  const std::vector<const OpDef*> ops = Registry::global().ops();
  ASSERT_GT(ops.size(), 100u);
  std::vector<std::string> problems;
  for (const OpDef* op : ops) {
    for (std::string& p : problems_of(*op)) problems.push_back(std::move(p));
  }
  std::string text;
  for (const std::string& p : problems) text += "\n  " + p;
  EXPECT_TRUE(problems.empty()) << problems.size() << " incomplete entries:" << text;
}

TEST(PrimitiveEntries, AForgottenPartIsNamed) {
  OpDef op;
  op.name = "MyOp";
  op.family = "custom";
  op.infer = [](const InferContext& ctx) { return std::vector<TensorMeta>{ctx.inputs[0]}; };
  op.cpu_kernel = [](const KernelContext&) {};
  op.no_cuda_kernel = "none, because it is a test";
  op.no_sharding_rule = "none, because it is a test";
  const std::vector<std::string> problems = problems_of(op);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "MyOp: no gradient and no reason why (set its no_* field)");
  op.no_grad = "it has none";
  EXPECT_EQ(problems_of(op)[0],
            "MyOp: the reason it has no gradient must read \"none, because ...\"; got \"it has "
            "none\"");
}

TEST(PrimitiveEntries, HigherLayersAttachedTheirPartsAtStartUp) {
  // The runtime's kernels of the collectives and the parallel layer's rules are on the entries
  // before main() runs: no call binds them.
  const OpDef& all_reduce = Registry::global().get("AllReduce");
  EXPECT_NE(all_reduce.cpu_kernel, nullptr);
  EXPECT_NE(all_reduce.async_kernel, nullptr);
  EXPECT_TRUE(all_reduce.no_cpu_kernel.empty()) << all_reduce.no_cpu_kernel;
  EXPECT_NE(Registry::global().get("MatMul").sharding_rule, nullptr);
  EXPECT_EQ(Registry::global().get("MatMul").sharding_rule->compute_class(),
            parallel::ShardingRule::ComputeClass::kMatMul);
}

TEST(PrimitiveEntries, AttachingTwiceOrToAnUnknownOpAbortsNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(Registry::global().attach_cpu_kernel("NoSuchOp", [](const KernelContext&) {}),
               "CPU kernel was attached to op 'NoSuchOp', which is not registered");
  EXPECT_DEATH(Registry::global().attach_cpu_kernel("AllReduce", [](const KernelContext&) {}),
               "op 'AllReduce': a CPU kernel attached twice");
}

// ---- one file name per family in every layer ----

namespace fs = std::filesystem;

// The files of the layers' family folders that hold no family's ops: shared helpers.
const std::set<std::string> kIrOpsHelpers = {"op_helpers", "window_helpers"};
const std::set<std::string> kRulesHelpers = {"common", "registrations"};
const std::set<std::string> kKernelHelpers = {"copy", "loops", "onednn", "onednn_layout"};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The stems of the files in `dir` whose names end in `suffix` ("x" for x<suffix>).
std::vector<std::string> stems(const fs::path& dir, const std::string& suffix) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      out.push_back(name.substr(0, name.size() - suffix.size()));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Whether `stem` is a piece of a family's file, "<family>_<piece>" (pool_fast.cc).
bool is_piece(const std::string& stem, const std::set<std::string>& families) {
  return std::any_of(families.begin(), families.end(),
                     [&](const std::string& f) { return stem.starts_with(f + "_"); });
}

// One line per misplaced file under the checkout `root`, for the op families `families`:
//   - a family without src/ir/ops/<family>.cc defining register_<family>_ops, without
//     src/parallel/rules/<family>.cc defining register_<family>(), or (but comm, whose tests are
//     the runtime's collectives tests) without tests/ops/<family>_test.cc;
//   - a .cc file in src/ir/ops/ or src/parallel/rules/ that is neither a family's nor a listed
//     helper's; one in src/kernels/cpu/ that is neither a family's, a piece of one
//     (<family>_<piece>.cc) nor a helper's; a tests/ops/<name>_test.cc or
//     tests/parallel/rules_<name>_test.cc whose name is no family's.
std::vector<std::string> family_file_problems(const fs::path& root,
                                              const std::set<std::string>& families) {
  std::vector<std::string> out;
  const fs::path ir_ops = root / "src/ir/ops", rules = root / "src/parallel/rules";
  const fs::path kernels = root / "src/kernels/cpu", op_tests = root / "tests/ops";
  auto expect_defines = [&](const std::string& family, const fs::path& file, const char* layer,
                            const std::string& function) {
    const std::string rel = fs::relative(file, root).string();
    if (!fs::exists(file)) {
      out.push_back("family '" + family + "': no " + rel + " (" + layer + ")");
    } else if (read_text(file).find("void " + function + "(") == std::string::npos) {
      out.push_back("family '" + family + "': " + rel + " does not define " + function);
    }
  };
  for (const std::string& f : families) {
    expect_defines(f, ir_ops / (f + ".cc"), "its ops' registry entries", "register_" + f + "_ops");
    expect_defines(f, rules / (f + ".cc"), "its ops' sharding rules", "register_" + f);
    if (f != "comm" && !fs::exists(op_tests / (f + "_test.cc"))) {
      out.push_back("family '" + f + "': no tests/ops/" + f + "_test.cc (its ops' tests)");
    }
  }
  auto expect_known = [&](const fs::path& dir, const std::string& suffix,
                          const std::set<std::string>& helpers, bool pieces) {
    for (const std::string& stem : stems(dir, suffix)) {
      if (families.count(stem) || helpers.count(stem) || (pieces && is_piece(stem, families))) {
        continue;
      }
      out.push_back(fs::relative(dir / (stem + suffix), root).string() + ": no family is named '" +
                    stem + "' (families: " + joined(families) + ")" +
                    (helpers.empty() ? "" : " and it is not a helper (" + joined(helpers) + ")") +
                    "; name the file after its ops' family, or list it as a helper in "
                    "tests/ir/primitive_entries_test.cc");
    }
  };
  expect_known(ir_ops, ".cc", kIrOpsHelpers, false);
  expect_known(rules, ".cc", kRulesHelpers, false);
  expect_known(kernels, ".cc", kKernelHelpers, true);
  expect_known(op_tests, "_test.cc", {}, false);
  std::set<std::string> rule_tests;
  for (const std::string& stem : stems(root / "tests/parallel", "_test.cc")) {
    if (stem.starts_with("rules_")) rule_tests.insert(stem.substr(6));
  }
  for (const std::string& name : rule_tests) {
    if (!families.count(name)) {
      out.push_back("tests/parallel/rules_" + name + "_test.cc: no family is named '" + name +
                    "' (families: " + joined(families) + ")");
    }
  }
  return out;
}

std::set<std::string> registered_families() {
  std::set<std::string> families;
  for (const OpDef* op : Registry::global().ops()) families.insert(op->family);
  return families;
}

TEST(OpFamilies, EveryFamilyHasItsFileInEveryLayer) {
  const std::set<std::string> families = registered_families();
  EXPECT_EQ(joined(families),
            "comm, compare, conv, dropout, elementwise, index, loss, matmul, norm, optim, pool, "
            "reduce, resize, shape, slice, softmax");
  const std::vector<std::string> problems = family_file_problems(CLEAVE_SOURCE_DIR, families);
  std::string text;
  for (const std::string& p : problems) text += "\n  " + p;
  EXPECT_TRUE(problems.empty()) << problems.size()
                                << " files out of line with the families:" << text;
}

TEST(OpFamilies, AMissingOrExtraFileIsNamed) {
  // A tree whose family "spam" has only its ops' file, beside a file of no family.
  const fs::path root = fs::path(::testing::TempDir()) / "cleave_op_families";
  fs::remove_all(root);
  fs::create_directories(root / "src/ir/ops");
  std::ofstream(root / "src/ir/ops/spam.cc") << "void register_spam_ops(Registry& r) {}\n";
  std::ofstream(root / "src/ir/ops/nn.cc") << "\n";
  fs::create_directories(root / "src/kernels/cpu");
  std::ofstream(root / "src/kernels/cpu/spam_fast.cc") << "\n";
  std::ofstream(root / "src/kernels/cpu/loops.cc") << "\n";
  const std::vector<std::string> problems = family_file_problems(root, {"spam"});
  fs::remove_all(root);
  EXPECT_EQ(problems,
            (std::vector<std::string>{
                "family 'spam': no src/parallel/rules/spam.cc (its ops' sharding rules)",
                "family 'spam': no tests/ops/spam_test.cc (its ops' tests)",
                "src/ir/ops/nn.cc: no family is named 'nn' (families: spam) and it is not a "
                "helper (op_helpers, window_helpers); name the file after its ops' family, or "
                "list it as a helper in tests/ir/primitive_entries_test.cc"}));
}

}  // namespace
}  // namespace cleave::ir
