#include "data/nodes.h"

#include <algorithm>
#include <random>

#include "cleave/core/error.h"
#include "cleave/core/random.h"
#include "cleave/core/threads.h"

namespace cleave::dataset::detail {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t mix_seed(uint64_t a, uint64_t b) { return splitmix64(a ^ splitmix64(b)); }

// ---------------------------------------------------------------------------------------------
// Sharding (NOTE [Dataset sharding])
// ---------------------------------------------------------------------------------------------

void check_source_options(const std::string& source, const SourceOptions& options) {
  CLEAVE_CHECK_ARG(options.num_shards > 0, "{}: num_shards is {}; expected a value >= 1", source,
                   options.num_shards);
  CLEAVE_CHECK_ARG(options.shard_id >= 0 && options.shard_id < options.num_shards,
                   "{}: shard_id is {}; expected a value in [0, num_shards) = [0, {})", source,
                   options.shard_id, options.num_shards);
  CLEAVE_CHECK_ARG(options.num_samples >= 0, "{}: num_samples is {}; expected >= 0 (0: all)",
                   source, options.num_samples);
}

int64_t shard_size(int64_t size, const SourceOptions& options) {
  const int64_t per_shard = (size + options.num_shards - 1) / options.num_shards;
  return options.num_samples > 0 ? std::min(per_shard, options.num_samples) : per_shard;
}

std::vector<int64_t> shard_indices(int64_t size, const SourceOptions& options, uint64_t seed,
                                   int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) order[i] = i;
  if (options.shuffle) {
    std::mt19937_64 generator(mix_seed(seed, static_cast<uint64_t>(epoch)));
    std::shuffle(order.begin(), order.end(), generator);
  }
  const int64_t rows = shard_size(size, options);
  std::vector<int64_t> indices(static_cast<size_t>(rows));
  for (int64_t j = 0; j < rows; ++j) {
    indices[j] = order[(j * options.num_shards + options.shard_id) % size];
  }
  return indices;
}

// ---------------------------------------------------------------------------------------------
// IndexedSource
// ---------------------------------------------------------------------------------------------

IndexedSource::IndexedSource(std::string name, std::vector<std::string> column_names, int64_t size,
                             GetRow get_row, SourceOptions options)
    : Dataset(std::move(column_names)),
      name_(std::move(name)),
      size_(size),
      get_row_(std::move(get_row)),
      options_(options),
      seed_(next_seed()) {
  check_source_options(name_, options_);
}

int64_t IndexedSource::compute_size() { return shard_size(size_, options_); }

namespace {

class IndexedIterator : public Iterator {
 public:
  IndexedIterator(std::vector<int64_t> indices, const IndexedSource::GetRow* get_row,
                  ColumnMask needed, std::shared_ptr<Dataset> keep_alive)
      : indices_(std::move(indices)),
        get_row_(get_row),
        needed_(std::move(needed)),
        keep_alive_(std::move(keep_alive)) {}
  bool next(Row& row) override {
    if (position_ >= indices_.size()) return false;
    row = (*get_row_)(indices_[position_++], needed_);
    return true;
  }

 private:
  std::vector<int64_t> indices_;
  size_t position_ = 0;
  const IndexedSource::GetRow* get_row_;
  ColumnMask needed_;
  std::shared_ptr<Dataset> keep_alive_;
};

}  // namespace

std::unique_ptr<Iterator> IndexedSource::make_iterator(int64_t epoch, const ColumnMask& needed) {
  return std::make_unique<IndexedIterator>(shard_indices(size_, options_, seed_, epoch), &get_row_,
                                           needed, shared_from_this());
}

// ---------------------------------------------------------------------------------------------
// OrderedWorkerIterator
//
// Vocabulary: a worker *reserves* a slot (at most capacity_ rows may be reserved and not yet
// taken), *pulls* a row from the child under pull_mutex_, which gives the row its *position*,
// applies the work outside any lock and puts the row in ready_ at its position. next() *takes*
// the row at position taken_ once it is ready. The child's end (or its exception) fixes end_.
// ---------------------------------------------------------------------------------------------

OrderedWorkerIterator::OrderedWorkerIterator(std::unique_ptr<Iterator> child, Work work,
                                             int num_workers, int64_t capacity)
    : child_(std::move(child)), work_(std::move(work)), capacity_(std::max<int64_t>(capacity, 1)) {
  CLEAVE_ASSERT(num_workers >= 1);
  workers_.reserve(static_cast<size_t>(num_workers));
  // NOTE [Threads per worker] (cleave/core/threads.h): a worker's kernels take this process's
  // share.
  for (int i = 0; i < num_workers; ++i) {
    workers_.emplace_back([this] {
      threads::adopt_intra_op_threads();
      run_worker();
    });
  }
}

OrderedWorkerIterator::~OrderedWorkerIterator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  can_pull_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void OrderedWorkerIterator::run_worker() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      can_pull_.wait(lock, [&] { return stop_ || end_ >= 0 || reserved_ - taken_ < capacity_; });
      if (stop_ || end_ >= 0) return;
      ++reserved_;
    }
    Slot slot;
    int64_t position = 0;
    bool have_row = false;
    {
      std::lock_guard<std::mutex> pull(pull_mutex_);
      if (child_done_) return;
      position = position_++;
      try {
        have_row = child_->next(slot.row);
      } catch (...) {
        slot.error = std::current_exception();
      }
      if (!have_row) child_done_ = true;
    }
    if (!have_row && !slot.error) {  // the end of the epoch
      {
        std::lock_guard<std::mutex> lock(mutex_);
        end_ = position;
      }
      can_pull_.notify_all();
      can_take_.notify_all();
      return;
    }
    if (have_row && work_) {
      try {
        work_(slot.row, position);
      } catch (...) {
        slot.error = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(position, std::move(slot));
      if (!have_row) end_ = position + 1;  // the child threw: the epoch ends after the error
    }
    if (!have_row) can_pull_.notify_all();
    can_take_.notify_all();
  }
}

bool OrderedWorkerIterator::next(Row& row) {
  Slot slot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    can_take_.wait(lock, [&] { return ready_.count(taken_) > 0 || (end_ >= 0 && taken_ >= end_); });
    auto it = ready_.find(taken_);
    if (it == ready_.end()) return false;
    slot = std::move(it->second);
    ready_.erase(it);
    ++taken_;
  }
  can_pull_.notify_one();
  if (slot.error) std::rethrow_exception(slot.error);
  row = std::move(slot.row);
  return true;
}

}  // namespace cleave::dataset::detail
