// The rank-order reduction alone (comm/rank_order_reduce.h, NOTE [Rank-order reduction]): every
// dtype and op against a sequential reference bit for bit, over input counts and element counts
// around the 4 KB block, with the result in place of any input.
#include "comm/rank_order_reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace cleave::comm {
namespace {

// Whether `bytes` bytes at `a` and `b` are equal. memcmp with 0 bytes still must not be given a
// null pointer (an empty vector's data()): UBSan reports it.
bool same_bytes(const void* a, const void* b, size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

// n elements of T (std::vector<bool> has no data()).
template <typename T>
class Elements {
 public:
  explicit Elements(int64_t n) : bytes_(sizeof(T) * static_cast<size_t>(n)) {}
  T& operator[](int64_t i) { return data()[i]; }
  const T& operator[](int64_t i) const { return data()[i]; }
  T* data() { return reinterpret_cast<T*>(bytes_.data()); }
  const T* data() const { return reinterpret_cast<const T*>(bytes_.data()); }
  std::byte* bytes() { return bytes_.data(); }
  const std::byte* bytes() const { return bytes_.data(); }

 private:
  std::vector<std::byte> bytes_;
};

// Inputs whose float sums depend on the order: big and small magnitudes, signs mixed.
double value(int input, int64_t i) {
  const double big = (input % 2 == 0 ? 1.0 : -1.0) * 1e8 * static_cast<double>(1 + i % 3);
  return input % 3 == 0 ? big : 0.25 * (input + 1) + static_cast<double>(i % 11) - 5;
}

template <typename T>
Elements<T> operand(int input, int64_t n) {
  Elements<T> v(n);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      v[i] = (i + input) % 3 == 0;
    } else if constexpr (std::is_integral_v<T>) {
      // Near the ends of the range, so that sums and products wrap.
      v[i] = static_cast<T>(std::numeric_limits<T>::max() - static_cast<T>(i % 5) * input);
    } else {
      v[i] = static_cast<T>(value(input, i));
    }
  }
  return v;
}

// ((x_0 op x_1) op x_2) ..., one element at a time, with unsigned arithmetic for integers.
template <typename T>
T reference(ReduceOp op, const std::vector<Elements<T>>& xs, int64_t i) {
  T acc = xs[0][i];
  for (size_t q = 1; q < xs.size(); ++q) {
    const T b = xs[q][i];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        if constexpr (std::is_same_v<T, bool>) {
          acc = acc || b;
        } else if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          acc = static_cast<T>(static_cast<U>(acc) + static_cast<U>(b));
        } else {
          acc = acc + b;
        }
        break;
      case ReduceOp::kProd:
        if constexpr (std::is_same_v<T, bool>) {
          acc = acc && b;
        } else if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          acc = static_cast<T>(static_cast<U>(acc) * static_cast<U>(b));
        } else {
          acc = acc * b;
        }
        break;
      case ReduceOp::kMax:
        acc = acc < b ? b : acc;
        break;
      case ReduceOp::kMin:
        acc = b < acc ? b : acc;
        break;
    }
  }
  if constexpr (std::is_floating_point_v<T>) {  // the sum, then one multiplication by T(1 / k)
    if (op == ReduceOp::kMean) acc *= static_cast<T>(1.0 / static_cast<double>(xs.size()));
  }
  return acc;
}

template <typename T>
void check_dtype(DType dtype) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin}) {
    if (op == ReduceOp::kMean && !std::is_floating_point_v<T>) continue;  // floating dtypes only
    for (int inputs : {1, 2, 3, 8}) {
      // 4096 / sizeof(T) elements is one block; primes and the block's neighbours around it.
      const int64_t block = 4096 / static_cast<int64_t>(sizeof(T));
      for (int64_t n :
           {int64_t{0}, int64_t{1}, int64_t{7}, block - 1, block, block + 1, int64_t{3 * 4099}}) {
        std::vector<Elements<T>> xs;
        for (int q = 0; q < inputs; ++q) xs.push_back(operand<T>(q, n));
        Elements<T> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = reference(op, xs, i);
        const std::string where = fmt::format("{} {} of {} inputs, {} elements", dtype_name(dtype),
                                              reduce_op_name(op), inputs, n);
        const size_t bytes = sizeof(T) * static_cast<size_t>(n);
        // Into a buffer of its own, with a copy into another.
        {
          std::vector<const std::byte*> ins;
          for (const auto& x : xs) ins.push_back(x.bytes());
          Elements<T> out(n), also(n);
          reduce_in_rank_order(dtype, op, ins, n, out.bytes(), also.bytes());
          ASSERT_TRUE(same_bytes(out.data(), want.data(), bytes)) << where;
          ASSERT_TRUE(same_bytes(also.data(), want.data(), bytes)) << where << " (the copy)";
        }
        // In place of input j, for every j.
        for (int j = 0; j < inputs; ++j) {
          std::vector<Elements<T>> copies = xs;
          std::vector<const std::byte*> ins;
          for (const auto& x : copies) ins.push_back(x.bytes());
          reduce_in_rank_order(dtype, op, ins, n, copies[j].bytes());
          ASSERT_TRUE(same_bytes(copies[j].data(), want.data(), bytes))
              << where << " in place of input " << j;
        }
      }
    }
  }
}

TEST(RankOrderReduce, EveryDtypeAndOpEqualsTheSequentialReductionBitForBit) {
  check_dtype<float>(DType::kFloat32);
  check_dtype<double>(DType::kFloat64);
  check_dtype<int32_t>(DType::kInt32);
  check_dtype<int64_t>(DType::kInt64);
  check_dtype<bool>(DType::kBool);
}

TEST(RankOrderReduce, FloatSumsFollowTheInputOrderAndIntegersWrap) {
  const std::vector<float> a = {1e8f, 1.0f}, b = {1.0f, 1e8f}, c = {-1e8f, -1e8f};
  std::vector<float> out(2);
  reduce_in_rank_order(
      DType::kFloat32, ReduceOp::kSum,
      {reinterpret_cast<const std::byte*>(a.data()), reinterpret_cast<const std::byte*>(b.data()),
       reinterpret_cast<const std::byte*>(c.data())},
      2, reinterpret_cast<std::byte*>(out.data()));
  EXPECT_EQ(out[0], 0.0f);  // (1e8 + 1) - 1e8: the 1 is lost
  EXPECT_EQ(out[1], 0.0f);  // (1 + 1e8) - 1e8
  const std::vector<float> d = {1.0f, 1.0f};
  reduce_in_rank_order(
      DType::kFloat32, ReduceOp::kSum,
      {reinterpret_cast<const std::byte*>(a.data()), reinterpret_cast<const std::byte*>(c.data()),
       reinterpret_cast<const std::byte*>(d.data())},
      2, reinterpret_cast<std::byte*>(out.data()));
  EXPECT_EQ(out[0], 1.0f);   // (1e8 - 1e8) + 1
  EXPECT_EQ(out[1], -1e8f);  // (1 - 1e8) + 1: both 1s are lost
  const int32_t big = std::numeric_limits<int32_t>::max(), one = 1;
  int32_t sum = 0;
  reduce_in_rank_order(
      DType::kInt32, ReduceOp::kSum,
      {reinterpret_cast<const std::byte*>(&big), reinterpret_cast<const std::byte*>(&one)}, 1,
      reinterpret_cast<std::byte*>(&sum));
  EXPECT_EQ(sum, std::numeric_limits<int32_t>::min());
}

}  // namespace
}  // namespace cleave::comm
