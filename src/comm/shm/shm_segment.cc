// The shared-memory segment of a group's members on this host (comm/shm/shm_segment.h).
#include "comm/shm/shm_segment.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string_view>

#include "cleave/core/env.h"
#include "cleave/core/error.h"
#include "comm/shm/shm_host.h"

namespace cleave::comm {
namespace {

constexpr size_t kHeaderBytes = 320;
constexpr size_t kPage = 4096;
// NOTE [Rounds of shared-memory collectives]
constexpr size_t kRoundBytes = size_t{512} << 10;
constexpr std::string_view kPrefix = "cleave-coll-";

size_t page_up(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// header | member words | (page) slots: 2 buffers per member | (page) the extra region
size_t slots_offset(int size) {
  return page_up(kHeaderBytes + sizeof(ShmMemberWord) * static_cast<size_t>(size));
}
size_t extra_offset(int size) {
  return slots_offset(size) + static_cast<size_t>(size) * 2 * ShmSegment::kSlotBytes;
}

// The cores of this host (not of this process's affinity mask: the workers of a job may be bound
// to one core each, and then each has a core of its own).
int online_cores() {
  return static_cast<int>(std::clamp(sysconf(_SC_NPROCESSORS_ONLN), 1L, 4096L));
}

// Bytes per member and round (NOTE [Rounds of shared-memory collectives]);
// CLEAVE_COMM_SHM_ROUND_KB overrides it (for measurements).
size_t round_bytes_for(bool oversubscribed) {
  size_t bytes = oversubscribed ? ShmSegment::kSlotBytes : kRoundBytes;
  if (env::is_set("CLEAVE_COMM_SHM_ROUND_KB")) {
    bytes = static_cast<size_t>(env::integer("CLEAVE_COMM_SHM_ROUND_KB", 4,
                                             static_cast<int64_t>(ShmSegment::kSlotBytes >> 10)))
            << 10;
  }
  return bytes / 64 * 64;
}

std::string to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> to_bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// NOTE [No shared memory left behind]: the names whose creator is gone. (Where /dev/shm is shared
// across pid namespaces, a live creator elsewhere may look gone: unlinking its name leaves its
// ranks' mappings intact, and a rank that had not opened it yet makes that group fall back to
// TCP, as any failure to map does.)
void remove_orphaned_segments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name.substr(0, kPrefix.size()) != kPrefix) continue;
    const size_t dash = name.rfind('-');
    const int32_t pid = static_cast<int32_t>(std::atol(std::string(name.substr(dash + 1)).c_str()));
    if (shm::process_gone(pid)) shm_unlink(("/" + std::string(name)).c_str());
  }
  closedir(dir);
}

}  // namespace

std::unique_ptr<ShmSegment> ShmSegment::create(const ProcessGroupOptions& options, Store& store,
                                               const std::vector<int>& members,
                                               size_t extra_bytes) {
  static_assert(sizeof(ShmHeader) <= kHeaderBytes);
  const int size = static_cast<int>(members.size());
  const int member =
      static_cast<int>(std::find(members.begin(), members.end(), options.rank) - members.begin());
  CLEAVE_ASSERT(member < size, "ShmSegment::create: this rank is not a member");
  if (size <= 1 || size > kMaxRanks) return nullptr;
  const auto timeout = options.timeout;
  // Keys of this host's members (named by their first member: one namespace per host).
  auto key = [&](const char* what, int m) {
    return fmt::format("shm/{}/{}/{}", members[0], what, m);
  };
  auto segment = std::unique_ptr<ShmSegment>(new ShmSegment());
  segment->members_ = members;
  segment->member_ = member;
  segment->timeout_ = timeout;
  const size_t bytes = extra_offset(size) + page_up(extra_bytes);

  std::string name;
  if (member == 0) {
    remove_orphaned_segments();
    std::random_device random;
    name = fmt::format("/{}{:08x}{:08x}-{}", kPrefix, random(), random(), getpid());
    segment->mapping_ = shm::Mapping::create(name, bytes);
    if (segment->mapping_ != nullptr) {
      ShmHeader& header = segment->header();
      header.oversubscribed = size > online_cores() ? 1 : 0;
      header.round_bytes = round_bytes_for(header.oversubscribed != 0);
    } else {
      name.clear();
    }
    store.set(key("segment", 0), to_bytes(name));
  } else {
    name = to_string(store.get(key("segment", 0), timeout));
  }
  // From here on member 0 unlinks the segment whatever happens.
  struct Unlink {
    const std::string& name;
    bool owner;
    ~Unlink() {
      if (owner && !name.empty()) shm_unlink(name.c_str());
    }
  } unlink_at_exit{name, member == 0};
  if (name.empty()) return nullptr;
  if (member != 0) segment->mapping_ = shm::Mapping::open(name, bytes);
  const bool mapped = segment->mapping_ != nullptr;
  if (mapped) {
    segment->word(member).pid = static_cast<int32_t>(getpid());
    segment->slots_ = segment->mapping_->data() + slots_offset(size);
    if (extra_bytes > 0) segment->extra_ = segment->mapping_->data() + extra_offset(size);
  }
  store.set(key("mapped", member), to_bytes(mapped ? "1" : "0"));
  bool all_mapped = mapped;
  for (int m = 0; m < size; ++m) {
    if (m != member && to_string(store.get(key("mapped", m), timeout)) != "1") all_mapped = false;
  }
  if (!all_mapped) return nullptr;  // the mapping goes with the segment
  return segment;
}

ShmMemberWord& ShmSegment::word(int member) const {
  return reinterpret_cast<ShmMemberWord*>(mapping_->data() + kHeaderBytes)[member];
}

std::byte* ShmSegment::slot(int member, int buffer) const {
  return slots_ + (static_cast<size_t>(member) * 2 + static_cast<size_t>(buffer)) * kSlotBytes;
}

void ShmSegment::abandon(int culprit) {
  ShmHeader& h = header();
  int32_t none = 0;
  if (h.culprit.compare_exchange_strong(none, culprit + 1)) h.reporter.store(members_[member_]);
  h.generation.wake();
}

void ShmSegment::fail(int culprit, const std::string& why) {
  abandon(culprit);
  throw BackendFailure(why, culprit);
}

void ShmSegment::throw_if_abandoned() const {
  const int32_t culprit = header().culprit.load(std::memory_order_acquire);
  if (culprit == 0) return;
  const int reporter = header().reporter.load();
  // A member that blames itself failed outside this segment (a leader's TCP step).
  throw BackendFailure(
      reporter == culprit - 1
          ? fmt::format("shared memory: rank {} gave up on the operation (its error names the "
                        "cause)",
                        reporter)
          : fmt::format("shared memory: rank {} gave up on the operation, blaming rank {} "
                        "(its error names the cause)",
                        reporter, culprit - 1),
      culprit - 1);
}

}  // namespace cleave::comm
