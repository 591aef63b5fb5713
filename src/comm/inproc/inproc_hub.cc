// The hub of an inproc group and the process-wide table of hubs (NOTE [Inproc hub] in
// comm/inproc/inproc_hub.h).
#include "comm/inproc/inproc_hub.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "cleave/core/error.h"

namespace cleave::comm {
namespace {

// Never destroyed, so that a hub may go during static destruction.
struct HubTable {
  std::mutex mutex;
  std::unordered_map<uint64_t, std::weak_ptr<InprocHub>> hubs;
  uint64_t next_id = 1;
};

HubTable& hub_table() {
  static auto* table = new HubTable;
  return *table;
}

std::chrono::milliseconds time_left(WaitClock::time_point deadline) {
  return std::max(
      std::chrono::milliseconds(1),
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - WaitClock::now()));
}

}  // namespace

InprocHub::InprocHub(int size)
    : rendezvous_(size),
      p2p_(rendezvous_),
      rounds_(std::make_unique<InprocRoundState[]>(static_cast<size_t>(size))) {}

InprocHub::~InprocHub() {
  HubTable& table = hub_table();
  std::lock_guard<std::mutex> lock(table.mutex);
  table.hubs.erase(id_);
}

void InprocHub::depart(int rank) {
  rendezvous_.depart(rank);
  p2p_.wake_waiters_for(rank);
}

std::shared_ptr<InprocHub> find_inproc_hub(const ProcessGroupOptions& options,
                                           WaitClock::time_point deadline) {
  const std::shared_ptr<Store> store = make_prefix_store(options.name, options.store);
  const int64_t generation = (store->add("inproc/joined", 1) - 1) / options.size;
  const std::string key = fmt::format("inproc/hub/{}", generation);
  HubTable& table = hub_table();
  if (options.rank == 0) {
    auto hub = std::make_shared<InprocHub>(options.size);
    {
      std::lock_guard<std::mutex> lock(table.mutex);
      hub->id_ = table.next_id++;
      table.hubs[hub->id()] = hub;
    }
    const std::string text = fmt::format("{} {}", getpid(), hub->id());
    store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
    return hub;
  }
  std::vector<uint8_t> value;
  try {
    value = store->get(key, time_left(deadline));
  } catch (const std::exception&) {
    CLEAVE_UNAVAILABLE(
        "create_process_group('{}', inproc): rank {} of {}: rank(s) 0 did not join within the "
        "timeout of {} ms (rank 0 makes the group's hub and publishes it in the store under "
        "'{}/{}'); check that every rank of the group was started and creates the group",
        options.name, options.rank, options.size, options.timeout.count(), options.name, key);
  }
  std::istringstream text(std::string(value.begin(), value.end()));
  long pid = 0;
  uint64_t id = 0;
  text >> pid >> id;
  CLEAVE_CHECK_ARG(!text.fail() && pid == getpid(),
                   "create_process_group('{}', inproc): rank 0 published its hub as '{}' in the "
                   "store; expected '<pid> <id>' from this process ({}). The inproc backend "
                   "connects ranks that are threads of one process; for processes use gloo or mpi",
                   options.name, text.str(), getpid());
  std::shared_ptr<InprocHub> hub;
  {
    std::lock_guard<std::mutex> lock(table.mutex);
    const auto it = table.hubs.find(id);
    if (it != table.hubs.end()) hub = it->second.lock();
  }
  CLEAVE_CHECK_ARG(hub != nullptr,
                   "create_process_group('{}', inproc): rank {}: the hub rank 0 published (id {}) "
                   "is gone: rank 0 gave up or destroyed the group before this rank joined",
                   options.name, options.rank, id);
  CLEAVE_CHECK_ARG(hub->size() == options.size,
                   "create_process_group('{}', inproc): rank 0 made the group with {} ranks but "
                   "rank {} was given size {}; every rank must pass the same size",
                   options.name, hub->size(), options.rank, options.size);
  return hub;
}

}  // namespace cleave::comm
