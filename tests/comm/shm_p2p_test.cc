// The gloo backend's shared-memory point-to-point (NOTE [Shared-memory point-to-point] in
// src/comm/shm/shm_p2p.h), ranks as threads: every byte of messages of 0, 1 and 31676 (7919
// floats) bytes over world sizes 2, 3, 4, 8 (64 MB, more than a ring: shm_p2p_slow_test.cc,
// labelled slow); tags received in another order than sent; equal tags in posting order; every
// rank sending a large message to every other at once; isend long before its irecv; send_async /
// recv_async; a sub-group; a group over several hosts (shared memory on a host, TCP across); a
// size mismatch; a receive that never matches; the switch back to TCP; nothing left in /dev/shm.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cleave/comm/process_group.h"
#include "cleave/core/error.h"
#include "comm/backends.h"
#include "comm/file_store.h"
#include "comm/shm_testing.h"
#include "testing/env.h"
#include "testing/ranks.h"

namespace cleave::comm {
namespace {

using shm_testing::exchange_with_every_other;
using shm_testing::expect_message;
using shm_testing::leftover_segments;
using shm_testing::message;
using shm_testing::room;
using shm_testing::run_on_hosts;
using shm_testing::send_around_ring;
using std::chrono::milliseconds;
using testing::ScopedEnv;

// 0 bytes, 1 byte and a prime number of floats (64 MB: shm_p2p_slow_test.cc).
const std::vector<int64_t> kBytes = {0, 1, 7919 * 4};

void run_world(int size, const std::function<void(ProcessGroup&)>& fn,
               milliseconds timeout = std::chrono::seconds(30)) {
  cleave::testing::run_world(size, fn, timeout, "gloo");
}

TEST(ShmP2P, GlooGroupsOnOneHostSendThroughSharedMemoryUnlessTurnedOff) {
  auto ping = [](ProcessGroup& g) {
    if (g.rank() == 0) g.send(message(4096, 0, 1, 0), 1, 3);
    if (g.rank() == 1) {
      Tensor t = room(4096);
      g.recv(t, 0, 3);
      expect_message(t, 0, 1, 0, "ping");
    }
  };
  run_world(3, [&](ProcessGroup& g) {
    EXPECT_EQ(p2p_transport(g), "shm");
    ping(g);
    EXPECT_EQ(shm_messages_sent(g), g.rank() == 0 ? 1u : 0u);
  });
  {
    ScopedEnv off("CLEAVE_COMM_SHM", "0");
    run_world(2, [&](ProcessGroup& g) {
      EXPECT_EQ(p2p_transport(g), "tcp");
      ping(g);
      EXPECT_EQ(shm_messages_sent(g), 0u);
    });
  }
  run_world(1, [](ProcessGroup& g) { EXPECT_EQ(p2p_transport(g), "tcp"); });
  EXPECT_TRUE(leftover_segments().empty());
}

// A ring (shm_testing::send_around_ring) of each size of kBytes over world sizes 2, 3, 4 and 8.
TEST(ShmP2P, EveryByteArrivesOverWorldSizesAndMessageSizes) {
  for (int size : {2, 3, 4, 8}) {
    run_world(size, [](ProcessGroup& g) {
      for (int64_t bytes : kBytes) send_around_ring(g, bytes);
      EXPECT_EQ(p2p_transport(g), "shm");
    });
  }
  EXPECT_TRUE(leftover_segments().empty());
}

TEST(ShmP2P, TagsMatchInAnyOrderAndEqualTagsInPostingOrder) {
  run_world(2, [](ProcessGroup& g) {
    const std::vector<int> tags = {1, 2, 3, 9, 9, 9};
    const std::vector<int64_t> sizes = {7919 * 4, 1, 3 << 20, 16, 16, 16};
    if (g.rank() == 0) {
      // One at a time, in this order; the receiver posts them in another.
      for (size_t k = 0; k < tags.size(); ++k) {
        auto w = g.isend(message(sizes[k], 0, 1, static_cast<int>(k)), 1, tags[k]);
        if (k == 2) w->wait();  // 3 MB: more than the ring, so its receive must be posted
      }
      g.barrier();
    } else {
      std::vector<Tensor> got;
      for (int64_t s : sizes) got.push_back(room(s));
      // Tag 3 first (the 3 MB message, behind two others in the ring), then 2, then 1, then
      // the three with tag 9 in order.
      g.recv(got[2], 0, 3);
      auto w2 = g.irecv(got[1], 0, 2);
      g.recv(got[0], 0, 1);
      w2->wait();
      std::vector<std::shared_ptr<Work>> nines;
      for (size_t k = 3; k < 6; ++k) nines.push_back(g.irecv(got[k], 0, 9));
      for (auto& w : nines) w->wait();
      for (size_t k = 0; k < tags.size(); ++k) {
        expect_message(got[k], 0, 1, static_cast<int>(k), fmt::format("message {}", k));
      }
      g.barrier();
    }
  });
  // Within one exchange: three sends of one tag match the three receives in posting order.
  run_world(3, [](ProcessGroup& g) {
    const int r = g.rank();
    std::vector<PeerBuffer> sends, recvs;
    std::vector<Tensor> got;
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      for (int k = 0; k < 3; ++k) {
        sends.push_back({message(100 + k, r, p, k), p, 4});
        got.push_back(room(100 + k));
        recvs.push_back({got.back(), p, 4});
      }
    }
    g.exchange(sends, recvs);
    size_t i = 0;
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      for (int k = 0; k < 3; ++k) expect_message(got[i++], p, r, k, "equal tags in order");
    }
  });
}

// Every rank sends 8 MB to every other in one exchange (64 MB both ways on 2 ranks:
// shm_p2p_slow_test.cc): the rings fill up on both sides, and waiting drains the incoming rings
// while the outgoing ones are full.
TEST(ShmP2P, EveryRankSendingLargeMessagesToEveryOtherAtOnceDoesNotDeadlock) {
  run_world(4, [](ProcessGroup& g) { exchange_with_every_other(g, int64_t{8} << 20); });
  // The same through two asynchronous exchanges per rank (two threads driving one group).
  run_world(3, [](ProcessGroup& g) {
    const int r = g.rank(), next = (r + 1) % 3, prev = (r + 2) % 3;
    Tensor a = room(int64_t{4} << 20), b = room(int64_t{4} << 20);
    auto w1 = g.exchange_async({{message(int64_t{4} << 20, r, next, 1), next}}, {{a, prev}}, 1);
    auto w2 = g.exchange_async({{message(int64_t{4} << 20, r, prev, 2), prev}}, {{b, next}}, 2);
    w1->wait();
    w2->wait();
    expect_message(a, prev, r, 1, "async 1");
    expect_message(b, next, r, 2, "async 2");
  });
}

TEST(ShmP2P, IsendPostedLongBeforeItsIrecvAndAsyncVariants) {
  run_world(2, [](ProcessGroup& g) {
    const int64_t sizes[] = {1, 4096, int64_t{8} << 20};
    if (g.rank() == 0) {
      std::vector<std::shared_ptr<Work>> works;
      for (int k = 0; k < 3; ++k) works.push_back(g.isend(message(sizes[k], 0, 1, k), 1, 20 + k));
      // The small ones are in the ring already: the receiver completes them before this waits.
      std::this_thread::sleep_for(milliseconds(300));
      for (auto& w : works) w->wait();
      g.send_async(message(5000, 0, 1, 9), 1, 30)->wait();
      Tensor back = room(5000);
      g.recv_async(back, 1, 31)->wait();
      expect_message(back, 1, 0, 9, "recv_async");
    } else {
      std::this_thread::sleep_for(milliseconds(100));
      for (int k = 0; k < 2; ++k) {
        Tensor t = room(sizes[k]);
        auto w = g.irecv(t, 0, 20 + k);
        const auto start = std::chrono::steady_clock::now();
        w->wait();
        // Completed long before the sender waits (it sleeps 300 ms after posting).
        EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(150));
        expect_message(t, 0, 1, k, "irecv");
      }
      Tensor big = room(sizes[2]);
      g.irecv(big, 0, 22)->wait();
      expect_message(big, 0, 1, 2, "irecv 8 MB");
      Tensor t = room(5000);
      auto w = g.recv_async(t, 0, 30);
      w->wait();
      expect_message(t, 0, 1, 9, "send_async");
      g.send_async(message(5000, 1, 0, 9), 0, 31)->wait();
    }
    EXPECT_EQ(shm_messages_sent(g), g.rank() == 0 ? 4u : 1u);
  });
}

// A pipeline stage posts a large isend, then enters a collective before waiting for it; its peer
// receives first and then enters the collective: the group's progress thread moves the message.
TEST(ShmP2P, AnIsendAwaitedAfterACollectiveStillArrives) {
  run_world(2, [](ProcessGroup& g) {
    const int64_t bytes = int64_t{8} << 20;
    if (g.rank() == 0) {
      auto w = g.isend(message(bytes, 0, 1, 4), 1, 3);
      g.barrier();
      w->wait();
    } else {
      Tensor t = room(bytes);
      g.recv(t, 0, 3);
      g.barrier();
      expect_message(t, 0, 1, 4, "isend across a barrier");
    }
  });
}

TEST(ShmP2P, SubGroupsTalkThroughTheirOwnSegment) {
  run_world(4, [](ProcessGroup& g) {
    if (g.rank() == 0) return;
    std::shared_ptr<ProcessGroup> sub = create_subgroup(g, {1, 2, 3}, "odd_three");
    EXPECT_EQ(p2p_transport(*sub), "shm");
    const int r = sub->rank(), next = (r + 1) % 3, prev = (r + 2) % 3;
    Tensor in = room(7919 * 4);
    sub->exchange({{message(7919 * 4, r, next, 3), next}}, {{in, prev}}, 2);
    expect_message(in, prev, r, 3, "sub-group");
    EXPECT_EQ(shm_messages_sent(*sub), 1u);
    EXPECT_EQ(shm_messages_sent(g), 0u);
    sub->barrier();
  });
  EXPECT_TRUE(leftover_segments().empty());
}

// Hosts A = {0, 2}, B = {1, 3}: messages between 0 and 2 (and 1 and 3) go through shared memory,
// the others over TCP, in one exchange.
TEST(ShmP2P, GroupsOverSeveralHostsUseSharedMemoryOnEachHost) {
  run_on_hosts({"A", "B", "A", "B"}, [](ProcessGroup& g) {
    EXPECT_EQ(p2p_transport(g), "shm+tcp");
    const int r = g.rank();
    std::vector<PeerBuffer> sends, recvs;
    std::vector<Tensor> got(4);
    for (int p = 0; p < 4; ++p) {
      if (p == r) continue;
      sends.push_back({message(int64_t{3} << 20, r, p, 5), p});
      got[p] = room(int64_t{3} << 20);
      recvs.push_back({got[p], p});
    }
    g.exchange(sends, recvs, 8);
    for (int p = 0; p < 4; ++p) {
      if (p != r) expect_message(got[p], p, r, 5, "over hosts");
    }
    EXPECT_EQ(shm_messages_sent(g), 1u);  // to the other rank of its host only
    g.barrier();
  });
  EXPECT_TRUE(leftover_segments().empty());
}

TEST(ShmP2P, AReceiveOfAnotherSizeFailsNamingTheTagTheSizesAndThePeer) {
  run_world(2, [](ProcessGroup& g) {
    if (g.rank() == 0) {
      g.send(message(40, 0, 1, 0), 1, 4);
      return;
    }
    Tensor t = room(48);
    try {
      g.recv(t, 0, 4);
      ADD_FAILURE() << "a receive of 48 bytes took a message of 40";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << what;
      EXPECT_NE(what.find("the message from rank 0 with tag 4 has 40 bytes but the receive "
                          "posted for it expects 48 bytes"),
                std::string::npos)
          << what;
    }
    EXPECT_TRUE(g.broken());
  });
}

TEST(ShmP2P, AReceiveThatNeverMatchesTimesOutNamingThePeerAndTag) {
  const auto start = std::chrono::steady_clock::now();
  run_world(
      2,
      [](ProcessGroup& g) {
        if (g.rank() == 0) {
          std::this_thread::sleep_for(milliseconds(800));  // alive, never sends
          return;
        }
        Tensor t = room(64);
        try {
          g.recv(t, 0, 12);
          ADD_FAILURE() << "a receive without a send returned";
        } catch (const Error& e) {
          const std::string what = e.what();
          EXPECT_EQ(e.kind(), ErrorKind::kUnavailable) << what;
          EXPECT_NE(what.find("peer rank 0"), std::string::npos) << what;
          EXPECT_NE(what.find("the message with tag 12 (64 bytes) that this rank waits to "
                              "receive from rank 0 did not complete within the timeout of 400 ms"),
                    std::string::npos)
              << what;
        }
      },
      milliseconds(400));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Ranks as processes: rank 1 posts its sends and is killed (SIGKILL) while rank 0 waits in a
// receive from it; rank 0 fails within a fraction of a second naming rank 1 and its pid (NOTE
// [Shared-memory point-to-point]: the waiter checks its peer's pid), and nothing is left in
// /dev/shm.
TEST(ShmP2P, APeerKilledWhileThisRankReceivesFromItIsNamedAtOnce) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("cleave-p2p-store-{}", getpid()))
          .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string report = dir + "/report";
  auto rank_process = [&](int rank) {
    auto store = std::make_shared<FileStore>(dir);
    ProcessGroupOptions o = cleave::testing::thread_world_options(store, rank, 2);
    o.timeout = std::chrono::seconds(20);
    std::shared_ptr<ProcessGroup> g = create_process_group(o);
    if (p2p_transport(*g) != "shm") _exit(3);
    Tensor t = room(int64_t{16} << 20);
    if (rank == 1) {
      // The first megabytes go out as it is posted; it dies before the rest.
      auto w = g->isend(message(int64_t{16} << 20, 1, 0, 0), 0, 9);
      raise(SIGKILL);
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      g->recv(t, 1, 9);
    } catch (const Error& e) {
      const auto ms =
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start)
              .count();
      std::ofstream(report) << ms << " ms: " << e.what();
      _exit(0);
    }
    _exit(4);
  };
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t child = fork();
    if (child == 0) rank_process(rank);
    ASSERT_GT(child, 0);
    children.push_back(child);
  }
  int status = 0;
  waitpid(children[1], &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  waitpid(children[0], &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::ifstream in(report);
  const std::string what((std::istreambuf_iterator<char>(in)), {});
  const std::string named = fmt::format(
      "shared memory: rank 1 (pid {}) has exited while this rank waits to receive the message "
      "with tag 9 (16777216 bytes",
      children[1]);
  EXPECT_NE(what.find(named), std::string::npos) << what;
  EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
  EXPECT_LT(std::stoll(what), 1000) << what;  // ~10 ms after the kill
  EXPECT_TRUE(leftover_segments().empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cleave::comm
