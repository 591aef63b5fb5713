// What only the inproc backend promises (src/comm/inproc): reductions in group-rank order with
// bit-identical results on every rank, staged and direct rounds of every collective (NOTE [Inproc
// rounds]), several worlds at once, calls that disagree across ranks, ranks that die, leave or
// come late (NOTE [Inproc waiting]) and its point-to-point matching. The behaviour it shares with
// gloo is tested on both in collectives_test.cc and p2p_groups_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <latch>
#include <thread>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave::comm {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::run_threads;

void run_world(int size, const std::function<void(ProcessGroup&)>& fn,
               milliseconds timeout = std::chrono::seconds(20)) {
  testing::run_world(size, fn, timeout, "inproc");
}

ProcessGroupOptions options(const std::shared_ptr<Store>& store, int rank, int size,
                            milliseconds timeout = std::chrono::seconds(20)) {
  return testing::thread_world_options(store, rank, size, timeout, "inproc");
}

// Values whose float sum depends on the order of the terms: large and small magnitudes mixed.
float term(int rank, int64_t i) {
  const float big = (rank % 2 == 0 ? 1.0f : -1.0f) * 1e7f * static_cast<float>(1 + i % 3);
  return rank % 3 == 0 ? big : 0.1f * static_cast<float>(rank + 1) + static_cast<float>(i % 7);
}

Tensor terms(int rank, int64_t n) {
  Tensor t = Tensor::empty(Shape({n}), DType::kFloat32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = term(rank, i);
  return t;
}

// ((x_0 + x_1) + x_2) + ... in float32: NOTE [Inproc reduction order].
float sum_in_rank_order(int size, int64_t i) {
  float acc = term(0, i);
  for (int r = 1; r < size; ++r) acc += term(r, i);
  return acc;
}

TEST(Inproc, SumsInGroupRankOrderBitIdenticalOnEveryRank) {
  // 10 elements are a staged round; 20011 (a prime) a direct one at every size.
  for (int size : {2, 3, 4, 8}) {
    for (int64_t n : {int64_t{10}, int64_t{20011}}) {
      run_world(size, [&](ProcessGroup& g) {
        Tensor t = terms(g.rank(), n);
        g.all_reduce(t);
        for (int64_t i = 0; i < n; ++i) {
          const float want = sum_in_rank_order(size, i);
          ASSERT_EQ(std::memcmp(&t.data<float>()[i], &want, sizeof(float)), 0)
              << "size " << size << " n " << n << " element " << i << ": got " << t.data<float>()[i]
              << ", want " << want;
        }
        Tensor whole = Tensor::empty(Shape({size * n}), DType::kFloat32);
        for (int64_t i = 0; i < size * n; ++i) whole.data<float>()[i] = term(g.rank(), i % n);
        Tensor part = Tensor::zeros(Shape({n}), DType::kFloat32);
        g.reduce_scatter(part, whole);
        ASSERT_EQ(std::memcmp(part.raw_data(), t.raw_data(), t.nbytes()), 0) << "reduce_scatter";
      });
    }
  }
}

// Inputs above the staging size go through the direct rounds (addresses, not copies).
TEST(Inproc, DirectRoundsOfEveryCollective) {
  const int64_t n = 40009;  // a prime; 160 KB of Int32, 320 KB of Int64
  for (int size : {2, 3, 8}) {
    run_world(size, [&](ProcessGroup& g) {
      const int r = g.rank();
      auto value = [](int rank, int64_t i) { return static_cast<int64_t>(rank) * 1000003 + i; };
      Tensor in = Tensor::empty(Shape({n}), DType::kInt64);
      for (int64_t i = 0; i < n; ++i) in.data<int64_t>()[i] = value(r, i);

      Tensor gathered = Tensor::zeros(Shape({size * n}), DType::kInt64);
      g.all_gather(gathered, in);
      for (int64_t i = 0; i < size * n; ++i) {
        ASSERT_EQ(gathered.data<int64_t>()[i], value(static_cast<int>(i / n), i % n));
      }

      Tensor b = in.clone();
      g.broadcast(b, size - 1);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b.data<int64_t>()[i], value(size - 1, i));

      Tensor a2a_in = Tensor::empty(Shape({size * n}), DType::kInt64);
      for (int64_t i = 0; i < size * n; ++i) a2a_in.data<int64_t>()[i] = value(r, i);
      Tensor a2a_out = Tensor::zeros(Shape({size * n}), DType::kInt64);
      g.all_to_all(a2a_out, a2a_in);
      for (int64_t i = 0; i < size * n; ++i) {  // chunk j came from rank j: its chunk r
        ASSERT_EQ(a2a_out.data<int64_t>()[i], value(static_cast<int>(i / n), r * n + i % n));
      }

      Tensor rs = Tensor::zeros(Shape({n}), DType::kInt64);
      g.reduce_scatter(rs, a2a_in, ReduceOp::kMax);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(rs.data<int64_t>()[i], value(size - 1, r * n + i));

      Tensor mx = in.clone();
      g.all_reduce(mx, ReduceOp::kMin);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(mx.data<int64_t>()[i], value(0, i));
    });
  }
}

// Staged and direct rounds alternate their buffers by parity; a long run of rounds of changing
// sizes and kinds finds a rank that reuses a buffer another still reads.
TEST(Inproc, ManyRoundsOfChangingSizes) {
  run_world(4, [&](ProcessGroup& g) {
    for (int round = 0; round < 600; ++round) {
      const int64_t n = (round % 7 == 0) ? 20000 : 1 + (round * 37) % 300;
      if (round % 3 == 0) {
        Tensor t = Tensor::full(Shape({n}), g.rank() + round, DType::kInt64);
        g.all_reduce(t);
        ASSERT_EQ(t.data<int64_t>()[n - 1], 6 + 4 * round) << "round " << round;
      } else if (round % 3 == 1) {
        Tensor out = Tensor::zeros(Shape({4 * n}), DType::kInt32);
        g.all_gather(out, Tensor::full(Shape({n}), g.rank() * round, DType::kInt32));
        for (int q = 0; q < 4; ++q) ASSERT_EQ(out.data<int32_t>()[q * n], q * round);
      } else {
        Tensor t = Tensor::full(Shape({n}), g.rank() == round % 4 ? round : -1, DType::kFloat64);
        g.broadcast(t, round % 4);
        ASSERT_EQ(t.data<double>()[n / 2], round) << "round " << round;
      }
    }
  });
}

TEST(Inproc, TwoWorldsAtOnce) {
  auto store_a = make_memory_store(), store_b = make_memory_store();
  std::vector<std::shared_ptr<ProcessGroup>> keep(7);
  run_threads(7, [&](int thread) {
    const bool in_a = thread < 4;
    const int rank = in_a ? thread : thread - 4, size = in_a ? 4 : 3;
    auto g = create_process_group(options(in_a ? store_a : store_b, rank, size));
    keep[static_cast<size_t>(thread)] = g;
    for (int i = 0; i < 200; ++i) {
      Tensor t = Tensor::full(Shape({3}), in_a ? 1 : 10, DType::kInt64);
      g->all_reduce(t);
      ASSERT_EQ(t.data<int64_t>()[0], in_a ? 4 : 30);
    }
  });
}

TEST(Inproc, AGroupMadeAgainOverTheSameStoreFindsItsOwnHub) {
  auto store = make_memory_store();
  for (int time = 0; time < 3; ++time) {
    run_threads(3, [&](int rank) {
      auto g = create_process_group(options(store, rank, 3));
      Tensor t = Tensor::full(Shape({1}), time, DType::kInt64);
      g->all_reduce(t);
      EXPECT_EQ(t.data<int64_t>()[0], 3 * time);
      g->barrier();  // nobody leaves while another still reads its buffers
    });
  }
}

TEST(Inproc, CallsThatDisagreeNameTheRank) {
  run_world(3, [&](ProcessGroup& g) {
    Tensor t = Tensor::zeros(Shape({g.rank() == 1 ? 5 : 4}), DType::kInt64);
    if (g.rank() == 1) {
      EXPECT_ERROR(g.all_reduce(t), "AllReduce on group 'world'", "peer rank 0",
                   "rank 0 called AllReduce (sum of 4 Int64 elements) where this rank called "
                   "AllReduce (sum of 5 Int64 elements)",
                   "same order");
    } else {
      EXPECT_ERROR(g.all_reduce(t), "peer rank 1",
                   "rank 1 called AllReduce (sum of 5 Int64 elements) where this rank called "
                   "AllReduce (sum of 4 Int64 elements)");
    }
  });
  run_world(2, [&](ProcessGroup& g) {
    Tensor t = Tensor::zeros(Shape({4}), DType::kFloat32);
    if (g.rank() == 0) {
      EXPECT_ERROR(g.broadcast(t, 0),
                   "rank 1 called Barrier where this rank called Broadcast "
                   "(4 Float32 elements from root 0)");
    } else {
      EXPECT_ERROR(g.barrier(),
                   "rank 0 called Broadcast (4 Float32 elements from root 0) where "
                   "this rank called Barrier");
    }
  });
}

// The thread of rank 2 dies before a collective while its group lives on (as run_world keeps
// them): the others wait out the timeout and name it.
TEST(Inproc, ARankWhoseThreadDiesIsNamedAtTheTimeout) {
  auto store = make_memory_store();
  std::vector<std::shared_ptr<ProcessGroup>> keep(4);
  std::atomic<int> failures{0};
  EXPECT_ERROR(run_threads(4,
                           [&](int rank) {
                             keep[static_cast<size_t>(rank)] =
                                 create_process_group(options(store, rank, 4, milliseconds(300)));
                             ProcessGroup& g = *keep[static_cast<size_t>(rank)];
                             if (rank == 2) throw Error("rank 2 died");
                             const auto start = Clock::now();
                             Tensor t = Tensor::zeros(Shape({8}), DType::kFloat32);
                             EXPECT_ERROR(g.all_reduce(t), "AllReduce on group 'world' (inproc",
                                          "peer rank 2 = world rank 2",
                                          "rank(s) 2 did not arrive within the timeout of 300 ms",
                                          "now broken");
                             EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
                             ++failures;
                           }),
               "rank 2 died");
  EXPECT_EQ(failures.load(), 3);
}

// When its group goes with it (the group was local to the thread), the others fail at once.
TEST(Inproc, ARankWhoseGroupIsDestroyedIsNamedAtOnce) {
  auto store = make_memory_store();
  std::atomic<int> failures{0};
  std::latch created(3);  // rank 0 must not leave before the others have joined
  run_threads(3, [&](int rank) {
    auto g = create_process_group(options(store, rank, 3, std::chrono::seconds(30)));
    created.arrive_and_wait();
    if (rank == 0) return;  // leaves without the all-gather
    const auto start = Clock::now();
    Tensor out = Tensor::zeros(Shape({3}), DType::kInt32);
    EXPECT_ERROR(g->all_gather(out, Tensor::zeros(Shape({1}), DType::kInt32)),
                 "AllGather on group 'world'", "peer rank 0",
                 "rank(s) 0 left the group (its ProcessGroup was destroyed");
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    ++failures;
  });
  EXPECT_EQ(failures.load(), 2);
}

TEST(Inproc, ARankThatComesAfterTheOthersGaveUpFailsAtOnce) {
  run_world(
      3,
      [&](ProcessGroup& g) {
        Tensor t = Tensor::zeros(Shape({2}), DType::kInt64);
        if (g.rank() == 1) {
          std::this_thread::sleep_for(milliseconds(600));
          const auto start = Clock::now();
          EXPECT_ERROR(g.all_reduce(t), "this rank came too late", "rank(s) 1 did not arrive");
          EXPECT_LT(Clock::now() - start, milliseconds(100));
        } else {
          EXPECT_ERROR(g.all_reduce(t), "rank(s) 1 did not arrive within the timeout");
        }
        EXPECT_ERROR(g.barrier(), "broken by an earlier failure");
      },
      milliseconds(200));
}

TEST(Inproc, EqualTagsMatchInPostingOrderAndIsendNeedsNoThread) {
  run_world(2, [&](ProcessGroup& g) {
    if (g.rank() == 0) {
      auto a = g.isend(Tensor::full(Shape({3}), 1, DType::kInt32), 1, 7);
      auto b = g.isend(Tensor::full(Shape({3}), 2, DType::kInt32), 1, 7);
      g.send(Tensor::full(Shape({3}), 3, DType::kInt32), 1, 8);
      a->wait();
      b->wait();
    } else {
      Tensor third = Tensor::zeros(Shape({3}), DType::kInt32);
      g.recv(third, 0, 8);  // tag 8 does not wait behind the tag-7 messages
      Tensor first = Tensor::zeros(Shape({3}), DType::kInt32);
      Tensor second = Tensor::zeros(Shape({3}), DType::kInt32);
      auto r1 = g.irecv(first, 0, 7);
      auto r2 = g.irecv(second, 0, 7);
      r2->wait();
      r1->wait();
      EXPECT_EQ(first.data<int32_t>()[0], 1);
      EXPECT_EQ(second.data<int32_t>()[2], 2);
      EXPECT_EQ(third.data<int32_t>()[1], 3);
    }
  });
}

TEST(Inproc, ASendAndItsReceiveOfDifferentSizesAreNamed) {
  run_world(2, [&](ProcessGroup& g) {
    if (g.rank() == 0) {
      EXPECT_ERROR(g.send(Tensor::zeros(Shape({4}), DType::kFloat32), 1, 3), "Send", "peer rank 1",
                   "this send (tag 3) has 16 bytes but the matching receive on "
                   "rank 1 expects 8 bytes");
    } else {
      Tensor t = Tensor::zeros(Shape({2}), DType::kFloat32);
      EXPECT_ERROR(g.recv(t, 0, 3), "Recv", "peer rank 0",
                   "the matching send from rank 0 (tag 3) has 16 bytes but this receive expects "
                   "8 bytes");
    }
  });
}

TEST(Inproc, AReceiveFromARankThatLeftFailsAtOnce) {
  auto store = make_memory_store();
  run_threads(2, [&](int rank) {
    auto g = create_process_group(options(store, rank, 2, std::chrono::seconds(30)));
    if (rank == 1) return;
    const auto start = Clock::now();
    Tensor t = Tensor::zeros(Shape({2}), DType::kFloat64);
    EXPECT_ERROR(g->recv(t, 1, 0), "Recv", "peer rank 1",
                 "rank 1 left the group (its ProcessGroup was destroyed) without posting the "
                 "send that matches this receive (tag 0, 16 bytes)");
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  });
}

TEST(Inproc, AHubFromAnotherProcessOrOfAnotherSizeIsAnError) {
  auto store = make_memory_store();
  const std::string foreign = "1 42";  // process 1 is init, never this test
  store->set("world/inproc/hub/0", std::vector<uint8_t>(foreign.begin(), foreign.end()));
  EXPECT_ERROR(create_process_group(options(store, 1, 2, milliseconds(300))),
               "create_process_group('world', inproc)", "published its hub as '1 42'",
               "threads of one process; for processes use gloo or mpi");

  auto other = make_memory_store();
  run_threads(2, [&](int rank) {
    if (rank == 0) {
      EXPECT_ERROR(create_process_group(options(other, 0, 2, milliseconds(300))),
                   "rank(s) 1 did not join within the timeout of 300 ms");
    } else {
      EXPECT_ERROR(create_process_group(options(other, 1, 3, milliseconds(300))),
                   "rank 0 made the group with 2 ranks but rank 1 was given size 3");
    }
  });
}

}  // namespace
}  // namespace cleave::comm
