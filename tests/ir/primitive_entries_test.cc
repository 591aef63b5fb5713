// Every registered primitive's entry is whole (NOTE [One primitive, one registry entry] and NOTE
// [Parts absent on purpose] in cleave/ir/op_def.h): each part is present or says why it is not,
// never both and never neither, including the parts the higher layers attach while the program
// starts (sharding rules, the communication primitives' kernels).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cleave::ir
