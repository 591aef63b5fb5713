// Collectives on every backend that runs ranks as threads (gloo over TCP loopback, inproc), over
// the in-memory store: world sizes 1, 2, 3, 4, 8 and element counts 0, 1, a prime, one not
// divisible by the world size. Integer data is checked exactly, floating data to 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"
#include "testing/env.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave::comm {
namespace {

// Each test runs once per backend (the test name ends in /gloo or /inproc).
class Collectives : public ::testing::TestWithParam<std::string> {
 protected:
  // "gloo_tcp" is gloo with its shared-memory collectives off (CLEAVE_COMM_SHM=0), so that the
  // TCP path keeps its tests now that ranks of one host use shared memory.
  void run_world(int size, const std::function<void(ProcessGroup&)>& fn) {
    const bool tcp = GetParam() == "gloo_tcp";
    std::optional<testing::ScopedEnv> shm_off;
    if (tcp) shm_off.emplace("CLEAVE_COMM_SHM", "0");
    testing::run_world(size, fn, std::chrono::seconds(20), tcp ? "gloo" : GetParam());
  }
};

const std::vector<int> kWorldSizes = {1, 2, 3, 4, 8};
const std::vector<int64_t> kCounts = {0, 1, 7919, 10};  // 10 is not divisible by 3, 4 or 8

// The value rank r holds at element i: distinct per rank and element, small enough that products
// over 8 ranks stay exact in int64 and float64.
double value(int r, int64_t i) { return static_cast<double>((r + 1) * 3 + (i % 5)); }

Tensor make(int64_t n, DType dtype, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty(Shape({n}), dtype);
  CLEAVE_DISPATCH_ALL(dtype, [&] {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(f(i));
  });
  return t;
}

void expect_values(const Tensor& t, const std::function<double(int64_t)>& f, const char* what) {
  const std::vector<double> got = t.to_double_vector();
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = f(static_cast<int64_t>(i));
    ASSERT_NEAR(got[i], want, 1e-6 * std::max(1.0, std::abs(want))) << what << " element " << i;
  }
}

double reduce_over(int size, ReduceOp op, int64_t i) {
  double acc = value(0, i);
  for (int r = 1; r < size; ++r) {
    const double v = value(r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
    }
  }
  return op == ReduceOp::kMean ? acc / size : acc;
}

TEST_P(Collectives, AllReduceEveryOpSizeAndCount) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : kCounts) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
          for (DType dtype : {DType::kInt64, DType::kFloat64}) {
            Tensor t = make(n, dtype, [&](int64_t i) { return value(g.rank(), i); });
            g.all_reduce(t, op);
            expect_values(
                t, [&](int64_t i) { return reduce_over(size, op, i); }, reduce_op_name(op));
          }
        }
        Tensor f = make(n, DType::kFloat32, [&](int64_t i) { return value(g.rank(), i); });
        g.all_reduce(f, ReduceOp::kMean);
        expect_values(
            f, [&](int64_t i) { return reduce_over(size, ReduceOp::kMean, i); }, "mean");
        Tensor i32 = make(n, DType::kInt32, [&](int64_t i) { return value(g.rank(), i); });
        g.all_reduce(i32);
        expect_values(
            i32, [&](int64_t i) { return reduce_over(size, ReduceOp::kSum, i); }, "int32 sum");
      }
    });
  }
}

// NOTE [AllReduce into other buffers]: the input stays as it was, and the output has the bits
// the in-place AllReduce gives, mean included (on shared memory the mean is folded into the
// reduction; elsewhere it is the default copy, reduce and scale). 100003 Float32 elements span
// several rounds of the shared-memory slots; 7919 is a prime.
TEST_P(Collectives, AllReduceIntoAnotherBufferLeavesTheInputAndMatchesInPlace) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7919}, int64_t{100003}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
          for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
            // Values whose sums round: 1/3-ish fractions, different per rank and element.
            const auto v = [&](int64_t i) { return (g.rank() + 1) / 3.0 + (i % 7) * 0.1; };
            const Tensor in = make(n, dtype, v);
            const Tensor out = Tensor::full(Shape({n}), -1.0, dtype);
            g.all_reduce(out, in, op);
            expect_values(in, v, "the input after AllReduce into another buffer");
            const Tensor in_place = in.clone();
            g.all_reduce(in_place, op);
            ASSERT_EQ(std::memcmp(out.raw_data(), in_place.raw_data(), out.nbytes()), 0)
                << reduce_op_name(op) << " " << dtype_name(dtype) << " n=" << n << " size " << size;
            if (op == ReduceOp::kMean) {  // the sum, then one multiplication by 1 / size
              const Tensor sum = in.clone();
              g.all_reduce(sum, ReduceOp::kSum);
              CLEAVE_DISPATCH_FLOAT(dtype, [&] {
                const T s = static_cast<T>(1.0 / size);
                for (int64_t i = 0; i < n; ++i) {
                  ASSERT_EQ(out.data<T>()[i], sum.data<T>()[i] * s) << "mean element " << i;
                }
              });
            }
            // The async form, into a third buffer.
            const Tensor out2 = Tensor::zeros(Shape({n}), dtype);
            g.all_reduce_async(out2, in, op)->wait();
            ASSERT_EQ(std::memcmp(out2.raw_data(), in_place.raw_data(), out.nbytes()), 0);
          }
        }
      }
    });
  }
}

// Several buffers are one AllReduce of their concatenation: the bits of the AllReduce of one
// joined buffer, whatever the buffers' sizes (empty ones, ones that straddle the shared-memory
// rounds and chunks), into other buffers or in place.
TEST_P(Collectives, AllReduceOfSeveralBuffersEqualsTheirConcatenation) {
  for (int size : {2, 3, 8}) {
    run_world(size, [&](ProcessGroup& g) {
      const std::vector<int64_t> counts = {0, 3, 70001, 1, 0, 40000, 7};
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
        std::vector<Tensor> ins, outs, in_place;
        int64_t total = 0;
        for (int64_t n : counts) {
          const int64_t first = total;
          ins.push_back(make(n, DType::kFloat32, [&](int64_t i) {
            return (g.rank() + 1) / 3.0 + ((first + i) % 11) * 0.1;
          }));
          outs.push_back(Tensor::full(Shape({n}), -1.0));
          in_place.push_back(ins.back().clone());
          total += n;
        }
        Tensor joined = Tensor::empty(Shape({total}));
        int64_t at = 0;
        for (const Tensor& t : ins) {
          std::memcpy(joined.data<float>() + at, t.data<float>(), t.nbytes());
          at += t.numel();
        }
        g.all_reduce(joined, op);
        g.all_reduce(outs, ins, op);
        g.all_reduce_async(in_place, in_place, op)->wait();
        at = 0;
        for (size_t k = 0; k < counts.size(); ++k) {
          ASSERT_EQ(std::memcmp(outs[k].raw_data(), joined.data<float>() + at, outs[k].nbytes()), 0)
              << reduce_op_name(op) << " buffer " << k << " size " << size;
          ASSERT_EQ(
              std::memcmp(in_place[k].raw_data(), joined.data<float>() + at, outs[k].nbytes()), 0)
              << reduce_op_name(op) << " buffer " << k << " in place, size " << size;
          at += counts[k];
        }
      }
      EXPECT_ERROR(
          g.all_reduce(std::vector<Tensor>{Tensor::zeros(Shape({2}))},
                       std::vector<Tensor>{Tensor::zeros(Shape({2})), Tensor::zeros(Shape({2}))}),
          "1 outputs for 2 inputs");
      EXPECT_ERROR(g.all_reduce(std::vector<Tensor>{Tensor::zeros(Shape({2})),
                                                    Tensor::zeros(Shape({2}), DType::kFloat64)},
                                std::vector<Tensor>{Tensor::zeros(Shape({2})),
                                                    Tensor::zeros(Shape({2}), DType::kFloat64)}),
                   "input 1 has dtype Float64 but input 0 has Float32");
    });
  }
}

TEST_P(Collectives, AllReduceIntoABufferOfAnotherSizeOrDtypeIsRefused) {
  run_world(2, [&](ProcessGroup& g) {
    EXPECT_ERROR(g.all_reduce(Tensor::zeros(Shape({3})), Tensor::zeros(Shape({4}))),
                 "AllReduce on group 'world' (rank",
                 "the output has 3 elements but the input has 4");
    EXPECT_ERROR(
        g.all_reduce(Tensor::zeros(Shape({4}), DType::kFloat64), Tensor::zeros(Shape({4}))),
        "the output has dtype Float64 but the input has Float32");
    EXPECT_ERROR(g.all_reduce(Tensor::zeros(Shape({4}), DType::kInt32),
                              Tensor::zeros(Shape({4}), DType::kInt32), ReduceOp::kMean),
                 "op mean needs a floating tensor");
  });
}

TEST_P(Collectives, AllGatherConcatenatesInRankOrder) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : kCounts) {
        Tensor in = make(n, DType::kInt32, [&](int64_t i) { return value(g.rank(), i); });
        Tensor out = Tensor::zeros(Shape({size * n}), DType::kInt32);
        g.all_gather(out, in);
        expect_values(
            out, [&](int64_t i) { return n == 0 ? 0 : value(i / n, i % n); }, "all_gather");
      }
    });
  }
}

TEST_P(Collectives, ReduceScatterKeepsThisRanksChunk) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : kCounts) {
        Tensor in = make(size * n, DType::kFloat64, [&](int64_t i) { return value(g.rank(), i); });
        Tensor out = Tensor::zeros(Shape({n}), DType::kFloat64);
        g.reduce_scatter(out, in, ReduceOp::kSum);
        expect_values(
            out, [&](int64_t i) { return reduce_over(size, ReduceOp::kSum, g.rank() * n + i); },
            "reduce_scatter");
        Tensor mx = Tensor::zeros(Shape({n}), DType::kFloat64);
        g.reduce_scatter(mx, in, ReduceOp::kMax);
        expect_values(
            mx, [&](int64_t i) { return reduce_over(size, ReduceOp::kMax, g.rank() * n + i); },
            "reduce_scatter max");
      }
    });
  }
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : kCounts) {
        for (int root = 0; root < size; ++root) {
          Tensor t = make(n, DType::kFloat32, [&](int64_t i) { return value(g.rank(), i); });
          g.broadcast(t, root);
          expect_values(
              t, [&](int64_t i) { return value(root, i); }, "broadcast");
        }
      }
    });
  }
}

TEST_P(Collectives, AllToAllSendsChunkJToRankJ) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{13}}) {
        // Element i of rank r's input: chunk i / n goes to rank i / n.
        Tensor in = make(size * n, DType::kInt64,
                         [&](int64_t i) { return 100.0 * g.rank() + static_cast<double>(i); });
        Tensor out = Tensor::zeros(Shape({size * n}), DType::kInt64);
        g.all_to_all(out, in);
        // Chunk j of the output came from rank j: its chunk `rank`.
        expect_values(
            out,
            [&](int64_t i) {
              const int64_t j = i / n, k = i % n;
              return 100.0 * static_cast<double>(j) + static_cast<double>(g.rank() * n + k);
            },
            "all_to_all");
      }
    });
  }
}

TEST_P(Collectives, OneMillionElements) {
  for (int size : {2, 4}) {
    run_world(size, [&](ProcessGroup& g) {
      const int64_t n = 1 << 20;
      Tensor t = make(n, DType::kFloat32, [&](int64_t i) { return value(g.rank(), i); });
      g.all_reduce(t);
      expect_values(
          t, [&](int64_t i) { return reduce_over(size, ReduceOp::kSum, i); }, "1M");
      Tensor out = Tensor::zeros(Shape({size * n}), DType::kFloat32);
      g.all_gather(out, t);
      expect_values(
          out, [&](int64_t i) { return reduce_over(size, ReduceOp::kSum, i % n); }, "1M gather");
    });
  }
}

TEST_P(Collectives, BarrierAndBoolAllReduce) {
  run_world(3, [&](ProcessGroup& g) {
    g.barrier();
    Tensor b = make(4, DType::kBool, [&](int64_t i) { return (i == g.rank()) ? 1 : 0; });
    g.all_reduce(b, ReduceOp::kMax);
    expect_values(
        b, [&](int64_t i) { return i < 3 ? 1 : 0; }, "bool any");
    EXPECT_ERROR(g.all_reduce(b, ReduceOp::kSum), "not defined on Bool", "max (any)");
  });
}

TEST_P(Collectives, BadArgumentsAreErrors) {
  run_world(2, [&](ProcessGroup& g) {
    Tensor in = Tensor::zeros(Shape({3}), DType::kFloat32);
    EXPECT_ERROR(g.all_gather(Tensor::zeros(Shape({5}), DType::kFloat32), in), "AllGather",
                 "output has 5 elements", "expected group size 2 x 3");
    EXPECT_ERROR(g.all_gather(Tensor::zeros(Shape({6}), DType::kFloat64), in), "dtype Float64",
                 "input has Float32");
    EXPECT_ERROR(g.reduce_scatter(Tensor::zeros(Shape({2}), DType::kFloat32), in), "ReduceScatter",
                 "input has 3 elements");
    EXPECT_ERROR_KIND(g.broadcast(in, 2), ErrorKind::kInvalidArgument, "Broadcast",
                      "root rank 2 is out of range", "2 ranks");
    EXPECT_ERROR(g.send(in, -1), "Send", "destination rank -1 is out of range");
    EXPECT_ERROR(g.all_to_all(in, in), "AlltoAll", "3 elements, not divisible into 2");
    EXPECT_ERROR(g.all_reduce(Tensor::zeros(Shape({2}), DType::kInt32), ReduceOp::kMean),
                 "op mean needs a floating tensor", "Int32");
    EXPECT_FALSE(g.broken());  // bad input does not break the group
    g.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, ::testing::Values("gloo", "gloo_tcp", "inproc"),
                         [](const auto& info) { return info.param; });

TEST(ProcessGroupFactory, UnknownAndHcclBackendsAreErrors) {
  ProcessGroupOptions o;
  o.store = make_memory_store();
  o.backend = "hccl";
  EXPECT_ERROR(create_process_group(o), "\"hccl\" (Ascend) is not available",
               "\"gloo\", \"inproc\"");
  EXPECT_ERROR_KIND(create_process_group(o), ErrorKind::kUnimplemented);
  o.backend = "carrier-pigeon";
  EXPECT_ERROR(create_process_group(o), "unknown backend \"carrier-pigeon\"",
               "expected one of \"gloo\", \"inproc\", \"mpi\", \"nccl\"");
  EXPECT_ERROR_KIND(create_process_group(o), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(backend_available("gloo"));
  EXPECT_TRUE(backend_available("inproc"));
}

}  // namespace
}  // namespace cleave::comm

namespace cleave::comm {
namespace {

// Built with CUDA and NCCL but run where no GPU is visible: a clear error, not a crash.
TEST(NcclBackend, WithoutAGpuTheErrorSaysSo) {
  if (!backend_available("nccl")) GTEST_SKIP() << "built without NCCL";
  ProcessGroupOptions o;
  o.backend = "nccl";
  o.store = make_memory_store();
  try {
    auto g = create_process_group(o);
    EXPECT_EQ(g->backend(), "nccl");  // a GPU is present: the group of one rank forms
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA GPU is visible"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave::comm
