// What this process knows of its job between cleave::init() and cleave::release(): how it joined
// (join.h), its backend, world group and groups. One instance per process, written by init.cc
// (init, release) and read by groups.cc (the rank and group queries), always under
// state_mutex().
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "cleave/comm/process_group.h"
#include "cluster/groups.h"
#include "cluster/join.h"

namespace cleave::cluster {

struct ClusterState {
  bool initialized = false;
  std::string backend;
  Membership membership;
  std::chrono::milliseconds comm_timeout{300'000};  // CLEAVE_COMM_TIMEOUT_MS
  GroupTable groups{0, 1};
  std::shared_ptr<comm::ProcessGroup> world;  // null standalone and without a store to meet at
};

// Guards process_state().
std::mutex& state_mutex();
// This process's state; the caller holds state_mutex().
ClusterState& process_state();
// process_state() once init() has run; throws "cleave::<what>: call cleave::init() first"
// before.
ClusterState& initialized_state(const char* what);

}  // namespace cleave::cluster
