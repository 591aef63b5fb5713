// The OpenMPI backend under mpirun: every rank runs these tests; a failure on any rank fails the
// mpirun command (tests/comm_mpi/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdlib>

#include "cleave/comm/process_group.h"
#include "testing/gradcheck.h"

namespace cleave::comm {
namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

std::shared_ptr<ProcessGroup>& world() {
  static std::shared_ptr<ProcessGroup> g;
  return g;
}

double value(int r, int64_t i) { return static_cast<double>((r + 1) * 3 + (i % 5)); }

Tensor make(int64_t n, DType dtype, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty(Shape({n}), dtype);
  CLEAVE_DISPATCH_ALL(dtype, [&] {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(f(i));
  });
  return t;
}

TEST(MpiCollectives, AllReduceEveryOp) {
  ProcessGroup& g = *world();
  for (int64_t n : {0, 1, 7919, 10}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd, ReduceOp::kMean}) {
      for (DType dtype : {DType::kInt64, DType::kFloat64, DType::kFloat32}) {
        if (op == ReduceOp::kMean && dtype == DType::kInt64) continue;
        Tensor t = make(n, dtype, [&](int64_t i) { return value(g.rank(), i); });
        g.all_reduce(t, op);
        const std::vector<double> got = t.to_double_vector();
        for (int64_t i = 0; i < n; ++i) {
          double acc = value(0, i);
          for (int r = 1; r < g.size(); ++r) {
            const double v = value(r, i);
            acc = op == ReduceOp::kProd  ? acc * v
                  : op == ReduceOp::kMax ? std::max(acc, v)
                  : op == ReduceOp::kMin ? std::min(acc, v)
                                         : acc + v;
          }
          if (op == ReduceOp::kMean) acc /= g.size();
          ASSERT_NEAR(got[static_cast<size_t>(i)], acc, 1e-6 * std::abs(acc))
              << reduce_op_name(op) << " n=" << n;
        }
      }
    }
  }
}

TEST(MpiCollectives, GatherScatterBroadcastAllToAll) {
  ProcessGroup& g = *world();
  const int size = g.size();
  for (int64_t n : {0, 1, 7919}) {
    Tensor in = make(n, DType::kInt32, [&](int64_t i) { return value(g.rank(), i); });
    Tensor out = Tensor::zeros(Shape({size * n}), DType::kInt32);
    g.all_gather(out, in);
    const auto gathered = out.to_double_vector();
    for (int64_t i = 0; i < size * n; ++i) ASSERT_EQ(gathered[i], value(i / n, i % n));

    Tensor whole = make(size * n, DType::kFloat64, [&](int64_t i) { return value(g.rank(), i); });
    Tensor part = Tensor::zeros(Shape({n}), DType::kFloat64);
    g.reduce_scatter(part, whole);
    const auto reduced = part.to_double_vector();
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += value(r, g.rank() * n + i);
      ASSERT_EQ(reduced[i], want);
    }

    Tensor b = make(n, DType::kFloat32, [&](int64_t i) { return value(g.rank(), i); });
    g.broadcast(b, size - 1);
    const auto bv = b.to_double_vector();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bv[i], value(size - 1, i));

    Tensor a_in = make(size * n, DType::kInt64, [&](int64_t i) { return 100.0 * g.rank() + i; });
    Tensor a_out = Tensor::zeros(Shape({size * n}), DType::kInt64);
    g.all_to_all(a_out, a_in);
    const auto av = a_out.to_double_vector();
    for (int64_t i = 0; i < size * n; ++i) {
      ASSERT_EQ(av[i], 100.0 * (i / n) + g.rank() * n + i % n);
    }
  }
  g.barrier();
}

TEST(MpiP2P, RingWithTagsAndAsync) {
  ProcessGroup& g = *world();
  const int next = (g.rank() + 1) % g.size(), prev = (g.rank() + g.size() - 1) % g.size();
  auto s1 = g.send_async(Tensor::full(Shape({7919}), g.rank() + 1, DType::kFloat64), next, 1);
  auto s2 = g.send_async(Tensor::full(Shape({3}), g.rank() + 2, DType::kFloat64), next, 2);
  Tensor r2 = Tensor::zeros(Shape({3}), DType::kFloat64);
  Tensor r1 = Tensor::zeros(Shape({7919}), DType::kFloat64);
  g.recv(r2, prev, 2);
  auto w1 = g.recv_async(r1, prev, 1);
  Tensor t = Tensor::ones(Shape({5}), DType::kFloat32);
  auto ar = g.all_reduce_async(t);
  w1->wait();
  s1->wait();
  s2->wait();
  ar->wait();
  EXPECT_TRUE(ar->is_completed());
  for (double v : r1.to_double_vector()) ASSERT_EQ(v, prev + 1);
  for (double v : r2.to_double_vector()) ASSERT_EQ(v, prev + 2);
  for (double v : t.to_double_vector()) ASSERT_EQ(v, g.size());
}

TEST(MpiSubgroups, EvenRanks) {
  ProcessGroup& g = *world();
  std::vector<int> evens;
  for (int r = 0; r < g.size(); r += 2) evens.push_back(r);
  if (g.rank() % 2 == 0) {
    auto sub = create_subgroup(g, evens, "even");
    EXPECT_EQ(sub->rank(), g.rank() / 2);
    Tensor t = Tensor::full(Shape({4}), g.rank(), DType::kInt64);
    sub->all_reduce(t);
    double want = 0;
    for (int r : evens) want += r;
    for (double v : t.to_double_vector()) ASSERT_EQ(v, want);
  }
  g.barrier();
}

TEST(MpiTimeout, RecvWithNoSenderNamesThePeer) {
  ProcessGroupOptions o = world()->options();
  o.timeout = std::chrono::milliseconds(300);
  o.name = "short";
  auto g = create_process_group(o);
  if (g->rank() == 0) {
    Tensor t = Tensor::zeros(Shape({4}), DType::kFloat32);
    EXPECT_ERROR(g->recv(t, 1, 77), "Recv on group 'short'", "mpi, rank 0", "peer rank 1",
                 "timed out after 300 ms");
    EXPECT_TRUE(g->broken());
  }
  world()->barrier();
}

}  // namespace
}  // namespace cleave::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using namespace cleave::comm;
  ProcessGroupOptions o;
  o.backend = "mpi";
  o.rank = env_int("OMPI_COMM_WORLD_RANK");
  o.size = env_int("OMPI_COMM_WORLD_SIZE");
  if (o.rank < 0 || o.size < 1) {
    std::fprintf(stderr, "comm_mpi_tests: run me under mpirun\n");
    return 2;
  }
  world() = create_process_group(o);
  const int rc = RUN_ALL_TESTS();
  world().reset();
  return rc;
}
