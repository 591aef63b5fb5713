// Helpers of the shared-memory tests (shm_collectives_test.cc, shm_p2p_test.cc): the segments
// left in /dev/shm, and thread ranks pretending to be on several hosts. (CLEAVE_COMM_SHM is set
// with testing::ScopedEnv, testing/env.h.)
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/process_group.h"
#include "comm/shm/shm_collectives.h"
#include "testing/ranks.h"

namespace cleave::comm::shm_testing {

inline std::vector<std::string> leftover_segments() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("cleave-coll-", 0) == 0) names.push_back(name);
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

}  // namespace cleave::comm::shm_testing
