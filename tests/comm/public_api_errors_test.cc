// The public comm API given wrong arguments (issue #28, "public functions never abort on bad
// input"): every call below throws cleave::Error naming what was expected, before any rank
// communicates, and the group stays usable: a collective after the mistakes still gives the
// right result on every rank. A call that aborted would end this test binary.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"
#include "cleave/core/error.h"
#include "testing/ranks.h"

namespace cleave::comm {
namespace {

// Expects `call` to throw an Error whose message contains `words`.
void expect_error(const std::function<void()>& call, const std::string& words,
                  const std::string& what) {
  try {
    call();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos)
        << what << ": " << e.what() << "\n(expected it to mention '" << words << "')";
  }
}

Tensor floats(int64_t n) { return Tensor::zeros(Shape({n}), DType::kFloat32); }

TEST(CommPublicApi, WrongArgumentsAreErrorsAndTheGroupStaysUsable) {
  for (const char* backend : {"inproc", "gloo"}) {
    SCOPED_TRACE(backend);
    testing::run_world(
        2,
        [](ProcessGroup& g) {
          const Tensor t = floats(4);
          expect_error([&] { g.broadcast(t, 2); }, "root", "broadcast from root 2 of 2");
          expect_error([&] { g.broadcast(t, -1); }, "root", "broadcast from root -1");
          expect_error([&] { g.send(t, 2); }, "2", "send to rank 2 of 2");
          expect_error([&] { g.send(t, -1); }, "-1", "send to rank -1");
          expect_error([&] { g.recv(t, 5); }, "5", "recv from rank 5");
          expect_error([&] { g.send(t, g.rank()); }, "itself", "send to itself");
          expect_error([&] { g.all_gather(floats(3), t); }, "output", "all_gather output 3");
          expect_error([&] { g.reduce_scatter(floats(4), t); }, "output",
                       "reduce_scatter output 4");
          expect_error([&] { g.all_to_all(floats(3), floats(3)); }, "divis",
                       "all_to_all of 3 elements on 2 ranks");
          expect_error([&] { g.all_reduce(Tensor()); }, "input", "all_reduce of no tensor");
          expect_error([&] { g.world_rank(2); }, "out of range", "world_rank(2)");
          expect_error([&] { g.world_rank(-1); }, "out of range", "world_rank(-1)");
          EXPECT_EQ(g.group_rank(99), -1);
          expect_error([&] { g.exchange({{t, 7, 0}}, {}); }, "7", "exchange with rank 7");
          // Still usable: every mistake was caught before communicating.
          EXPECT_FALSE(g.broken());
          Tensor x = Tensor::full(Shape({3}), static_cast<double>(g.rank() + 1), DType::kFloat32);
          g.all_reduce(x);
          for (float v : x.to_vector<float>()) EXPECT_EQ(v, 3.0f);
        },
        std::chrono::seconds(20), backend);
  }
}

TEST(CommPublicApi, UnknownGroupsAreErrorsNamingTheGroups) {
  expect_error([] { get_group("no_such_group"); }, "no_such_group", "get_group");
  EXPECT_EQ(find_group("no_such_group"), nullptr);
  expect_error([] { register_group("", nullptr); }, "", "register_group of a null group");
}

}  // namespace
}  // namespace cleave::comm
