// The scheduler's verdicts (src/cluster/liveness.h) on workers described by hand, at times given
// by hand: lost by heartbeat, stuck (NOTE [Stuck collectives]) and deadlocked (NOTE [Deadlocks]),
// with the messages the process tests (fault_test, stuck_test, user_errors_test) find in the
// workers' logs.
#include "cluster/liveness.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cleave::cluster {
namespace {

using std::chrono::milliseconds;

// The bounds of the process tests: heartbeat timeout 3 s, stuck timeout 2 s.
constexpr LivenessBounds kBounds{milliseconds(3000), milliseconds(2000)};
const Clock::time_point kStart{std::chrono::seconds(1000)};

Clock::time_point at(int64_t ms) { return kStart + milliseconds(ms); }

// Rank `rank` (host vm, pid 100 + rank), seen and progressing at kStart, doing nothing.
WorkerLiveness ranked(int rank) {
  WorkerLiveness w;
  w.host = "vm";
  w.pid = 100 + rank;
  w.rank = rank;
  w.activity = "running";
  w.last_seen = kStart;
  w.last_progress = kStart;
  return w;
}

// `w` reports at `seen_ms` that it has waited `waited_ms` in `op` for world ranks `peers`, and has
// made no progress since kStart.
void in_collective(WorkerLiveness& w, const std::string& op, std::vector<int> peers,
                   int64_t waited_ms, int64_t seen_ms) {
  w.last.comm_in_flight = 1;
  w.last.comm_op = op;
  w.last.comm_peers = std::move(peers);
  w.last.comm_waited = milliseconds(waited_ms);
  w.last_seen = at(seen_ms);
}

// `w` reports at `seen_ms` that it is `activity`, outside any collective, with no progress since
// kStart.
void idle(WorkerLiveness& w, const std::string& activity, int64_t seen_ms) {
  w.activity = activity;
  w.last_seen = at(seen_ms);
}

constexpr const char* kAllReduce = "AllReduce on group 'world' (gloo)";
constexpr const char* kSleeping = "sleeping on purpose (cluster_test_program stuck)";

// --- lost by heartbeat ---------------------------------------------------------------------------

TEST(Liveness, WorkerSilentLongerThanTheHeartbeatTimeoutIsLost) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2), ranked(3)};
  for (WorkerLiveness& w : workers) w.activity = "waiting for store key 'never_set'";
  for (WorkerLiveness& w : workers) w.last_seen = at(5000);
  workers[2].last_seen = at(1899);
  // Exactly the timeout is not yet lost.
  EXPECT_FALSE(find_lost(workers, kBounds, at(4899)));
  const std::optional<Verdict> verdict = find_lost(workers, kBounds, at(5000));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->kind, Verdict::Kind::kLost);
  EXPECT_EQ(verdict->lost_worker, 2);
  EXPECT_EQ(verdict->message,
            "rank 2 (host vm, pid 102) was lost: no heartbeat for 3101 ms "
            "(CLEAVE_HEARTBEAT_TIMEOUT_MS=3000); it was waiting for store key 'never_set'");
}

TEST(Liveness, LostWorkerNamesTheOthersSilentForOverHalfTheTimeout) {
  // Ranks 2 and 3 share a host that went away (rank 3 heartbeated 900 ms later); rank 1 is late
  // by less than half the timeout; rank 0 finished long ago.
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2), ranked(3)};
  for (WorkerLiveness& w : workers) w.activity = "in AllReduce on group 'world'";
  workers[0].finished = true;
  workers[0].last_seen = at(0);
  workers[1].last_seen = at(4000);
  workers[2].last_seen = at(1000);
  workers[3].last_seen = at(1900);
  const std::optional<Verdict> verdict = find_lost(workers, kBounds, at(4500));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->lost_worker, 2);
  EXPECT_EQ(verdict->message,
            "rank 2 (host vm, pid 102) was lost: no heartbeat for 3500 ms "
            "(CLEAVE_HEARTBEAT_TIMEOUT_MS=3000); it was in AllReduce on group 'world'; silent "
            "too: rank 3 (host vm, pid 103) for 2600 ms");
  EXPECT_EQ(verdict->silent_workers, std::vector<int>({3}));
}

TEST(Liveness, FinishedOrAlreadyLostWorkersAreNotLostAgain) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  workers[0].finished = true;
  workers[1].lost = true;
  workers[2].last_seen = at(5000);
  EXPECT_FALSE(find_lost(workers, kBounds, at(6000)));
  // The first silent worker by index is named.
  workers[0].finished = false;
  workers[1].lost = false;
  EXPECT_EQ(find_lost(workers, kBounds, at(6000))->lost_worker, 0);
}

TEST(Liveness, WorkerLostBeforeTheJobFormedIsNamedByHostAndPid) {
  WorkerLiveness w;
  w.host = "vm";
  w.pid = 7;
  w.last_seen = kStart;
  const std::optional<Verdict> verdict = judge({w}, /*formed=*/false, kBounds, at(3500));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->message,
            "a worker on host vm (pid 7, not yet ranked) was lost: no heartbeat for 3500 ms "
            "(CLEAVE_HEARTBEAT_TIMEOUT_MS=3000); it was registering");
}

// --- heartbeats and progress ---------------------------------------------------------------------

TEST(Liveness, HeartbeatProgressesOnCpuUseCompletedOperationsOrNewScopes) {
  WorkerLiveness w = ranked(0);
  Heartbeat beat;
  beat.activity = "in step 3";
  beat.cpu_us = 9'000;  // 4.5% of a core over 200 ms: waiting, not computing
  note_heartbeat(w, beat, at(200));
  EXPECT_EQ(w.last_seen, at(200));
  EXPECT_EQ(w.last_progress, kStart);
  EXPECT_EQ(w.activity, "in step 3");
  beat.cpu_us += 10'000;  // 5% of a core: computing
  note_heartbeat(w, beat, at(400));
  EXPECT_EQ(w.last_progress, at(400));
  note_heartbeat(w, beat, at(600));
  EXPECT_EQ(w.last_progress, at(400));
  beat.comm_completed = 1;
  note_heartbeat(w, beat, at(800));
  EXPECT_EQ(w.last_progress, at(800));
  beat.activity_changes = 1;
  note_heartbeat(w, beat, at(1000));
  EXPECT_EQ(w.last_progress, at(1000));
  // A heartbeat reports the communication wait as it is.
  beat.comm_in_flight = 1;
  beat.comm_op = kAllReduce;
  beat.comm_peers = {1, 2};
  beat.comm_waited = milliseconds(150);
  note_heartbeat(w, beat, at(1200));
  EXPECT_EQ(w.last_progress, at(1000));
  EXPECT_EQ(w.last.comm_op, kAllReduce);
  EXPECT_EQ(w.last.comm_peers, (std::vector<int>{1, 2}));
  EXPECT_EQ(w.last.comm_waited, milliseconds(150));
}

// --- stuck ranks ---------------------------------------------------------------------------------

TEST(Liveness, PeerThatNeverEntersTheCollectiveIsStuck) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  in_collective(workers[0], kAllReduce, {1, 2}, 2072, 2100);
  idle(workers[1], kSleeping, 2007);
  in_collective(workers[2], kAllReduce, {0, 1}, 2050, 2100);
  const std::optional<Verdict> verdict = find_stuck(workers, kBounds, at(2150));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->kind, Verdict::Kind::kStuck);
  EXPECT_EQ(verdict->message,
            "rank 1 (host vm, pid 101) is stuck: ranks 0, 2 have waited up to 2072 ms for it in "
            "AllReduce on group 'world' (gloo) (CLEAVE_STUCK_TIMEOUT_MS=2000), while it made no "
            "progress for 2007 ms (no communication, no CPU use) outside any collective; it was "
            "sleeping on purpose (cluster_test_program stuck)");
  // The same through judge, ahead of any lost worker.
  EXPECT_EQ(judge(workers, /*formed=*/true, kBounds, at(2150))->message, verdict->message);
}

TEST(Liveness, OneWaiterPastTheBoundIsNamedAlone) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  in_collective(workers[0], kAllReduce, {1, 2}, 2072, 2100);
  idle(workers[1], kSleeping, 2007);
  in_collective(workers[2], kAllReduce, {0, 1}, 1500, 2100);  // not yet past the bound
  const std::string message = find_stuck(workers, kBounds, at(2150))->message;
  EXPECT_NE(message.find("rank 1 (host vm, pid 101) is stuck: rank 0 has waited up to 2072 ms "),
            std::string::npos)
      << message;
}

TEST(Liveness, PeerThatNeverReachesTheBarrierIsStuck) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  for (int rank : {0, 2}) {
    workers[rank].barrier = BarrierWait{"after_compute", at(100), false, {1}};
    workers[rank].last_seen = at(2200);
  }
  idle(workers[1], kSleeping, 2200);
  const std::optional<Verdict> verdict = find_stuck(workers, kBounds, at(2300));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->message,
            "rank 1 (host vm, pid 101) is stuck: ranks 0, 2 have waited up to 2200 ms for it in "
            "barrier 'after_compute' (CLEAVE_STUCK_TIMEOUT_MS=2000), while it made no progress "
            "for 2200 ms (no communication, no CPU use) outside any collective; it was sleeping "
            "on purpose (cluster_test_program stuck)");
  // A barrier that has passed is no wait (its waiters are waking up).
  for (int rank : {0, 2}) workers[rank].barrier->passed = true;
  EXPECT_FALSE(find_stuck(workers, kBounds, at(2300)));
}

TEST(Liveness, PeerThatFinishedWhileOthersWaitIsStuck) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1)};
  workers[1].finished = true;
  workers[1].finished_at = at(500);
  // Rank 0 waits since 0 ms; its heartbeat at 2500 ms is not yet a bound after 500 ms.
  in_collective(workers[0], kAllReduce, {1}, 2500, 2500);
  EXPECT_FALSE(find_stuck(workers, kBounds, at(2600)));
  in_collective(workers[0], kAllReduce, {1}, 2600, 2600);
  const std::optional<Verdict> verdict = find_stuck(workers, kBounds, at(2700));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->message,
            "rank 0 (host vm, pid 100) is stuck: it has waited 2600 ms in AllReduce on group "
            "'world' (gloo) (CLEAVE_STUCK_TIMEOUT_MS=2000) for rank 1 (host vm, pid 101), which "
            "finished (called cleave::release or exited) 2100 ms earlier");
  // Only a wait begun before the peer finished counts.
  in_collective(workers[0], kAllReduce, {1}, 2100, 2700);
  EXPECT_FALSE(find_stuck(workers, kBounds, at(2800)));
}

TEST(Liveness, PeerThatComputesIsNeverStuck) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  // Rank 1 computes: a busy core at every heartbeat for 60 s, while the others wait.
  Heartbeat computing;
  computing.activity = "computing";
  for (int64_t ms = 200; ms <= 60'000; ms += 200) {
    computing.cpu_us += 200'000;
    note_heartbeat(workers[1], computing, at(ms));
  }
  in_collective(workers[0], kAllReduce, {1, 2}, 60'000, 60'000);
  in_collective(workers[2], kAllReduce, {0, 1}, 60'000, 60'000);
  EXPECT_FALSE(judge(workers, /*formed=*/true, kBounds, at(60'100)));
}

TEST(Liveness, PeerThatWaitsItselfIsNotBlamed) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  // Rank 0 waits for 1, which waits for 2, which computes: nobody is stuck.
  in_collective(workers[0], "Recv on group 'world' (gloo) with group rank 1, tag 7", {1}, 5000,
                5000);
  in_collective(workers[1], "Recv on group 'world' (gloo) with group rank 2, tag 7", {2}, 5000,
                5000);
  workers[2].last_progress = at(5000);
  workers[2].last_seen = at(5000);
  EXPECT_FALSE(judge(workers, /*formed=*/true, kBounds, at(5100)));
  // Nor is one blocked in a store get or at a barrier.
  workers[1].last = Heartbeat{};
  workers[1].get = StoreWait{"key", at(0)};
  EXPECT_FALSE(find_stuck(workers, kBounds, at(5100)));
  workers[1].get.reset();
  workers[1].barrier = BarrierWait{"b", at(4000), false, {0, 2}};
  EXPECT_FALSE(find_stuck(workers, kBounds, at(5100)));
}

TEST(Liveness, StuckTimeoutZeroTurnsStuckAndDeadlockDetectionOff) {
  const LivenessBounds off{milliseconds(3000), milliseconds(0)};
  std::vector<WorkerLiveness> stuck = {ranked(0), ranked(1)};
  in_collective(stuck[0], kAllReduce, {1}, 60'000, 60'000);
  idle(stuck[1], kSleeping, 60'000);
  EXPECT_TRUE(find_stuck(stuck, kBounds, at(60'100)));
  EXPECT_FALSE(find_stuck(stuck, off, at(60'100)));
  EXPECT_FALSE(judge(stuck, /*formed=*/true, off, at(60'100)));
  std::vector<WorkerLiveness> deadlocked = {ranked(0), ranked(1)};
  in_collective(deadlocked[0], kAllReduce, {1}, 60'000, 60'000);
  in_collective(deadlocked[1], "Broadcast on group 'world' (gloo)", {0}, 60'000, 60'000);
  EXPECT_TRUE(find_deadlock(deadlocked, kBounds, at(60'100)));
  EXPECT_FALSE(find_deadlock(deadlocked, off, at(60'100)));
  EXPECT_FALSE(judge(deadlocked, /*formed=*/true, off, at(60'100)));
  // Heartbeat timeouts still apply.
  EXPECT_EQ(judge(deadlocked, /*formed=*/true, off, at(63'100))->kind, Verdict::Kind::kLost);
}

TEST(Liveness, NoStuckOrDeadlockVerdictBeforeTheJobForms) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1)};
  in_collective(workers[0], kAllReduce, {1}, 2500, 2500);
  idle(workers[1], kSleeping, 2500);
  EXPECT_TRUE(judge(workers, /*formed=*/true, kBounds, at(2600)));
  EXPECT_FALSE(judge(workers, /*formed=*/false, kBounds, at(2600)));
}

// --- deadlocks -----------------------------------------------------------------------------------

TEST(Liveness, TwoRanksWaitingForEachOtherDeadlock) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1)};
  in_collective(workers[0], kAllReduce, {1}, 2085, 2100);
  in_collective(workers[1], "Broadcast on group 'world' (gloo)", {0}, 2183, 2200);
  EXPECT_FALSE(find_stuck(workers, kBounds, at(2300)));  // each waits: nobody is blamed
  const std::optional<Verdict> verdict = judge(workers, /*formed=*/true, kBounds, at(2300));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->kind, Verdict::Kind::kDeadlock);
  EXPECT_EQ(verdict->message,
            "deadlock: ranks 0, 1 have waited longer than CLEAVE_STUCK_TIMEOUT_MS=2000 ms, each "
            "for ranks that wait too, and none makes progress (mismatched collective order, or a "
            "receive whose send never comes); what each rank waits for:\n"
            "  rank 0 (host vm, pid 100): waiting 2085 ms in AllReduce on group 'world' (gloo) "
            "for world rank 1\n"
            "  rank 1 (host vm, pid 101): waiting 2183 ms in Broadcast on group 'world' (gloo) "
            "for world rank 0");
}

TEST(Liveness, ThreeRanksInMismatchedCollectivesDeadlock) {
  // docs/cluster.md's example: rank 0 calls AllReduce, ranks 1 and 2 Broadcast.
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  in_collective(workers[0], kAllReduce, {1, 2}, 2085, 2100);
  in_collective(workers[1], "Broadcast on group 'world' (gloo)", {0, 2}, 2183, 2200);
  in_collective(workers[2], "Broadcast on group 'world' (gloo)", {0, 1}, 2085, 2100);
  const std::optional<Verdict> verdict = find_deadlock(workers, kBounds, at(2300));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->message,
            "deadlock: ranks 0, 1, 2 have waited longer than CLEAVE_STUCK_TIMEOUT_MS=2000 ms, "
            "each for ranks that wait too, and none makes progress (mismatched collective order, "
            "or a receive whose send never comes); what each rank waits for:\n"
            "  rank 0 (host vm, pid 100): waiting 2085 ms in AllReduce on group 'world' (gloo) "
            "for world ranks 1, 2\n"
            "  rank 1 (host vm, pid 101): waiting 2183 ms in Broadcast on group 'world' (gloo) "
            "for world ranks 0, 2\n"
            "  rank 2 (host vm, pid 102): waiting 2085 ms in Broadcast on group 'world' (gloo) "
            "for world ranks 0, 1");
}

TEST(Liveness, ThreeRanksReceivingInACycleDeadlockNamingPeerAndTag) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  for (int rank = 0; rank < 3; ++rank) {
    const int from = (rank + 1) % 3;
    in_collective(
        workers[rank],
        "Recv on group 'world' (gloo) with group rank " + std::to_string(from) + ", tag 7", {from},
        2100, 2100);
  }
  const std::optional<Verdict> verdict = find_deadlock(workers, kBounds, at(2200));
  ASSERT_TRUE(verdict);
  for (const char* wait :
       {"\n  rank 0 (host vm, pid 100): waiting 2100 ms in Recv on group 'world' (gloo) with "
        "group rank 1, tag 7 for world rank 1",
        "\n  rank 1 (host vm, pid 101): waiting 2100 ms in Recv on group 'world' (gloo) with "
        "group rank 2, tag 7 for world rank 2",
        "\n  rank 2 (host vm, pid 102): waiting 2100 ms in Recv on group 'world' (gloo) with "
        "group rank 0, tag 7 for world rank 0"}) {
    EXPECT_NE(verdict->message.find(wait), std::string::npos) << verdict->message;
  }
}

TEST(Liveness, RanksWaitingForARankThatProgressesDoNotDeadlock) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  in_collective(workers[0], kAllReduce, {1, 2}, 2500, 2500);
  in_collective(workers[1], kAllReduce, {0, 2}, 2500, 2500);
  in_collective(workers[2], kAllReduce, {0, 1}, 2500, 2500);
  workers[2].last_progress = at(1000);  // finished an operation 1.5 s ago
  EXPECT_FALSE(find_deadlock(workers, kBounds, at(2600)));
  // A wait shorter than the bound is no deadlock either.
  workers[2].last_progress = kStart;
  workers[2].last.comm_waited = milliseconds(1900);
  EXPECT_FALSE(find_deadlock(workers, kBounds, at(2600)));
}

TEST(Liveness, BarrierWaitsDeadlockWithCollectiveWaits) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1)};
  workers[0].barrier = BarrierWait{"epoch", at(0), false, {1}};
  workers[0].last_seen = at(2500);
  in_collective(workers[1], kAllReduce, {0}, 2400, 2500);
  const std::optional<Verdict> verdict = find_deadlock(workers, kBounds, at(2600));
  ASSERT_TRUE(verdict);
  EXPECT_NE(verdict->message.find("\n  rank 0 (host vm, pid 100): waiting 2600 ms at barrier "
                                  "'epoch' for rank 1\n"),
            std::string::npos)
      << verdict->message;
}

TEST(Liveness, StoreGetsDeadlockOnlyWhenEveryLiveRankWaits) {
  std::vector<WorkerLiveness> workers = {ranked(0), ranked(1), ranked(2)};
  for (WorkerLiveness& w : workers) {
    w.get = StoreWait{"never_set", at(0)};
    w.last_seen = at(2500);
  }
  workers[2].finished = true;  // not live: the two others are every live rank
  const std::optional<Verdict> verdict = find_deadlock(workers, kBounds, at(2600));
  ASSERT_TRUE(verdict);
  EXPECT_NE(verdict->message.find("deadlock: ranks 0, 1 have waited"), std::string::npos);
  EXPECT_NE(verdict->message.find("\n  rank 1 (host vm, pid 101): waiting 2600 ms for store key "
                                  "'never_set' (any rank may set it)"),
            std::string::npos)
      << verdict->message;
  // A live rank outside the set may still set the key.
  workers[2].finished = false;
  workers[2].get.reset();
  workers[2].last_progress = at(2500);
  EXPECT_FALSE(find_deadlock(workers, kBounds, at(2600)));
}

}  // namespace
}  // namespace cleave::cluster
