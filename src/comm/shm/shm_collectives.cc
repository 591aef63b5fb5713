// Shared-memory collectives (NOTE [Shared-memory collectives] in comm/shm/shm_collectives.h).
#include "comm/shm/shm_collectives.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string_view>

#include "cleave/core/dtype.h"
#include "cleave/core/env.h"
#include "cleave/core/error.h"
#include "comm/call_check.h"
#include "comm/rank_order_reduce.h"
#include "comm/shm/shm_host.h"
#include "comm/wait.h"

namespace cleave::comm {

using Clock = std::chrono::steady_clock;

struct ShmCollectives::Header {
  alignas(64) std::atomic<uint64_t> arrivals;  // barrier arrivals of all ranks, ever
  alignas(64) WaitWord generation;             // barriers completed (mod 2^32)
  alignas(64) std::atomic<int32_t> culprit;    // 0, or 1 + the rank a failed rank blamed
  std::atomic<int32_t> reporter;               // the rank that failed first
  // Set by rank 0 before the others map the segment, so that every rank agrees on them.
  alignas(64) uint64_t round_bytes;  // per rank and round, <= kSlotBytes
  uint32_t oversubscribed;           // more ranks than cores on this host
};

namespace {

// Per rank, after the header: the barriers it has reached, its pid, and its last two calls (call
// i in calls[i % 2]: a rank writes a record again only two operations later, after the barrier of
// the operation between, which no rank passes before it has finished checking the record).
struct alignas(64) RankWord {
  std::atomic<uint64_t> arrived;
  int32_t pid;
  CallRecord calls[2];  // NOTE [Calls checked across ranks]
};
static_assert(sizeof(RankWord) == 64);

constexpr size_t kHeaderBytes = 320;
constexpr size_t kPage = 4096;
using shm::process_gone;
// NOTE [Rounds of shared-memory collectives]
constexpr size_t kRoundBytes = size_t{512} << 10;

size_t layout_bytes(int size) {
  const size_t control = kHeaderBytes + sizeof(RankWord) * static_cast<size_t>(size);
  return (control + kPage - 1) / kPage * kPage +
         static_cast<size_t>(size) * 2 * ShmCollectives::kSlotBytes;
}

RankWord* rank_words(void* mapping) {
  return reinterpret_cast<RankWord*>(static_cast<std::byte*>(mapping) + kHeaderBytes);
}

size_t slots_offset(int size) {
  const size_t control = kHeaderBytes + sizeof(RankWord) * static_cast<size_t>(size);
  return (control + kPage - 1) / kPage * kPage;
}

// The cores of this host (not of this process's affinity mask: the workers of a job may be bound
// to one core each, and then each has a core of its own).
int online_cores() {
  return static_cast<int>(std::clamp(sysconf(_SC_NPROCESSORS_ONLN), 1L, 4096L));
}

// Bytes per rank and round (NOTE [Rounds of shared-memory collectives]); CLEAVE_COMM_SHM_ROUND_KB
// overrides it (for measurements).
size_t round_bytes(bool oversubscribed) {
  size_t bytes = oversubscribed ? ShmCollectives::kSlotBytes : kRoundBytes;
  if (env::is_set("CLEAVE_COMM_SHM_ROUND_KB")) {
    bytes =
        static_cast<size_t>(env::integer("CLEAVE_COMM_SHM_ROUND_KB", 4,
                                         static_cast<int64_t>(ShmCollectives::kSlotBytes >> 10)))
        << 10;
  }
  return bytes / 64 * 64;
}

bool shm_enabled() { return env::flag("CLEAVE_COMM_SHM"); }

std::string to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> to_bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// A creator killed between making its segment and every rank mapping it (SIGKILL, or its job
// stopped with SIGTERM at that moment) cannot unlink the name. The name ends with the creator's
// pid, so the next creator on this host removes the names whose creator is gone. (Where /dev/shm
// is shared across pid namespaces, a live creator elsewhere may look gone: unlinking its name
// leaves its ranks' mappings intact, and a rank that had not opened it yet makes that group fall
// back to TCP, as any failure to map does.)
void remove_orphaned_segments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  constexpr std::string_view kPrefix = "cleave-coll-";
  while (const dirent* entry = readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name.substr(0, kPrefix.size()) != kPrefix) continue;
    const size_t dash = name.rfind('-');
    const int32_t pid = static_cast<int32_t>(std::atol(std::string(name.substr(dash + 1)).c_str()));
    if (process_gone(pid)) shm_unlink(("/" + std::string(name)).c_str());
  }
  closedir(dir);
}

// Elements [lo, hi) of a round of `len` elements that chunk `c` of `size` covers.
size_t chunk_lo(size_t len, int c, int size) {
  return len * static_cast<size_t>(c) / static_cast<size_t>(size);
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

}  // namespace

// ---- creation (NOTE [No shared memory left behind]) ----

namespace {
thread_local std::string testing_host_key;  // set_host_key_for_testing
}  // namespace

std::vector<std::string> ShmCollectives::host_keys(const ProcessGroupOptions& options,
                                                   Store& store) {
  if (!shm_enabled() || options.size <= 1) return {};
  auto key = [](int r) { return fmt::format("shm/host/{}", r); };
  const std::string mine = testing_host_key.empty() ? shm::host_key() : testing_host_key;
  store.set(key(options.rank), to_bytes(mine));
  std::vector<std::string> keys(static_cast<size_t>(options.size));
  for (int r = 0; r < options.size; ++r) {
    keys[r] = r == options.rank ? mine : to_string(store.get(key(r), options.timeout));
  }
  return keys;
}

void ShmCollectives::set_host_key_for_testing(std::string key) {
  testing_host_key = std::move(key);
}

std::unique_ptr<ShmCollectives> ShmCollectives::create(const ProcessGroupOptions& options,
                                                       Store& store,
                                                       const std::vector<int>& members,
                                                       size_t extra_bytes) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  const int size = static_cast<int>(members.size());
  const int rank =
      static_cast<int>(std::find(members.begin(), members.end(), options.rank) - members.begin());
  CLEAVE_ASSERT(rank < size, "ShmCollectives::create: this rank is not a member");
  if (size <= 1 || size > kMaxRanks) return nullptr;
  const auto timeout = options.timeout;
  // Keys of this host's members (named by their first member: one namespace per host).
  auto key = [&](const char* what, int r) {
    return fmt::format("shm/{}/{}/{}", members[0], what, r);
  };

  auto shm = std::unique_ptr<ShmCollectives>(new ShmCollectives());
  shm->name_ = options.name;
  shm->members_ = members;
  shm->rank_ = rank;
  shm->size_ = size;
  shm->timeout_ = timeout;
  const size_t bytes = layout_bytes(size) + (extra_bytes + kPage - 1) / kPage * kPage;

  std::string segment;
  auto map = [&](int fd) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return false;
    shm->mapping_ = p;
    shm->mapping_bytes_ = bytes;
    return true;
  };
  if (rank == 0) {
    remove_orphaned_segments();
    std::random_device random;
    segment = fmt::format("/cleave-coll-{:08x}{:08x}-{}", random(), random(), getpid());
    const int fd = shm_open(segment.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    bool ok = fd >= 0;
    // Reserve the memory now: a full /dev/shm must fail here, not as a SIGBUS later.
    if (ok && posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      ok = false;
    }
    if (ok) ok = map(fd);
    if (ok) {
      auto* header = static_cast<Header*>(shm->mapping_);
      header->oversubscribed = size > online_cores() ? 1 : 0;
      header->round_bytes = round_bytes(header->oversubscribed != 0);
    }
    if (!ok) {
      if (fd >= 0) shm_unlink(segment.c_str());
      segment.clear();
    }
    store.set(key("segment", 0), to_bytes(segment));
  } else {
    segment = to_string(store.get(key("segment", 0), timeout));
  }
  // From here on rank 0 unlinks the segment whatever happens.
  struct Unlink {
    const std::string& name;
    bool owner;
    ~Unlink() {
      if (owner && !name.empty()) shm_unlink(name.c_str());
    }
  } unlink_at_exit{segment, rank == 0};
  if (segment.empty()) return nullptr;
  if (rank != 0) {
    const int fd = shm_open(segment.c_str(), O_RDWR, 0600);
    if (fd >= 0) map(fd);
  }
  const bool mapped = shm->mapping_ != nullptr;
  if (mapped) {
    rank_words(shm->mapping_)[rank].pid = static_cast<int32_t>(getpid());
    shm->header_ = static_cast<Header*>(shm->mapping_);
    shm->round_bytes_ = static_cast<size_t>(shm->header_->round_bytes);
    shm->slots_ = static_cast<std::byte*>(shm->mapping_) + slots_offset(size);
    if (extra_bytes > 0) shm->extra_ = static_cast<std::byte*>(shm->mapping_) + layout_bytes(size);
  }
  store.set(key("mapped", rank), to_bytes(mapped ? "1" : "0"));
  bool all_mapped = mapped;
  for (int r = 0; r < size; ++r) {
    if (r != rank && to_string(store.get(key("mapped", r), timeout)) != "1") all_mapped = false;
  }
  if (!all_mapped) return nullptr;  // the destructor unmaps
  return shm;
}

ShmCollectives::~ShmCollectives() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

std::byte* ShmCollectives::slot(int rank, int buffer) const {
  return slots_ + (static_cast<size_t>(rank) * 2 + static_cast<size_t>(buffer)) * kSlotBytes;
}

// ---- barrier and failure (NOTE [Waiting in shared-memory collectives]) ----

int ShmCollectives::dead_rank_behind(uint64_t k) const {
  const RankWord* words = rank_words(mapping_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || words[r].arrived.load(std::memory_order_acquire) >= k) continue;
    if (process_gone(words[r].pid)) return r;
  }
  return -1;
}

void ShmCollectives::abandon(int culprit) {
  int32_t none = 0;
  if (header_->culprit.compare_exchange_strong(none, culprit + 1)) {
    header_->reporter.store(members_[rank_]);
  }
  header_->generation.wake();
}

void ShmCollectives::throw_if_abandoned() const {
  const int32_t culprit = header_->culprit.load(std::memory_order_acquire);
  if (culprit == 0) return;
  const int reporter = header_->reporter.load();
  // A rank that blames itself failed outside this segment (a leader's TCP step).
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

int32_t ShmCollectives::member_pid(int member) const { return rank_words(mapping_)[member].pid; }

void ShmCollectives::fail(int culprit, const std::string& why) {
  abandon(culprit);
  throw BackendFailure(why, culprit);
}

void ShmCollectives::wait_at_barrier() {
  const uint64_t k = ++barriers_;
  RankWord* words = rank_words(mapping_);
  words[rank_].arrived.store(k, std::memory_order_release);
  const uint64_t arrived = header_->arrivals.fetch_add(1, std::memory_order_acq_rel) + 1;
  const auto target = static_cast<uint32_t>(k);
  std::atomic<uint32_t>& generation = header_->generation.value;
  if (arrived == k * static_cast<uint64_t>(size_)) {
    generation.store(target, std::memory_order_release);
    header_->generation.wake();
    return;
  }
  const auto done = [&] {
    return static_cast<int32_t>(generation.load(std::memory_order_acquire) - target) >= 0;
  };
  // Between slices: the failure word and the peers' processes. A completed barrier comes first:
  // its operation then checks the calls itself, and names the mismatch rather than the rank that
  // found it first.
  const auto check = [&] {
    throw_if_abandoned();
    const int dead = dead_rank_behind(k);
    if (dead < 0) return;
    fail(members_[dead], fmt::format("shared memory: rank {} (pid {}) has exited without reaching "
                                     "the collective's barrier {} that this rank waits at",
                                     members_[dead], words[dead].pid, k));
  };
  while (!wait_until(header_->generation, deadline_, {polling_, kShmWait.slice}, done, check)) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (words[r].arrived.load(std::memory_order_acquire) < k) missing.push_back(members_[r]);
    }
    if (missing.empty()) {  // all arrived just now: the last one is opening the barrier
      sched_yield();
      continue;
    }
    fail(missing.front(),
         fmt::format("shared memory: rank(s) {} did not arrive within the timeout of {} ms "
                     "(they are alive but not in this collective: stopped, or calling "
                     "collectives in another order)",
                     fmt::join(missing, ", "), timeout_.count()));
  }
}

// ---- the collectives ----

void ShmCollectives::begin(Collective call, const Tensor* tensor, int64_t count, int detail) {
  deadline_ = Clock::now() + timeout_;
  rank_words(mapping_)[rank_].calls[++calls_ & 1] =
      call_record(call, tensor != nullptr ? tensor->dtype() : DType{}, count, detail);
  check_call_ = true;
  // NOTE [Waiting beside computation]: an operation of several rounds on the communication thread
  // sleeps at once at its barriers; one of a single round polls first, as blocking calls do.
  polling_ = tensor != nullptr && tensor->nbytes() > round_bytes_ ? poll_phase(kShmWait.poll)
                                                                  : kShmWait.poll;
}

void ShmCollectives::check_calls() {
  const RankWord* words = rank_words(mapping_);
  const CallRecord& mine = words[rank_].calls[calls_ & 1];
  const int r = first_mismatch(
      mine, size_, [&](int q) -> const CallRecord& { return words[q].calls[calls_ & 1]; });
  if (r < 0) return;
  // Every rank is alive and sees the same records, so each fails here at once with this message;
  // an invalid-argument error, so no process waits for a lost-peer verdict (NOTE [Failure hook]
  // in comm/progress.h).
  abandon(members_[r]);
  throw Error(ErrorKind::kInvalidArgument, mismatch_message(members_[r], words[r].calls[calls_ & 1],
                                                            mine, CallWording::kSharedMemory));
}

void ShmCollectives::arrive_and_wait() {
  wait_at_barrier();
  if (check_call_) {
    check_call_ = false;
    check_calls();
  }
}

void ShmCollectives::barrier() {
  begin(Collective::kBarrier, nullptr, 0, 0);
  arrive_and_wait();
}

void ShmCollectives::all_reduce(const Tensor& tensor, ReduceOp op) {
  begin(Collective::kAllReduce, &tensor, tensor.numel(), static_cast<int>(op));
  const size_t es = dtype_size(tensor.dtype());
  const size_t n = static_cast<size_t>(tensor.numel());
  const size_t per_round = round_bytes_ / es;
  auto* data = static_cast<std::byte*>(tensor.raw_data());
  std::vector<const std::byte*> src(static_cast<size_t>(size_));  // the operands, by rank
  for (size_t off = 0; off < n; off += per_round) {
    const size_t len = std::min(per_round, n - off);
    const int b = static_cast<int>(rounds_++ & 1);
    std::byte* mine = slot(rank_, b);
    std::byte* base = data + off * es;
    const size_t lo = chunk_lo(len, rank_, size_), hi = chunk_lo(len, rank_ + 1, size_);
    // The other ranks' chunks of this rank's data (its own chunk is read in place).
    copy_bytes(mine, base, lo * es);
    copy_bytes(mine + hi * es, base + hi * es, (len - hi) * es);
    arrive_and_wait();
    for (int r = 0; r < size_; ++r) src[r] = (r == rank_ ? base : slot(r, b)) + lo * es;
    // Into the slot (for the others) and, as a copy, into this rank's tensor.
    reduce_in_rank_order(tensor.dtype(), op, src, static_cast<int64_t>(hi - lo), mine + lo * es,
                         base + lo * es);
    arrive_and_wait();
    for (int c = 0; c < size_; ++c) {
      if (c == rank_) continue;
      const size_t clo = chunk_lo(len, c, size_), chi = chunk_lo(len, c + 1, size_);
      copy_bytes(base + clo * es, slot(c, b) + clo * es, (chi - clo) * es);
    }
  }
}

void ShmCollectives::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  begin(Collective::kReduceScatter, &output, output.numel(), static_cast<int>(op));
  const size_t es = dtype_size(input.dtype());
  const size_t n = static_cast<size_t>(output.numel());  // per rank
  const size_t per_round = std::max<size_t>(1, round_bytes_ / es / static_cast<size_t>(size_));
  const auto* in = static_cast<const std::byte*>(input.raw_data());
  auto* out = static_cast<std::byte*>(output.raw_data());
  std::vector<const std::byte*> src(static_cast<size_t>(size_));  // the operands, by rank
  for (size_t off = 0; off < n; off += per_round) {
    const size_t len = std::min(per_round, n - off);
    const int b = static_cast<int>(rounds_++ & 1);
    std::byte* mine = slot(rank_, b);
    // Region j of this rank's slot: its part of chunk j (per_round elements apart).
    for (int j = 0; j < size_; ++j) {
      if (j != rank_) copy_bytes(mine + j * per_round * es, in + (j * n + off) * es, len * es);
    }
    arrive_and_wait();
    for (int r = 0; r < size_; ++r) {
      src[r] = r == rank_ ? in + (rank_ * n + off) * es : slot(r, b) + rank_ * per_round * es;
    }
    reduce_in_rank_order(input.dtype(), op, src, static_cast<int64_t>(len), out + off * es);
  }
}

void ShmCollectives::all_gather(const Tensor& output, const Tensor& input) {
  begin(Collective::kAllGather, &input, input.numel(), 0);
  const size_t bytes = input.nbytes();
  const auto* in = static_cast<const std::byte*>(input.raw_data());
  auto* out = static_cast<std::byte*>(output.raw_data());
  copy_bytes(out + rank_ * bytes, in, bytes);
  for (size_t off = 0; off < bytes; off += round_bytes_) {
    const size_t len = std::min(round_bytes_, bytes - off);
    const int b = static_cast<int>(rounds_++ & 1);
    copy_bytes(slot(rank_, b), in + off, len);
    arrive_and_wait();
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) copy_bytes(out + r * bytes + off, slot(r, b), len);
    }
  }
}

void ShmCollectives::broadcast(const Tensor& tensor, int root) {
  begin(Collective::kBroadcast, &tensor, tensor.numel(), root);
  const size_t bytes = tensor.nbytes();
  auto* data = static_cast<std::byte*>(tensor.raw_data());
  for (size_t off = 0; off < bytes; off += round_bytes_) {
    const size_t len = std::min(round_bytes_, bytes - off);
    const int b = static_cast<int>(rounds_++ & 1);
    if (rank_ == root) copy_bytes(slot(root, b), data + off, len);
    arrive_and_wait();
    if (rank_ != root) copy_bytes(data + off, slot(root, b), len);
  }
}

void ShmCollectives::all_to_all(const Tensor& output, const Tensor& input) {
  begin(Collective::kAllToAll, &input, input.numel(), 0);
  const size_t chunk = input.nbytes() / static_cast<size_t>(size_);  // bytes per rank
  const size_t es = dtype_size(input.dtype());
  const size_t per_round =
      std::max(es, round_bytes_ / static_cast<size_t>(size_) / es * es);  // bytes per region
  const auto* in = static_cast<const std::byte*>(input.raw_data());
  auto* out = static_cast<std::byte*>(output.raw_data());
  copy_bytes(out + rank_ * chunk, in + rank_ * chunk, chunk);
  for (size_t off = 0; off < chunk; off += per_round) {
    const size_t len = std::min(per_round, chunk - off);
    const int b = static_cast<int>(rounds_++ & 1);
    std::byte* mine = slot(rank_, b);
    for (int j = 0; j < size_; ++j) {
      if (j != rank_) copy_bytes(mine + j * per_round, in + j * chunk + off, len);
    }
    arrive_and_wait();
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) copy_bytes(out + r * chunk + off, slot(r, b) + rank_ * per_round, len);
    }
  }
}

}  // namespace cleave::comm
