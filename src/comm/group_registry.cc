#include "cleave/comm/group_registry.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "cleave/core/error.h"

namespace cleave::comm {
namespace {

using GroupMap = std::map<std::string, std::shared_ptr<ProcessGroup>>;

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
GroupMap& process_groups() {
  static GroupMap* groups = new GroupMap();  // never destroyed: groups may outlive statics
  return *groups;
}
GroupMap& thread_groups() {
  thread_local GroupMap groups;
  return groups;
}

std::vector<std::string> names_for(const std::string& name) {
  if (is_world_group_name(name)) return {kWorldGroup, kHcclWorldGroup, kNcclWorldGroup};
  return {name};
}

}  // namespace

bool is_world_group_name(const std::string& name) {
  return name == kWorldGroup || name == kHcclWorldGroup || name == kNcclWorldGroup;
}

void register_group(const std::string& name, std::shared_ptr<ProcessGroup> group) {
  CLEAVE_CHECK_ARG(group != nullptr, "register_group('{}'): the group is null", name);
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const std::string& n : names_for(name)) process_groups()[n] = group;
}

void unregister_group(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const std::string& n : names_for(name)) process_groups().erase(n);
}

void clear_groups() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  process_groups().clear();
}

std::shared_ptr<ProcessGroup> find_group(const std::string& name) {
  auto t = thread_groups().find(name);
  if (t != thread_groups().end()) return t->second;
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto p = process_groups().find(name);
  return p == process_groups().end() ? nullptr : p->second;
}

std::vector<std::string> group_names() {
  std::vector<std::string> names;
  for (const auto& [n, g] : thread_groups()) names.push_back(n);
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    for (const auto& [n, g] : process_groups()) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::shared_ptr<ProcessGroup> get_group(const std::string& name) {
  auto group = find_group(name);
  if (group || is_world_group_name(name)) return group;
  CLEAVE_FAIL(
      "communication group '{}' is not registered; registered groups: [{}] (create it with "
      "create_group on every member rank first; the world group is \"hccl_world_group\", "
      "\"nccl_world_group\" or \"world\")",
      name, fmt::join(group_names(), ", "));
}

int world_size() {
  auto world = find_group(kWorldGroup);
  return world ? world->size() : 1;
}

int world_rank() {
  auto world = find_group(kWorldGroup);
  return world ? world->rank() : 0;
}

ThreadGroupScope::ThreadGroupScope(const std::string& name, std::shared_ptr<ProcessGroup> group)
    : names_(names_for(name)) {
  CLEAVE_CHECK_ARG(group != nullptr, "ThreadGroupScope('{}'): the group is null", name);
  for (const std::string& n : names_) thread_groups()[n] = group;
}

ThreadGroupScope::~ThreadGroupScope() {
  for (const std::string& n : names_) thread_groups().erase(n);
}

}  // namespace cleave::comm
