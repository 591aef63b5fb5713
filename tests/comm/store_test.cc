#include "cleave/comm/store.h"

#include <gtest/gtest.h>

#include <thread>

#include "testing/gradcheck.h"

namespace cleave::comm {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(MemoryStore, SetThenGet) {
  auto store = make_memory_store();
  store->set("a", bytes("xyz"));
  EXPECT_EQ(store->get("a", milliseconds(10)), bytes("xyz"));
  store->set("a", bytes("w"));
  EXPECT_EQ(store->get("a", milliseconds(10)), bytes("w"));
}

TEST(MemoryStore, GetBlocksUntilAnotherThreadSets) {
  auto store = make_memory_store();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(20));
    store->set("late", bytes("v"));
  });
  EXPECT_EQ(store->get("late", milliseconds(5000)), bytes("v"));
  setter.join();
}

TEST(MemoryStore, GetTimesOutNamingTheKey) {
  auto store = make_memory_store();
  EXPECT_ERROR_KIND(store->get("never", milliseconds(20)), ErrorKind::kUnavailable,
                    "store key 'never' was not set within 20 ms");
}

TEST(MemoryStore, AddCountsAtomically) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) store->add("n", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->add("n", 0), 400);
  EXPECT_EQ(store->add("m", -3), -3);
}

TEST(MemoryStore, AddKeepsTheCounterAsDecimalText) {
  auto store = make_memory_store();
  store->add("n", 40);
  store->add("n", 2);
  EXPECT_EQ(store->get("n", milliseconds(10)), bytes("42"));
  store->set("m", bytes("-7"));
  EXPECT_EQ(store->add("m", 10), 3);
}

TEST(MemoryStore, AddToAKeyThatIsNotACounterIsAnError) {
  auto store = make_memory_store();
  store->set("k", bytes("abc"));
  EXPECT_ERROR_KIND(store->add("k", 1), ErrorKind::kInvalidArgument,
                    "store key 'k' holds 'abc', which is not an integer counter");
  EXPECT_EQ(store->get("k", milliseconds(10)), bytes("abc"));
}

TEST(MemoryStore, CheckDoesNotBlock) {
  auto store = make_memory_store();
  store->set("a", bytes("1"));
  EXPECT_TRUE(store->check({"a"}));
  EXPECT_FALSE(store->check({"a", "b"}));
  EXPECT_TRUE(store->check({}));
}

TEST(PrefixStore, NamespacesKeys) {
  auto base = make_memory_store();
  auto g1 = make_prefix_store("g1", base);
  auto g2 = make_prefix_store("g2", base);
  g1->set("k", bytes("one"));
  g2->set("k", bytes("two"));
  EXPECT_EQ(g1->get("k", milliseconds(10)), bytes("one"));
  EXPECT_EQ(g2->get("k", milliseconds(10)), bytes("two"));
  EXPECT_EQ(base->get("g1/k", milliseconds(10)), bytes("one"));
  EXPECT_TRUE(g1->check({"k"}));
  EXPECT_FALSE(g1->check({"other"}));
  EXPECT_EQ(g1->add("c", 2), 2);
  EXPECT_EQ(base->add("g1/c", 1), 3);
}

TEST(PrefixStore, NullBaseIsAnError) {
  EXPECT_ERROR(make_prefix_store("p", nullptr), "base store is null");
}

}  // namespace
}  // namespace cleave::comm
