// The gloo backend's shared-memory collectives (NOTE [Shared-memory collectives] in
// src/comm/shm/shm_collectives.h), ranks as threads: every collective bit for bit against a
// reference reduced in rank order (NOTE [Sum order of shared-memory collectives]), over world
// sizes 1, 2, 3, 4, 8, element counts 0, 1, a prime and one spanning several rounds, sub-groups
// included; equality with Gloo's TCP path for 2 ranks; a rank that stops participating; nothing
// left in /dev/shm.
#include "comm/shm/shm_collectives.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "comm/backends.h"
#include "comm/shm_testing.h"
#include "testing/env.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave::comm {
namespace {

using std::chrono::milliseconds;

const std::vector<int> kWorldSizes = {1, 2, 3, 4, 8};
// 0, 1, a prime, and more than one round of kSlotBytes for float32 (131072 per round).
const std::vector<int64_t> kCounts = {0, 1, 7919, 300007};

using shm_testing::leftover_segments;
using shm_testing::run_on_hosts;
using testing::ScopedEnv;

// A float that is not a small integer, distinct per rank and element, so that the order of the
// additions shows in the last bits.
float value(int rank, int64_t i) {
  return 1.0f / static_cast<float>(3 + rank * 7 + (i % 101)) + static_cast<float>(i % 13) * 0.37f;
}

Tensor make(int64_t n, DType dtype, int rank, int64_t offset = 0) {
  Tensor t = Tensor::empty(Shape({n}), dtype);
  CLEAVE_DISPATCH_ALL(dtype, [&] {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = ((i + offset) * 7 + rank) % 3 == 0;
      } else if constexpr (std::is_floating_point_v<T>) {
        p[i] = static_cast<T>(value(rank, i + offset));
      } else {
        p[i] = static_cast<T>((rank + 1) * 3 + ((i + offset) % 5));
      }
    }
  });
  return t;
}

template <typename T>
T apply(T a, T b, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == ReduceOp::kMax ? (a || b) : (a && b);
  } else {
    if constexpr (std::is_integral_v<T>) {
      // Integers wrap, as the collectives' own arithmetic does (src/comm/rank_order_reduce.cc):
      // a signed overflow would be undefined behaviour (UBSan found the product of 8 ranks').
      using U = std::make_unsigned_t<T>;
      if (op == ReduceOp::kSum || op == ReduceOp::kMean) {
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      }
      if (op == ReduceOp::kProd) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    }
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        return a + b;
      case ReduceOp::kProd:
        return a * b;
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kMin:
        return std::min(a, b);
    }
    return a;
  }
}

// op over ranks 0..size-1 of make(n, dtype, r, offset), in rank order.
Tensor reference(int64_t n, DType dtype, int size, ReduceOp op, int64_t offset = 0) {
  Tensor acc = make(n, dtype, 0, offset);
  CLEAVE_DISPATCH_ALL(dtype, [&] {
    T* a = acc.data<T>();
    for (int r = 1; r < size; ++r) {
      const Tensor x = make(n, dtype, r, offset);
      const T* b = x.data<T>();
      for (int64_t i = 0; i < n; ++i) a[i] = apply<T>(a[i], b[i], op);
    }
  });
  return acc;
}

void expect_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  if (got.nbytes() == 0) return;
  const auto* g = static_cast<const unsigned char*>(got.raw_data());
  const auto* w = static_cast<const unsigned char*>(want.raw_data());
  if (std::memcmp(g, w, got.nbytes()) == 0) return;
  const size_t es = dtype_size(got.dtype());
  for (size_t i = 0; i < got.nbytes() / es; ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) != 0) {
      FAIL() << what << ": element " << i << " differs: got " << got.to_double_vector()[i]
             << ", want " << want.to_double_vector()[i];
    }
  }
}

void run_world(int size, const std::function<void(ProcessGroup&)>& fn,
               milliseconds timeout = std::chrono::seconds(20)) {
  testing::run_world(size, fn, timeout, "gloo");
}

TEST(ShmCollectives, GlooGroupsOnOneHostUseSharedMemoryUnlessTurnedOff) {
  run_world(3, [](ProcessGroup& g) { EXPECT_EQ(collective_transport(g), "shm"); });
  run_world(1, [](ProcessGroup& g) { EXPECT_EQ(collective_transport(g), "tcp"); });
  {
    ScopedEnv off("CLEAVE_COMM_SHM", "0");
    run_world(3, [](ProcessGroup& g) { EXPECT_EQ(collective_transport(g), "tcp"); });
  }
  run_world(
      2, [](ProcessGroup& g) { EXPECT_EQ(collective_transport(g), "shm"); }, milliseconds(5000));
  EXPECT_TRUE(leftover_segments().empty());
}

// A creator killed before every rank mapped its segment leaves the name behind; the next group
// made on the host removes names whose creator (the pid at the end) is gone, and no other.
TEST(ShmCollectives, ASegmentWhoseCreatorIsGoneIsRemovedByTheNextGroup) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);  // a pid that no longer runs
  const std::string orphan = fmt::format("cleave-coll-00000000deadbeef-{}", child);
  const std::string alive = fmt::format("cleave-coll-00000000cafef00d-{}", getpid());
  for (const std::string& name : {orphan, alive}) {
    std::ofstream(std::filesystem::path("/dev/shm") / name) << "x";
  }
  run_world(2, [](ProcessGroup& g) { EXPECT_EQ(collective_transport(g), "shm"); });
  const std::vector<std::string> left = leftover_segments();
  EXPECT_EQ(std::count(left.begin(), left.end(), orphan), 0);
  EXPECT_EQ(std::count(left.begin(), left.end(), alive), 1);
  std::filesystem::remove(std::filesystem::path("/dev/shm") / alive);
}

TEST(ShmCollectives, AllReduceEqualsRankOrderReferenceBitForBit) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : kCounts) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
          for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32}) {
            if (n > 10000 && dtype != DType::kFloat32) continue;
            Tensor t = make(n, dtype, g.rank());
            g.all_reduce(t, op);
            expect_bits(t, reference(n, dtype, size, op),
                        fmt::format("AllReduce {} {} n={} size={} rank {}", reduce_op_name(op),
                                    dtype_name(dtype), n, size, g.rank()));
          }
        }
        Tensor b = make(n, DType::kBool, g.rank());
        g.all_reduce(b, ReduceOp::kMax);
        expect_bits(b, reference(n, DType::kBool, size, ReduceOp::kMax), "AllReduce bool max");
      }
    });
  }
}

TEST(ShmCollectives, ReduceScatterEqualsRankOrderReferenceBitForBit) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : kCounts) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kProd}) {
          Tensor in = make(size * n, DType::kFloat32, g.rank());
          Tensor out = Tensor::zeros(Shape({n}), DType::kFloat32);
          g.reduce_scatter(out, in, op);
          // Chunk `rank` of the reference over the whole input.
          const Tensor whole = reference(size * n, DType::kFloat32, size, op);
          Tensor want = Tensor::empty(Shape({n}), DType::kFloat32);
          if (n > 0) {
            std::memcpy(want.raw_data(),
                        static_cast<const char*>(whole.raw_data()) + g.rank() * n * 4, n * 4);
          }
          expect_bits(out, want,
                      fmt::format("ReduceScatter {} n={} size={} rank {}", reduce_op_name(op), n,
                                  size, g.rank()));
        }
      }
    });
  }
}

TEST(ShmCollectives, AllGatherBroadcastAndAllToAllMoveEveryByte) {
  for (int size : kWorldSizes) {
    run_world(size, [&](ProcessGroup& g) {
      for (int64_t n : kCounts) {
        const std::string where = fmt::format("n={} size={} rank {}", n, size, g.rank());
        Tensor in = make(n, DType::kFloat32, g.rank());
        Tensor out = Tensor::zeros(Shape({size * n}), DType::kFloat32);
        g.all_gather(out, in);
        for (int r = 0; r < size; ++r) {
          expect_bits(out.narrow_rows(r * n, n), make(n, DType::kFloat32, r),
                      "AllGather part " + std::to_string(r) + " " + where);
        }
        for (int root = 0; root < size; ++root) {
          Tensor t = make(n, DType::kFloat64, g.rank());
          g.broadcast(t, root);
          expect_bits(t, make(n, DType::kFloat64, root), "Broadcast root " + where);
        }
        // AlltoAll: chunk j of rank r's input is make(n, r, offset j * n); it lands as chunk r
        // of rank j's output.
        Tensor a_in = make(size * n, DType::kInt32, g.rank());
        Tensor a_out = Tensor::zeros(Shape({size * n}), DType::kInt32);
        g.all_to_all(a_out, a_in);
        for (int r = 0; r < size; ++r) {
          expect_bits(a_out.narrow_rows(r * n, n), make(n, DType::kInt32, r, g.rank() * n),
                      "AlltoAll chunk " + where);
        }
        g.barrier();
      }
    });
  }
  EXPECT_TRUE(leftover_segments().empty());
}

TEST(ShmCollectives, AsyncOperationsRunInCallOrder) {
  run_world(4, [](ProcessGroup& g) {
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 8; ++k) {
      ts.push_back(make(1000 + k, DType::kFloat32, g.rank(), k));
      works.push_back(g.all_reduce_async(ts.back()));
    }
    works.push_back(g.barrier_async());
    for (auto& w : works) w->wait();
    for (int k = 0; k < 8; ++k) {
      expect_bits(ts[k], reference(1000 + k, DType::kFloat32, 4, ReduceOp::kSum, k), "async");
    }
  });
}

TEST(ShmCollectives, SubGroupsHaveTheirOwnSegment) {
  run_world(4, [](ProcessGroup& world) {
    const int r = world.rank();
    auto odd = r % 2 == 1 ? create_subgroup(world, {1, 3}, "odd") : nullptr;
    auto low = r < 3 ? create_subgroup(world, {0, 1, 2}, "low") : nullptr;
    for (const auto& [group, members] :
         {std::pair{odd, std::vector<int>{1, 3}}, std::pair{low, std::vector<int>{0, 1, 2}}}) {
      if (!group) continue;
      EXPECT_EQ(collective_transport(*group), "shm");
      // Each member contributes make(..., its world rank): the reference over those ranks.
      Tensor t = make(7919, DType::kFloat32, r);
      group->all_reduce(t);
      Tensor want = make(7919, DType::kFloat32, members[0]);
      for (size_t k = 1; k < members.size(); ++k) {
        const Tensor x = make(7919, DType::kFloat32, members[k]);
        for (int64_t i = 0; i < 7919; ++i) want.data<float>()[i] += x.data<float>()[i];
      }
      expect_bits(t, want, "sub-group " + group->name());
    }
    world.all_reduce(Tensor::full({3}, 1.0));
  });
}

// NOTE [Sum order of shared-memory collectives]: with 2 ranks Gloo's ring and the rank order
// agree bit for bit (a + b == b + a), so the shared-memory path returns what TCP returned.
TEST(ShmCollectives, TwoRanksEqualGlooOverTcpBitForBit) {
  const int64_t n = 300007;
  std::vector<Tensor> results[2];
  for (const char* setting : {"0", "1"}) {
    ScopedEnv shm("CLEAVE_COMM_SHM", setting);
    std::mutex mutex;
    run_world(2, [&](ProcessGroup& g) {
      EXPECT_EQ(collective_transport(g), std::string(setting) == "0" ? "tcp" : "shm");
      Tensor sum = make(n, DType::kFloat32, g.rank());
      g.all_reduce(sum);
      Tensor prod = make(n, DType::kFloat64, g.rank());
      g.all_reduce(prod, ReduceOp::kProd);
      Tensor mean = make(n, DType::kFloat32, g.rank());
      g.all_reduce(mean, ReduceOp::kMean);
      std::lock_guard<std::mutex> lock(mutex);
      if (g.rank() == 1) {
        results[std::string(setting) == "1"] = {sum, prod, mean};
      }
    });
  }
  ASSERT_EQ(results[0].size(), 3u);
  ASSERT_EQ(results[1].size(), 3u);
  for (size_t k = 0; k < 3; ++k) expect_bits(results[1][k], results[0][k], "shm vs tcp");
}

TEST(ShmCollectives, SixtyFourMegabytesOnTwoRanks) {
  const int64_t n = int64_t{16} << 20;  // float32
  run_world(2, [&](ProcessGroup& g) {
    Tensor t = make(n, DType::kFloat32, g.rank());
    g.all_reduce(t);
    expect_bits(t, reference(n, DType::kFloat32, 2, ReduceOp::kSum), "64 MB AllReduce");
  });
}

// Thread ranks pretending to be on the hosts `host_of[rank]` (NOTE [Hierarchical collectives] in
// src/comm/gloo/gloo_process_group.cc).
TEST(ShmCollectives, GroupsOverSeveralHostsReduceOnEachHostThenAcrossLeaders) {
  // Hosts A = {0, 2}, B = {1, 3}: the float sum is (x0 + x2) + (x1 + x3), bit for bit (two
  // leaders: Gloo's ring adds two values, which commute).
  run_on_hosts({"A", "B", "A", "B"}, [](ProcessGroup& g) {
    EXPECT_EQ(collective_transport(g), "shm+tcp");
    for (int64_t n : kCounts) {
      Tensor t = make(n, DType::kFloat32, g.rank());
      g.all_reduce(t);
      Tensor want = Tensor::empty(Shape({n}), DType::kFloat32);
      for (int64_t i = 0; i < n; ++i) {
        want.data<float>()[i] = (value(0, i) + value(2, i)) + (value(1, i) + value(3, i));
      }
      expect_bits(t, want, fmt::format("hierarchical AllReduce n={} rank {}", n, g.rank()));
      Tensor m = make(n, DType::kInt64, g.rank());
      g.all_reduce(m, ReduceOp::kMax);
      expect_bits(m, reference(n, DType::kInt64, 4, ReduceOp::kMax), "hierarchical max");
      g.barrier();
      for (int root = 0; root < 4; ++root) {
        Tensor b = make(n, DType::kFloat64, g.rank());
        g.broadcast(b, root);
        expect_bits(b, make(n, DType::kFloat64, root), "hierarchical Broadcast");
      }
      Tensor rs_in = make(4 * n, DType::kInt64, g.rank());
      Tensor rs_out = Tensor::zeros(Shape({n}), DType::kInt64);
      g.reduce_scatter(rs_out, rs_in);
      expect_bits(rs_out,
                  reference(4 * n, DType::kInt64, 4, ReduceOp::kSum).narrow_rows(g.rank() * n, n),
                  "hierarchical ReduceScatter");
      // AllGather stays on Gloo's mesh.
      Tensor in = make(n, DType::kInt32, g.rank());
      Tensor out = Tensor::zeros(Shape({4 * n}), DType::kInt32);
      g.all_gather(out, in);
      for (int r = 0; r < 4; ++r) {
        expect_bits(out.narrow_rows(r * n, n), make(n, DType::kInt32, r), "AllGather");
      }
    }
  });
  // A = {0, 1, 2}, B = {3}, C = {4}: hosts with one rank take part as leaders only.
  run_on_hosts({"A", "A", "A", "B", "C"}, [](ProcessGroup& g) {
    EXPECT_EQ(collective_transport(g), "shm+tcp");
    for (int64_t n : kCounts) {
      Tensor t = make(n, DType::kInt64, g.rank());
      g.all_reduce(t);
      expect_bits(t, reference(n, DType::kInt64, 5, ReduceOp::kSum), "int64 sum over 3 hosts");
      Tensor f = make(n, DType::kFloat64, g.rank());
      g.all_reduce(f, ReduceOp::kMean);
      for (int root : {0, 2, 3, 4}) {
        Tensor b = make(n, DType::kInt32, g.rank());
        g.broadcast(b, root);
        expect_bits(b, make(n, DType::kInt32, root), "Broadcast over 3 hosts");
      }
      const Tensor sum = reference(n, DType::kFloat64, 5, ReduceOp::kSum);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(f.data<double>()[i], sum.data<double>()[i] / 5, 1e-12);
      }
      g.barrier();
    }
  });
  // Every rank on its own host: nothing to share, TCP.
  run_on_hosts({"A", "B", "C"}, [](ProcessGroup& g) { EXPECT_EQ(collective_transport(g), "tcp"); });
  EXPECT_TRUE(leftover_segments().empty());
}

TEST(ShmCollectives, AHostWhoseLeaderStopsFailsEveryRank) {
  const auto start = std::chrono::steady_clock::now();
  // Hosts A = {0, 1}, B = {2, 3}; rank 2 (B's leader) never calls the AllReduce: rank 3 waits on
  // its host for it, and A's leader waits for it over TCP, then fails its host's segment.
  auto store = make_memory_store();
  std::vector<std::shared_ptr<ProcessGroup>> groups(4);
  testing::run_threads(4, [&](int rank) {
    ShmCollectives::set_host_key_for_testing(rank < 2 ? "test-host-A" : "test-host-B");
    groups[rank] =
        create_process_group(testing::thread_world_options(store, rank, 4, milliseconds(600)));
    ShmCollectives::set_host_key_for_testing("");
    if (rank == 2) return;
    Tensor t = Tensor::full({100}, 1.0);
    try {
      groups[rank]->all_reduce(t);
      ADD_FAILURE() << "AllReduce returned without rank 2";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnavailable);
      const std::string what = e.what();
      EXPECT_NE(what.find("AllReduce on group 'world'"), std::string::npos) << what;
      if (rank == 3) {
        EXPECT_NE(what.find("rank(s) 2 did not arrive"), std::string::npos) << what;
      } else if (rank == 1) {
        // A's leader fails over TCP (and says why in its own error) at about the time rank 1's
        // own wait for it ends: either names rank 0.
        EXPECT_TRUE(what.find("rank 0 gave up on the operation (its error names the cause)") !=
                        std::string::npos ||
                    what.find("rank(s) 0 did not arrive") != std::string::npos)
            << what;
      } else {
        EXPECT_NE(what.find("Timed out"), std::string::npos) << what;  // Gloo's words
      }
    }
    EXPECT_TRUE(groups[rank]->broken());
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
}

// NOTE [Calls checked in shared-memory collectives]
TEST(ShmCollectives, RanksCallingDifferentCollectivesFailAtOnceNamingTheCalls) {
  const auto start = std::chrono::steady_clock::now();
  run_world(3, [](ProcessGroup& g) {
    Tensor t = Tensor::full({g.rank() == 1 ? 1000 : 10}, 1.0);
    try {
      g.all_reduce(t);
      ADD_FAILURE() << "AllReduce of different sizes returned";
    } catch (const Error& e) {
      const std::string what = e.what();
      // The program's mistake, not a lost peer: no rank waits for the job's verdict on one.
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      if (g.rank() == 1) {
        EXPECT_NE(what.find("rank 0 called AllReduce(sum) of 10 elements of Float32 while this "
                            "rank called AllReduce(sum) of 1000 elements of Float32"),
                  std::string::npos)
            << what;
      } else {
        EXPECT_NE(what.find("rank 1 called AllReduce(sum) of 1000 elements of Float32 while this "
                            "rank called AllReduce(sum) of 10 elements of Float32"),
                  std::string::npos)
            << what;
      }
    }
    EXPECT_TRUE(g.broken());
  });
  run_world(2, [](ProcessGroup& g) {
    if (g.rank() == 0) {
      EXPECT_ERROR(g.barrier(),
                   "rank 1 called Broadcast from root 1 of 4 elements of Int64 while "
                   "this rank called Barrier");
    } else {
      EXPECT_ERROR(g.broadcast(Tensor::zeros(Shape({4}), DType::kInt64), 1),
                   "rank 0 called Barrier while this rank called Broadcast from root 1");
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ShmCollectives, RankThatStopsParticipatingIsNamedAfterTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  run_world(
      3,
      [](ProcessGroup& g) {
        if (g.rank() == 2) return;  // never calls the AllReduce
        Tensor t = Tensor::full({1000}, 1.0);
        try {
          g.all_reduce(t);
          ADD_FAILURE() << "AllReduce returned without rank 2";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kUnavailable);
          const std::string what = e.what();
          EXPECT_NE(what.find("AllReduce on group 'world'"), std::string::npos) << what;
          EXPECT_NE(what.find("peer rank 2"), std::string::npos) << what;
          // The first rank to give up names rank 2 itself; the other repeats its culprit.
          EXPECT_TRUE(what.find("rank(s) 2 did not arrive within the timeout of 500 ms") !=
                          std::string::npos ||
                      what.find("blaming rank 2") != std::string::npos)
              << what;
        }
        EXPECT_TRUE(g.broken());
        EXPECT_ERROR_KIND(g.barrier(), ErrorKind::kUnavailable);
      },
      milliseconds(500));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(leftover_segments().empty());
}

}  // namespace
}  // namespace cleave::comm
