// Ranks as threads over the in-memory store: the multi-rank harness of the comm tests.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
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
  // Groups are destroyed only after every rank has finished, as processes would keep theirs
  // until the job ends: a rank leaving early must not cut its peers' last messages.
  std::vector<std::shared_ptr<comm::ProcessGroup>> groups(static_cast<size_t>(size));
  run_threads(size, [&](int rank) {
    auto& group = groups[static_cast<size_t>(rank)];
    group = comm::create_process_group(thread_world_options(store, rank, size, timeout, backend));
    fn(*group);
  });
}

// A job of `size` thread ranks as the runtime sees one: each thread's "world" group installed
// (ThreadGroupScope) on the inproc backend (gloo where it is not built), then fn(rank).
inline void run_thread_job(int size, const std::function<void(int rank)>& fn) {
  auto store = comm::make_memory_store();
  std::vector<std::shared_ptr<comm::ProcessGroup>> groups(static_cast<size_t>(size));
  run_threads(size, [&](int rank) {
    comm::ProcessGroupOptions o = thread_world_options(store, rank, size);
    if (comm::backend_available("inproc")) o.backend = "inproc";
    groups[static_cast<size_t>(rank)] = comm::create_process_group(o);
    comm::ThreadGroupScope scope("world", groups[static_cast<size_t>(rank)]);
    fn(rank);
  });
}

}  // namespace cleave::testing
