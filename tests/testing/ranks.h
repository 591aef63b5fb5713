// Ranks as threads: the one multi-rank harness of the unit tests (STYLE.md, "Tests"). Three
// levels, each built on the one before:
//   run_threads(size, fn(rank))         plain threads; the first exception is rethrown;
//   run_world(size, fn(group))          each thread a rank of a world over the in-memory store;
//   run_thread_job(size, fn(rank|group)) the same with each thread's world group installed
//                                        (ThreadGroupScope), as the runtime sees a job.
// Groups live until every rank has finished, as processes keep theirs until the job ends: a rank
// leaving early must not cut its peers' last messages.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"

namespace cleave::testing {

// Runs fn(rank) on `size` threads and rethrows the first exception (after all have finished).
inline void run_threads(int size, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Options of rank `rank` in a world of `size` over `store`, on `backend` ("gloo" over TCP
// loopback, or "inproc": collectives as memory copies, far faster for many small collectives).
inline comm::ProcessGroupOptions thread_world_options(
    const std::shared_ptr<comm::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout = std::chrono::seconds(20),
    const std::string& backend = "gloo") {
  comm::ProcessGroupOptions o;
  o.backend = backend;
  o.store = store;
  o.rank = rank;
  o.size = size;
  o.name = "world";
  o.timeout = timeout;
  return o;
}

// Makes a world of `size` thread ranks on `backend` and runs fn(group) on each; rethrows the
// first exception of a rank once all have finished.
inline void run_world(int size, const std::function<void(comm::ProcessGroup&)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20),
                      const std::string& backend = "gloo") {
  auto store = comm::make_memory_store();
  std::vector<std::shared_ptr<comm::ProcessGroup>> groups(static_cast<size_t>(size));
  run_threads(size, [&](int rank) {
    auto& group = groups[static_cast<size_t>(rank)];
    group = comm::create_process_group(thread_world_options(store, rank, size, timeout, backend));
    fn(*group);
  });
}

// The backend of run_thread_job when none is named: inproc, or gloo where inproc is not built.
inline std::string default_job_backend() {
  return comm::backend_available("inproc") ? "inproc" : "gloo";
}

// A job of `size` thread ranks as the runtime sees one: each thread's world group (registered
// under every world name: "world", "hccl_world_group", ...) installed with ThreadGroupScope, then
// fn(group). Rethrows the first exception of a rank once all have finished.
inline void run_thread_job(int size, const std::function<void(comm::ProcessGroup&)>& fn,
                           const std::string& backend = default_job_backend()) {
  run_world(
      size,
      [&](comm::ProcessGroup& group) {
        comm::ThreadGroupScope scope(comm::kWorldGroup,
                                     std::shared_ptr<comm::ProcessGroup>(&group, [](auto*) {}));
        fn(group);
      },
      std::chrono::seconds(20), backend);
}

// The same, running fn(rank).
inline void run_thread_job(int size, const std::function<void(int rank)>& fn,
                           const std::string& backend = default_job_backend()) {
  run_thread_job(
      size, [&](comm::ProcessGroup& group) { fn(group.rank()); }, backend);
}

}  // namespace cleave::testing
