// The process-wide group registry: name -> ProcessGroup, filled by cleave::init() (cluster layer)
// and by create_group; read by the collective primitives (runtime), whose "group" attribute
// names a registered group.
//
// The world group is registered under "world" and MindSpore's names "hccl_world_group" and
// "nccl_world_group". With no world group registered (standalone), world_size() is 1 and the
// collective primitives are identities.
//
// Tests that run ranks as threads give each thread its own groups with ThreadGroupScope, which
// shadows the process-wide entries on that thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/process_group.h"

namespace cleave::comm {

// MindSpore's world group names, and cleave's.
inline constexpr const char* kWorldGroup = "world";
inline constexpr const char* kHcclWorldGroup = "hccl_world_group";
inline constexpr const char* kNcclWorldGroup = "nccl_world_group";

// Whether `name` is one of the world group's names.
bool is_world_group_name(const std::string& name);

// Registers `group` under `name` (process-wide), replacing an earlier entry. A world name
// registers the group under every world name.
void register_group(const std::string& name, std::shared_ptr<ProcessGroup> group);
// Removes `name` (a world name removes the world group). Unknown names are ignored.
void unregister_group(const std::string& name);
// Removes every process-wide entry (cleave::release()).
void clear_groups();

// The group registered under `name` (thread scope first, then process-wide), or nullptr.
std::shared_ptr<ProcessGroup> find_group(const std::string& name);
// As find_group, but throws cleave::Error naming `name` and the registered names when absent.
// A world name with no world group registered returns nullptr (standalone: world size 1).
std::shared_ptr<ProcessGroup> get_group(const std::string& name);
// The registered names, sorted.
std::vector<std::string> group_names();

// The world group's size and this process's rank in it: 1 and 0 when standalone.
int world_size();
int world_rank();

// Registers groups for the current thread only, for its lifetime (ranks as threads). A world
// name registers every world name.
class ThreadGroupScope {
 public:
  ThreadGroupScope(const std::string& name, std::shared_ptr<ProcessGroup> group);
  ~ThreadGroupScope();
  ThreadGroupScope(const ThreadGroupScope&) = delete;
  ThreadGroupScope& operator=(const ThreadGroupScope&) = delete;

 private:
  std::vector<std::string> names_;
};

}  // namespace cleave::comm
