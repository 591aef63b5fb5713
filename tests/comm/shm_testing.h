// Helpers of the shared-memory tests (shm_collectives_test.cc, shm_p2p_test.cc,
// shm_p2p_slow_test.cc): the segments left in /dev/shm, thread ranks pretending to be on several
// hosts, and point-to-point messages whose every byte is checked. (CLEAVE_COMM_SHM is set with
// testing::ScopedEnv, testing/env.h.)
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/process_group.h"
#include "comm/shm/shm_collectives.h"
#include "testing/ranks.h"

namespace cleave::comm::shm_testing {

// The shared-memory segments the processes `creators` left in /dev/shm (a segment's name ends
// with its creator's pid: "cleave-coll-...-<pid>"). Only theirs: other test processes that ctest
// runs at the same time may hold a segment of their own for a moment (CI once failed on one).
inline std::vector<std::string> leftover_segments(const std::vector<pid_t>& creators = {getpid()}) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("cleave-coll-", 0) != 0) continue;
    for (pid_t pid : creators) {
      const std::string suffix = fmt::format("-{}", pid);
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        names.push_back(name);
      }
    }
  }
  return names;
}

// Thread ranks whose host keys are "test-host-" + host_of[rank]: runs fn on each.
inline void run_on_hosts(const std::vector<std::string>& host_of,
                         const std::function<void(ProcessGroup&)>& fn) {
  const int size = static_cast<int>(host_of.size());
  auto store = make_memory_store();
  std::vector<std::shared_ptr<ProcessGroup>> groups(static_cast<size_t>(size));
  cleave::testing::run_threads(size, [&](int rank) {
    ShmCollectives::set_host_key_for_testing("test-host-" + host_of[rank]);
    groups[rank] = create_process_group(cleave::testing::thread_world_options(store, rank, size));
    ShmCollectives::set_host_key_for_testing("");
    fn(*groups[rank]);
  });
}

// ---- point-to-point messages ----

inline unsigned char pattern(int64_t i, int src, int dst, int salt) {
  return static_cast<unsigned char>(i * 131 + (i >> 12) + src * 17 + dst * 5 + salt * 29);
}

// A message of `bytes` bytes from `src` to `dst` (Float32 when a whole number of floats, else
// Bool); `salt` tells messages of one pair apart.
inline Tensor message(int64_t bytes, int src, int dst, int salt) {
  Tensor t = bytes % 4 == 0 ? Tensor::empty(Shape({bytes / 4}), DType::kFloat32)
                            : Tensor::empty(Shape({bytes}), DType::kBool);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  for (int64_t i = 0; i < bytes; ++i) p[i] = pattern(i, src, dst, salt);
  return t;
}

// Zeros laid out like message(bytes, ...): where one is received.
inline Tensor room(int64_t bytes) {
  return bytes % 4 == 0 ? Tensor::zeros(Shape({bytes / 4}), DType::kFloat32)
                        : Tensor::zeros(Shape({bytes}), DType::kBool);
}

inline void expect_message(const Tensor& got, int src, int dst, int salt, const std::string& what) {
  const auto* p = static_cast<const unsigned char*>(got.raw_data());
  for (int64_t i = 0; i < static_cast<int64_t>(got.nbytes()); ++i) {
    if (p[i] != pattern(i, src, dst, salt)) {
      FAIL() << what << ": byte " << i << " of " << got.nbytes() << " from rank " << src
             << " to rank " << dst << " (salt " << salt << ") is " << int{p[i]} << ", want "
             << int{pattern(i, src, dst, salt)};
    }
  }
}

// The ring largest messages go around: 1 MB (NOTE [Shared-memory point-to-point]).
inline constexpr int64_t kRingBytes = int64_t{1} << 20;

// A ring: every rank of `g` sends a message of `bytes` to the next and receives one from the
// previous, with send/recv on even ranks first and recv/send on odd ones (so that a blocking send
// must complete before its peer's matching receive is posted), then the same through exchange().
// With an odd world size one pair has two senders first: the ring holds at most kRingBytes, so
// a larger message goes through exchange() only.
inline void send_around_ring(ProcessGroup& g, int64_t bytes) {
  const int size = g.size(), r = g.rank(), next = (r + 1) % size, prev = (r + size - 1) % size;
  const std::string what = fmt::format("{} bytes over {} ranks", bytes, size);
  Tensor in = room(bytes);
  if (size % 2 == 1 && bytes > kRingBytes) {
    g.exchange({{message(bytes, r, next, 1), next}}, {{in, prev}}, 5);
    expect_message(in, prev, r, 1, what);
    return;
  }
  if (r % 2 == 0 || size % 2 == 1) {
    g.send(message(bytes, r, next, 1), next, 5);
    g.recv(in, prev, 5);
  } else {
    g.recv(in, prev, 5);
    g.send(message(bytes, r, next, 1), next, 5);
  }
  expect_message(in, prev, r, 1, what);
  Tensor in2 = room(bytes);
  g.exchange({{message(bytes, r, next, 2), next}}, {{in2, prev}}, 6);
  expect_message(in2, prev, r, 2, what + " (exchange)");
}

// Every rank of `g` sends a message of `bytes` to every other in one exchange().
inline void exchange_with_every_other(ProcessGroup& g, int64_t bytes) {
  const int r = g.rank();
  std::vector<PeerBuffer> sends, recvs;
  std::vector<Tensor> got(static_cast<size_t>(g.size()));
  for (int p = 0; p < g.size(); ++p) {
    if (p == r) continue;
    sends.push_back({message(bytes, r, p, 7), p});
    got[p] = room(bytes);
    recvs.push_back({got[p], p});
  }
  g.exchange(sends, recvs, 11);
  for (int p = 0; p < g.size(); ++p) {
    if (p != r) expect_message(got[p], p, r, 7, fmt::format("{} bytes all pairs", bytes));
  }
}

}  // namespace cleave::comm::shm_testing
