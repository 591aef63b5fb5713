// Internal building blocks of the dataset pipeline (NOTE [Dataset pipeline] in
// cleave/data/dataset.h): seed mixing, the indexed source node that MNIST, CIFAR-10 and the
// random-access generator share, and the ordered worker queue behind map() and prefetching.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cleave/data/dataset.h"

namespace cleave::dataset::detail {

// A well-spread 64-bit value from (a, b), for per-epoch and per-row seeds.
uint64_t mix_seed(uint64_t a, uint64_t b);

// Makes transform_generator() on this thread start from `seed` at its next draw.
void reseed_transform_generator(uint64_t seed);

// NOTE [Reusing a transform's input]
// A transform allocates its result; for the per-pixel ones (Rescale, Normalize) that allocation
// costs about as much as the arithmetic. map() therefore hands the column's tensor over: the row
// gives up its handle while the transform runs, and when the operation is itself a Rescale or
// Normalize (the std::function holds one, not a user function that might call one and still use
// its input afterwards) map marks the tensor as handed over on its thread. can_reuse_input(t) is
// true only then, and only while nothing else refers to t's tensor or buffer (no other handle,
// view, or batch shares them): the transform may write its result into t's buffer. Called
// directly, outside map, a transform always allocates, so its caller's tensors never change.
bool can_reuse_input(const Tensor& input);

// The rows of one shard in one epoch, as indices into 0..size-1 (NOTE [Dataset sharding]).
std::vector<int64_t> shard_indices(int64_t size, const SourceOptions& options, uint64_t seed,
                                   int64_t epoch);
// Rows per epoch of one shard.
int64_t shard_size(int64_t size, const SourceOptions& options);
// Throws Error naming `source` for num_shards <= 0, shard_id outside [0, num_shards) or
// num_samples < 0.
void check_source_options(const std::string& source, const SourceOptions& options);

// A source of `size` rows read by index: row i is get_row(i, needed), which must compute at least
// the columns flagged in `needed` (NOTE [Column projection]; the others may be left undefined).
// get_row runs on the thread that pulls the iterator (a prefetch or map worker) and must be safe
// to call from any one thread.
class IndexedSource : public Dataset {
 public:
  using GetRow = std::function<Row(int64_t index, const ColumnMask& needed)>;
  IndexedSource(std::string name, std::vector<std::string> column_names, int64_t size,
                GetRow get_row, SourceOptions options);
  std::unique_ptr<Iterator> make_iterator(int64_t epoch, const ColumnMask& needed) override;

 protected:
  int64_t compute_size() override;

 private:
  std::string name_;
  int64_t size_;
  GetRow get_row_;
  SourceOptions options_;
  uint64_t seed_;
};

// Pulls rows from `child` on `num_workers` threads, applies `work` (which may be empty) to each
// and hands them out in pull order, keeping at most `capacity` rows pulled but not yet taken by
// next(). The destructor stops and joins the workers. `work(row, position)` gets the row's
// position in the epoch. An exception from the child or from work is rethrown by the next()
// that reaches that row; after a child's exception the epoch ends there.
class OrderedWorkerIterator : public Iterator {
 public:
  using Work = std::function<void(Row& row, int64_t position)>;
  OrderedWorkerIterator(std::unique_ptr<Iterator> child, Work work, int num_workers,
                        int64_t capacity);
  ~OrderedWorkerIterator() override;
  bool next(Row& row) override;

 private:
  struct Slot {
    Row row;
    std::exception_ptr error;
  };
  void run_worker();

  std::unique_ptr<Iterator> child_;
  Work work_;
  int64_t capacity_;

  std::mutex pull_mutex_;  // serialises child_->next(); guards position_ and child_done_
  int64_t position_ = 0;   // position of the next row pulled
  bool child_done_ = false;

  std::mutex mutex_;                  // guards everything below
  std::condition_variable can_pull_;  // a slot was freed, the epoch ended, or stop_
  std::condition_variable can_take_;  // a row is ready or the epoch ended
  bool stop_ = false;
  int64_t reserved_ = 0;  // slots claimed by workers (rows pulled or being pulled)
  int64_t taken_ = 0;     // rows handed out by next()
  int64_t end_ = -1;      // position where the epoch ends, once known
  std::map<int64_t, Slot> ready_;

  std::vector<std::thread> workers_;
};

}  // namespace cleave::dataset::detail
