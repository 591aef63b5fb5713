// Every operator with a sharding rule, every valid strategy on 1, 2, 3, 4, 6 and 8 devices, run on
// thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one device (NOTE [Sharded
// operator check] in tests/testing/op_sharding.h); invalid strategies give the planning error.
#include "testing/op_sharding.h"

#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;

Tensor positive(const Shape& shape, uint64_t seed) { return f64(shape, seed, 0.5, 2.0); }

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"Abs", "Erf", "Exp", "GeLU", "Neg", "ReLU", "Sigmoid", "Square", "Tanh",
                         "ZerosLike", "OnesLike"}) {
    cases.push_back({op, {}, {f64({6, 4}, 1)}});
  }
  for (const char* op : {"Log", "Sqrt", "Rsqrt"}) cases.push_back({op, {}, {positive({6, 4}, 2)}});
  cases.push_back({"Cast", {{"dtype", DType::kFloat32}}, {f64({4, 6}, 3)}});
  for (const char* op : {"Add", "Sub", "Mul", "Maximum", "Minimum"}) {
    cases.push_back({op, {}, {f64({6, 4}, 4), f64({6, 4}, 5)}});
    cases.push_back({op, {}, {f64({2, 6, 4}, 6), f64({6, 1}, 7)}});  // broadcasting
  }
  cases.push_back({"Div", {}, {f64({6, 4}, 8), positive({4}, 9)}});
  cases.push_back({"Pow", {}, {positive({6, 4}, 10), f64({6, 4}, 11)}});
  for (const char* op : {"Equal", "Greater", "LessEqual"}) {
    cases.push_back({op, {}, {f64({6, 4}, 12), f64({6, 4}, 13)}});
  }
  cases.push_back(
      {"Select",
       {},
       {ops::greater(f64({6, 4}, 14), f64({6, 4}, 15)), f64({6, 4}, 16), f64({6, 4}, 17)}});
  cases.push_back({"MSE", {}, {f64({6, 4}, 18), f64({6, 4}, 19)}});
  for (const char* op : {"ReluGrad", "SigmoidGrad", "TanhGrad"}) {
    cases.push_back({op, {}, {f64({6, 4}, 20), f64({6, 4}, 21)}});
  }
  cases.push_back({"MaximumGrad", {}, {f64({6, 4}, 22), f64({4}, 23), f64({6, 4}, 24)}});
  cases.push_back(
      {"Dropout", {{"keep_prob", 0.7}, {"seed", int64_t{5}}}, {f64({6, 4}, 25)}, "", {}});
  cases.push_back(
      {"Fill",
       {{"shape", std::vector<int64_t>{4, 6}}, {"value", 2.5}, {"dtype", DType::kFloat64}},
       {}});
  return cases;
}

std::vector<OpCase> matmul_cases() {
  std::vector<OpCase> cases;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{4, 6} : Shape{6, 4};
      const Shape b = tb ? Shape{12, 4} : Shape{4, 12};
      cases.push_back(
          {"MatMul", {{"transpose_a", ta}, {"transpose_b", tb}}, {f64(a, 30), f64(b, 31)}});
    }
  }
  cases.push_back({"BatchMatMul", {}, {f64({2, 6, 4}, 32), f64({2, 4, 6}, 33)}});
  cases.push_back({"BatchMatMul", {}, {f64({2, 6, 4}, 34), f64({4, 6}, 35)}});  // broadcast batch
  cases.push_back({"BiasAdd", {}, {f64({6, 4}, 36), f64({4}, 37)}});
  cases.push_back({"BiasAdd", {}, {f64({2, 6, 2, 2}, 38), f64({6}, 39)}});
  return cases;
}

std::vector<OpCase> reduce_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"}) {
    for (bool keep : {false, true}) {
      cases.push_back({op,
                       {{"axis", std::vector<int64_t>{1}}, {"keep_dims", keep}},
                       {positive({6, 4, 2}, 40)}});
    }
    cases.push_back({op, {{"axis", std::vector<int64_t>{}}}, {positive({6, 4}, 41)}});
  }
  for (const char* op : {"ArgMax", "ArgMin"}) {
    cases.push_back({op, {{"axis", int64_t{1}}}, {f64({6, 4}, 42)}});
  }
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    cases.push_back({op, {{"axis", int64_t{-1}}}, {f64({6, 4}, 43)}});
    cases.push_back({op, {{"axis", int64_t{0}}}, {f64({6, 4}, 44)}});
  }
  cases.push_back({"SoftmaxGrad", {{"axis", int64_t{-1}}}, {f64({6, 4}, 45), f64({6, 4}, 46)}});
  return cases;
}

std::vector<OpCase> shape_cases() {
  std::vector<OpCase> cases;
  cases.push_back({"Reshape", {{"shape", std::vector<int64_t>{6, 8}}}, {f64({6, 2, 4}, 50)}});
  cases.push_back({"Reshape", {{"shape", std::vector<int64_t>{12, 4}}}, {f64({6, 8}, 51)}});
  cases.push_back({"Reshape", {{"shape", std::vector<int64_t>{-1}}}, {f64({4, 3, 2}, 52)}});
  cases.push_back({"Flatten", {}, {f64({6, 4, 2, 1}, 53)}});
  cases.push_back({"ExpandDims", {{"axis", int64_t{1}}}, {f64({6, 4}, 54)}});
  cases.push_back({"Squeeze", {{"axis", std::vector<int64_t>{1}}}, {f64({6, 1, 4}, 55)}});
  cases.push_back({"Transpose", {{"perm", std::vector<int64_t>{1, 2, 0}}}, {f64({2, 6, 4}, 56)}});
  cases.push_back({"Tile", {{"multiples", std::vector<int64_t>{1, 2}}}, {f64({6, 4}, 57)}});
  cases.push_back({"BroadcastTo", {{"shape", std::vector<int64_t>{2, 6, 4}}}, {f64({6, 1}, 58)}});
  return cases;
}

TEST(OpSharding, ElementwiseEqualsOneDevice) {
  testing::expect_all_equal_one_device(elementwise_cases());
}
TEST(OpSharding, MatMulEqualsOneDevice) { testing::expect_all_equal_one_device(matmul_cases()); }
TEST(OpSharding, ReductionsEqualOneDevice) { testing::expect_all_equal_one_device(reduce_cases()); }
TEST(OpSharding, ShapeOpsEqualOneDevice) { testing::expect_all_equal_one_device(shape_cases()); }

}  // namespace
}  // namespace cleave
