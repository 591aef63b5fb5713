// The one wait policy of comm (comm/wait.h, NOTE [Waiting]): wake-ups, the polling phase, the
// checks between slices and the deadline, across threads and across processes.
#include "comm/wait.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <thread>

namespace cleave::comm {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kNever = [] { return false; };
constexpr auto kNoCheck = [] {};

TEST(Wait, ASleeperIsWokenByTheChangeNotByItsSlice) {
  WaitWord word;
  std::thread changer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    word.value.store(1, std::memory_order_release);
    word.wake();
  });
  const auto start = WaitClock::now();
  // No polling: the wait sleeps at once, in slices far longer than the test may take.
  EXPECT_TRUE(wait_until(
      word, start + seconds(60), {microseconds(0), seconds(30)},
      [&] { return word.value.load() == 1; }, kNoCheck));
  EXPECT_LT(WaitClock::now() - start, seconds(10));
  changer.join();
}

TEST(Wait, ThePollingPhaseSeesAConditionThatNobodyWakesFor) {
  WaitWord word;
  std::atomic<bool> flag{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(5));
    flag.store(true);  // neither changes the word nor wakes
  });
  const auto start = WaitClock::now();
  EXPECT_TRUE(wait_until(
      word, start + seconds(60), {seconds(20), seconds(30)}, [&] { return flag.load(); },
      kNoCheck));
  EXPECT_LT(WaitClock::now() - start, seconds(10));
  setter.join();
}

TEST(Wait, ReturnsFalseOnceTheDeadlinePasses) {
  WaitWord word;
  for (const auto poll : {microseconds(0), microseconds(1000), microseconds(500'000)}) {
    const auto start = WaitClock::now();
    EXPECT_FALSE(
        wait_until(word, start + milliseconds(100), {poll, milliseconds(10)}, kNever, kNoCheck));
    const auto waited = WaitClock::now() - start;
    EXPECT_GE(waited, milliseconds(100)) << "poll " << poll.count() << " us";
    EXPECT_LT(waited, seconds(10)) << "poll " << poll.count() << " us";
  }
  // A deadline already passed: false at once, neither polling nor sleeping.
  const auto start = WaitClock::now();
  EXPECT_FALSE(wait_until(word, start - seconds(1), {seconds(20), seconds(30)}, kNever, kNoCheck));
  EXPECT_LT(WaitClock::now() - start, seconds(10));
}

TEST(Wait, CheckRunsBetweenSlicesAndItsExceptionEndsTheWait) {
  WaitWord word;
  int checks = 0;
  EXPECT_THROW(
      wait_until(word, WaitClock::now() + seconds(60), {microseconds(0), milliseconds(1)}, kNever,
                 [&] {
                   if (++checks == 3) throw std::runtime_error("peer gone");
                 }),
      std::runtime_error);
  EXPECT_EQ(checks, 3);
}

TEST(Wait, SleepReturnsAtOnceWhenTheWordHasChanged) {
  WaitWord word;
  word.value.store(7);
  const auto start = WaitClock::now();
  word.sleep(6, seconds(30));
  EXPECT_LT(WaitClock::now() - start, seconds(10));
  EXPECT_EQ(word.sleepers.load(), 0u);
}

TEST(Wait, AWordInSharedMemoryWakesAnotherProcess) {
  void* memory =
      mmap(nullptr, sizeof(WaitWord), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  auto* word = new (memory) WaitWord;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    usleep(20'000);
    word->value.store(1, std::memory_order_release);
    word->wake();
    _exit(0);
  }
  const auto start = WaitClock::now();
  EXPECT_TRUE(wait_until(
      *word, start + seconds(60), {microseconds(0), seconds(30)},
      [&] { return word->value.load() == 1; }, kNoCheck));
  EXPECT_LT(WaitClock::now() - start, seconds(10));
  int status = 0;
  waitpid(child, &status, 0);
  munmap(memory, sizeof(WaitWord));
}

TEST(Wait, ThePollingPhaseStaysOffACommunicationThread) {
  EXPECT_EQ(poll_phase(microseconds(1000)), microseconds(1000));
}

}  // namespace
}  // namespace cleave::comm
