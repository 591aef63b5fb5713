// What the shared-memory transports know of this host: which processes share it with this one,
// and whether a peer's process still lives. Internal to comm.
#pragma once

#include <cstdint>
#include <string>

namespace cleave::comm::shm {

// What two processes must share to use one segment: the host (name and boot), the IPC namespace
// (/dev/shm) and the pid namespace (process_gone reads the peers' pids). Equal strings, same host.
std::string host_key();

// Whether process `pid` of this pid namespace has exited (gone, or a zombie not yet reaped).
bool process_gone(int32_t pid);

}  // namespace cleave::comm::shm
