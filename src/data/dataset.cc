// The Dataset base class and the pipeline operations map / shuffle / batch / repeat /
// take (NOTE [Dataset pipeline], NOTE [Dataset randomness] in cleave/data/dataset.h).
#include "cleave/data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <typeinfo>

#include "cleave/core/error.h"
#include "cleave/core/random.h"
#include "cleave/data/transforms.h"
#include "data/nodes.h"

namespace cleave::dataset {

Iterator::~Iterator() = default;
bool Iterator::set_needed_columns(const ColumnMask& /*needed*/) { return false; }

namespace {

std::atomic<int64_t> g_prefetch_size{8};

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "'" : ", '") + name + "'";
  return out;
}

}  // namespace

namespace config {
void set_prefetch_size(int64_t size) {
  CLEAVE_CHECK_ARG(size >= 1, "config::set_prefetch_size: size is {}; expected >= 1", size);
  g_prefetch_size = size;
}
int64_t get_prefetch_size() { return g_prefetch_size; }
}  // namespace config

namespace {

// The generator of transform_generator(), seeded lazily: seeding an mt19937_64 costs more than
// most transforms, and only random transforms draw.
struct TransformGenerator {
  std::mt19937_64 engine{0};
  uint64_t pending_seed = 0;
  bool seeded = true;
};
thread_local TransformGenerator t_transform_generator;

}  // namespace

std::mt19937_64& transform_generator() {
  TransformGenerator& g = t_transform_generator;
  if (!g.seeded) {
    g.engine.seed(g.pending_seed);
    g.seeded = true;
  }
  return g.engine;
}

namespace {
// The tensor map() is handing to a transform on this thread (NOTE [Reusing a transform's input]).
thread_local const TensorImpl* t_handed_over = nullptr;
}  // namespace

namespace detail {
bool can_reuse_input(const Tensor& input) {
  const TensorImpl* impl = input.impl();
  return impl != nullptr && impl == t_handed_over && input.impl_ptr().use_count() == 1 &&
         impl->storage != nullptr && impl->storage.use_count() == 1 && !input.is_symbolic() &&
         impl->grad_fn == nullptr;
}

void reseed_transform_generator(uint64_t seed) {
  t_transform_generator.pending_seed = seed;
  t_transform_generator.seeded = false;
}
}  // namespace detail

Dataset::Dataset(std::vector<std::string> column_names) : column_names_(std::move(column_names)) {}
Dataset::~Dataset() = default;

int64_t Dataset::get_dataset_size() {
  std::lock_guard<std::mutex> lock(size_mutex_);
  if (size_ < 0) size_ = compute_size();
  return size_;
}

namespace {

// Leaves the columns not flagged in `needed` undefined (a map that ran on one of them, or a
// source that ignores the request, may have computed it).
void clear_unneeded(Row& row, const ColumnMask& needed) {
  for (size_t c = 0; c < row.size() && c < needed.size(); ++c) {
    if (!needed[c]) row[c] = Tensor();
  }
}

bool all_needed(const ColumnMask& needed) {
  return std::find(needed.begin(), needed.end(), false) == needed.end();
}

void check_mask(const char* what, const Dataset& ds, const ColumnMask& needed) {
  CLEAVE_CHECK_ARG(needed.size() == ds.column_names().size(),
                   "{}: needed has {} flags; expected one per column ({})", what, needed.size(),
                   quoted_list(ds.column_names()));
}

// The columns later epochs of a MultiEpochIterator need; set by its consumer's thread, read by
// the background thread when it begins an epoch.
class SharedMask {
 public:
  explicit SharedMask(ColumnMask mask) : mask_(std::move(mask)) {}
  void set(const ColumnMask& mask) {
    std::lock_guard<std::mutex> lock(mutex_);
    mask_ = mask;
  }
  ColumnMask get() {
    std::lock_guard<std::mutex> lock(mutex_);
    return mask_;
  }

 private:
  std::mutex mutex_;
  ColumnMask mask_;
};

// Epochs first_epoch .. first_epoch + num_epochs - 1 of `dataset` in a row, with an empty row
// marking the end of each (a real row has at least one column). Each epoch computes the columns
// `mask` asks for when the epoch begins.
class EpochChainIterator : public Iterator {
 public:
  EpochChainIterator(DatasetPtr dataset, int64_t first_epoch, int64_t num_epochs, SharedMask* mask)
      : dataset_(std::move(dataset)),
        epoch_(first_epoch),
        last_epoch_(first_epoch + num_epochs),
        mask_(mask) {}
  bool next(Row& row) override {
    if (epoch_ >= last_epoch_) return false;
    if (!current_) {
      needed_ = mask_->get();
      current_ = dataset_->make_iterator(epoch_, needed_);
    }
    if (current_->next(row)) {
      clear_unneeded(row, needed_);
      return true;
    }
    current_.reset();
    ++epoch_;
    row.clear();
    return true;
  }

 private:
  DatasetPtr dataset_;
  int64_t epoch_, last_epoch_;
  SharedMask* mask_;
  ColumnMask needed_;  // of the current epoch
  std::unique_ptr<Iterator> current_;
};

// The prefetch queue over an EpochChainIterator: the empty marker row ends an epoch.
class MultiEpochIterator : public Iterator {
 public:
  MultiEpochIterator(DatasetPtr dataset, int64_t first_epoch, int64_t num_epochs, ColumnMask mask)
      : dataset_(dataset),
        mask_(std::move(mask)),
        queue_(std::make_unique<EpochChainIterator>(std::move(dataset), first_epoch, num_epochs,
                                                    &mask_),
               nullptr, 1, config::get_prefetch_size()) {}
  bool next(Row& row) override { return queue_.next(row) && !row.empty(); }
  bool set_needed_columns(const ColumnMask& needed) override {
    check_mask("set_needed_columns", *dataset_, needed);
    mask_.set(needed);
    return true;
  }

 private:
  DatasetPtr dataset_;
  SharedMask mask_;  // declared before queue_: outlives its background thread
  detail::OrderedWorkerIterator queue_;
};

}  // namespace

std::unique_ptr<Iterator> Dataset::create_tuple_iterator() { return create_tuple_iterator(1); }

std::unique_ptr<Iterator> Dataset::create_tuple_iterator(int64_t num_epochs) {
  return create_tuple_iterator(num_epochs, ColumnMask(column_names().size(), true));
}

std::unique_ptr<Iterator> Dataset::create_tuple_iterator(int64_t num_epochs, ColumnMask needed) {
  CLEAVE_CHECK_ARG(num_epochs >= 1, "create_tuple_iterator: num_epochs is {}; expected >= 1",
                   num_epochs);
  check_mask("create_tuple_iterator", *this, needed);
  const int64_t first_epoch = next_epoch_.fetch_add(num_epochs);
  if (num_epochs == 1) {
    detail::OrderedWorkerIterator::Work clear;
    if (!all_needed(needed)) {
      clear = [needed](Row& row, int64_t /*position*/) { clear_unneeded(row, needed); };
    }
    return std::make_unique<detail::OrderedWorkerIterator>(
        make_iterator(first_epoch, needed), std::move(clear), 1, config::get_prefetch_size());
  }
  return std::make_unique<MultiEpochIterator>(shared_from_this(), first_epoch, num_epochs,
                                              std::move(needed));
}

namespace {

// ---------------------------------------------------------------------------------------------
// map
// ---------------------------------------------------------------------------------------------

// Whether `op` is a transform that reuses its input's buffer when map hands it over (NOTE
// [Reusing a transform's input] in data/nodes.h).
bool reuses_input(const Transform& op) {
  return op.target_type() == typeid(vision::Rescale) ||
         op.target_type() == typeid(vision::Normalize);
}

class MapNode : public Dataset {
 public:
  MapNode(DatasetPtr child, std::vector<Transform> operations, std::vector<size_t> columns,
          int num_workers)
      : Dataset(child->column_names()),
        child_(std::move(child)),
        operations_(std::move(operations)),
        columns_(std::move(columns)),
        num_workers_(num_workers),
        seed_(next_seed()) {}

  std::unique_ptr<Iterator> make_iterator(int64_t epoch, const ColumnMask& needed) override {
    // NOTE [Column projection]: skipped when none of its columns is needed; otherwise it runs on
    // all of them, which its child must then compute.
    ColumnMask below = needed;
    bool any = false;
    for (size_t column : columns_) {
      any = any || needed[column];
      below[column] = true;
    }
    if (!any) return child_->make_iterator(epoch, needed);
    auto self = std::static_pointer_cast<MapNode>(shared_from_this());
    const uint64_t epoch_seed = detail::mix_seed(seed_, static_cast<uint64_t>(epoch));
    detail::OrderedWorkerIterator::Work work = [self, epoch_seed](Row& row, int64_t position) {
      self->apply(row, detail::mix_seed(epoch_seed, static_cast<uint64_t>(position)));
    };
    if (num_workers_ > 1) {
      return std::make_unique<detail::OrderedWorkerIterator>(
          child_->make_iterator(epoch, below), std::move(work), num_workers_,
          std::max<int64_t>(config::get_prefetch_size(), 2 * num_workers_));
    }
    return std::make_unique<SerialIterator>(child_->make_iterator(epoch, below), std::move(work));
  }

 protected:
  int64_t compute_size() override { return child_->get_dataset_size(); }

 private:
  class SerialIterator : public Iterator {
   public:
    SerialIterator(std::unique_ptr<Iterator> child, detail::OrderedWorkerIterator::Work work)
        : child_(std::move(child)), work_(std::move(work)) {}
    bool next(Row& row) override {
      if (!child_->next(row)) return false;
      work_(row, position_++);
      return true;
    }

   private:
    std::unique_ptr<Iterator> child_;
    detail::OrderedWorkerIterator::Work work_;
    int64_t position_ = 0;
  };

  void apply(Row& row, uint64_t row_seed) const {
    CLEAVE_CHECK_ARG(row.size() == column_names().size(),
                     "map: a row has {} tensors; expected {} (columns {})", row.size(),
                     column_names().size(), quoted_list(column_names()));
    detail::reseed_transform_generator(row_seed);
    for (size_t column : columns_) {
      for (const Transform& op : operations_) {
        // The row gives up its handle, so that the transform may reuse the buffer (NOTE
        // [Reusing a transform's input] in data/nodes.h).
        const Tensor input = std::move(row[column]);
        t_handed_over = reuses_input(op) ? input.impl() : nullptr;
        try {
          row[column] = op(input);
        } catch (...) {
          t_handed_over = nullptr;
          throw;
        }
        t_handed_over = nullptr;
      }
    }
  }

  DatasetPtr child_;
  std::vector<Transform> operations_;
  std::vector<size_t> columns_;
  int num_workers_;
  uint64_t seed_;
};

// ---------------------------------------------------------------------------------------------
// shuffle
// ---------------------------------------------------------------------------------------------

class ShuffleNode : public Dataset {
 public:
  ShuffleNode(DatasetPtr child, int64_t buffer_size)
      : Dataset(child->column_names()),
        child_(std::move(child)),
        buffer_size_(buffer_size),
        seed_(next_seed()) {}

  std::unique_ptr<Iterator> make_iterator(int64_t epoch, const ColumnMask& needed) override {
    return std::make_unique<ShuffleIterator>(child_->make_iterator(epoch, needed), buffer_size_,
                                             detail::mix_seed(seed_, static_cast<uint64_t>(epoch)));
  }

 protected:
  int64_t compute_size() override { return child_->get_dataset_size(); }

 private:
  class ShuffleIterator : public Iterator {
   public:
    ShuffleIterator(std::unique_ptr<Iterator> child, int64_t buffer_size, uint64_t seed)
        : child_(std::move(child)), buffer_size_(buffer_size), generator_(seed) {}
    bool next(Row& row) override {
      if (!filled_) {
        filled_ = true;
        Row incoming;
        while (static_cast<int64_t>(buffer_.size()) < buffer_size_ && child_->next(incoming)) {
          buffer_.push_back(std::move(incoming));
        }
      }
      if (buffer_.empty()) return false;
      std::uniform_int_distribution<size_t> pick(0, buffer_.size() - 1);
      const size_t i = pick(generator_);
      row = std::move(buffer_[i]);
      Row incoming;
      if (child_->next(incoming)) {
        buffer_[i] = std::move(incoming);
      } else {
        buffer_[i] = std::move(buffer_.back());
        buffer_.pop_back();
      }
      return true;
    }

   private:
    std::unique_ptr<Iterator> child_;
    int64_t buffer_size_;
    std::mt19937_64 generator_;
    bool filled_ = false;
    std::vector<Row> buffer_;
  };

  DatasetPtr child_;
  int64_t buffer_size_;
  uint64_t seed_;
};

// ---------------------------------------------------------------------------------------------
// batch
// ---------------------------------------------------------------------------------------------

// Stacks rows[i][column] into one tensor with a leading dim of rows.size().
Tensor stack_column(const std::vector<Row>& rows, size_t column, const std::string& name) {
  const Tensor& first = rows[0][column];
  for (size_t i = 1; i < rows.size(); ++i) {
    const Tensor& t = rows[i][column];
    CLEAVE_CHECK_ARG(t.shape() == first.shape() && t.dtype() == first.dtype(),
                     "batch: row {} of a batch has column '{}' of shape {} and dtype {}; expected "
                     "shape {} and dtype {} like the batch's first row",
                     i, name, t.shape().to_string(), dtype_name(t.dtype()),
                     first.shape().to_string(), dtype_name(first.dtype()));
  }
  std::vector<int64_t> dims{static_cast<int64_t>(rows.size())};
  for (int64_t d : first.shape().dims()) dims.push_back(d);
  Tensor out = Tensor::empty(Shape(dims), first.dtype());
  auto* dst = static_cast<char*>(out.raw_data());
  const size_t bytes = first.nbytes();
  for (const Row& row : rows) {
    std::memcpy(dst, row[column].raw_data(), bytes);
    dst += bytes;
  }
  return out;
}

class BatchNode : public Dataset {
 public:
  BatchNode(DatasetPtr child, int64_t batch_size, bool drop_remainder)
      : Dataset(child->column_names()),
        child_(std::move(child)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}

  std::unique_ptr<Iterator> make_iterator(int64_t epoch, const ColumnMask& needed) override {
    return std::make_unique<BatchIterator>(child_->make_iterator(epoch, needed),
                                           std::static_pointer_cast<BatchNode>(shared_from_this()),
                                           needed);
  }

 protected:
  int64_t compute_size() override {
    const int64_t rows = child_->get_dataset_size();
    return drop_remainder_ ? rows / batch_size_ : (rows + batch_size_ - 1) / batch_size_;
  }

 private:
  class BatchIterator : public Iterator {
   public:
    BatchIterator(std::unique_ptr<Iterator> child, std::shared_ptr<BatchNode> node,
                  ColumnMask needed)
        : child_(std::move(child)), node_(std::move(node)), needed_(std::move(needed)) {}
    bool next(Row& row) override {
      std::vector<Row> rows;
      rows.reserve(static_cast<size_t>(node_->batch_size_));
      Row incoming;
      while (static_cast<int64_t>(rows.size()) < node_->batch_size_ && child_->next(incoming)) {
        const size_t columns = node_->column_names().size();
        CLEAVE_CHECK_ARG(incoming.size() == columns,
                         "batch: a row has {} tensors; expected {} (columns {})", incoming.size(),
                         columns, quoted_list(node_->column_names()));
        rows.push_back(std::move(incoming));
      }
      if (rows.empty()) return false;
      if (node_->drop_remainder_ && static_cast<int64_t>(rows.size()) < node_->batch_size_) {
        return false;
      }
      row.assign(rows[0].size(), Tensor());
      for (size_t c = 0; c < row.size(); ++c) {
        if (needed_[c]) row[c] = stack_column(rows, c, node_->column_names()[c]);
      }
      return true;
    }

   private:
    std::unique_ptr<Iterator> child_;
    std::shared_ptr<BatchNode> node_;
    ColumnMask needed_;  // the columns to stack; the others stay undefined
  };

  DatasetPtr child_;
  int64_t batch_size_;
  bool drop_remainder_;
};

// ---------------------------------------------------------------------------------------------
// repeat
// ---------------------------------------------------------------------------------------------

class RepeatNode : public Dataset {
 public:
  RepeatNode(DatasetPtr child, int64_t count)
      : Dataset(child->column_names()), child_(std::move(child)), count_(count) {}

  std::unique_ptr<Iterator> make_iterator(int64_t epoch, const ColumnMask& needed) override {
    return std::make_unique<RepeatIterator>(child_, epoch * count_, count_, needed);
  }

 protected:
  int64_t compute_size() override { return child_->get_dataset_size() * count_; }

 private:
  // Pass r over the child is the child's epoch first_epoch + r.
  class RepeatIterator : public Iterator {
   public:
    RepeatIterator(DatasetPtr child, int64_t first_epoch, int64_t count, ColumnMask needed)
        : child_(std::move(child)),
          first_epoch_(first_epoch),
          count_(count),
          needed_(std::move(needed)) {}
    bool next(Row& row) override {
      while (pass_ < count_) {
        if (!current_) current_ = child_->make_iterator(first_epoch_ + pass_, needed_);
        if (current_->next(row)) return true;
        current_.reset();
        ++pass_;
      }
      return false;
    }

   private:
    DatasetPtr child_;
    int64_t first_epoch_, count_;
    ColumnMask needed_;
    int64_t pass_ = 0;
    std::unique_ptr<Iterator> current_;
  };

  DatasetPtr child_;
  int64_t count_;
};

// ---------------------------------------------------------------------------------------------
// take
// ---------------------------------------------------------------------------------------------

class TakeNode : public Dataset {
 public:
  TakeNode(DatasetPtr child, int64_t count)
      : Dataset(child->column_names()), child_(std::move(child)), count_(count) {}

  std::unique_ptr<Iterator> make_iterator(int64_t epoch, const ColumnMask& needed) override {
    return std::make_unique<TakeIterator>(child_->make_iterator(epoch, needed), count_);
  }

 protected:
  int64_t compute_size() override {
    const int64_t size = child_->get_dataset_size();
    return count_ < 0 ? size : std::min(size, count_);
  }

 private:
  class TakeIterator : public Iterator {
   public:
    TakeIterator(std::unique_ptr<Iterator> child, int64_t count)
        : child_(std::move(child)), left_(count) {}
    bool next(Row& row) override {
      if (left_ == 0 || !child_) return false;
      if (!child_->next(row)) {
        child_.reset();
        return false;
      }
      if (left_ > 0) --left_;
      // Release the child (and the threads of its maps) as soon as the last row is taken.
      if (left_ == 0) child_.reset();
      return true;
    }

   private:
    std::unique_ptr<Iterator> child_;
    int64_t left_;  // rows still to take; -1: all
  };

  DatasetPtr child_;
  int64_t count_;
};

}  // namespace

DatasetPtr Dataset::map(std::vector<Transform> operations, std::vector<std::string> input_columns,
                        int num_parallel_workers) {
  CLEAVE_CHECK_ARG(!operations.empty(), "map: operations is empty; expected at least one");
  CLEAVE_CHECK_ARG(!input_columns.empty(),
                   "map: input_columns is empty; expected at least one of {}",
                   quoted_list(column_names()));
  CLEAVE_CHECK_ARG(num_parallel_workers >= 1,
                   "map: num_parallel_workers is {}; expected a value >= 1", num_parallel_workers);
  for (const Transform& op : operations) {
    CLEAVE_CHECK_ARG(static_cast<bool>(op), "map: an operation is empty (a null Transform)");
  }
  std::vector<size_t> columns;
  for (const std::string& name : input_columns) {
    auto it = std::find(column_names().begin(), column_names().end(), name);
    CLEAVE_CHECK_ARG(it != column_names().end(),
                     "map: input column '{}' is not a column of the dataset; expected one of {}",
                     name, quoted_list(column_names()));
    columns.push_back(static_cast<size_t>(it - column_names().begin()));
  }
  return std::make_shared<MapNode>(shared_from_this(), std::move(operations), std::move(columns),
                                   num_parallel_workers);
}

DatasetPtr Dataset::shuffle(int64_t buffer_size) {
  CLEAVE_CHECK_ARG(buffer_size > 0, "shuffle: buffer_size is {}; expected a value > 0",
                   buffer_size);
  return std::make_shared<ShuffleNode>(shared_from_this(), buffer_size);
}

DatasetPtr Dataset::batch(int64_t batch_size, bool drop_remainder) {
  CLEAVE_CHECK_ARG(batch_size > 0, "batch: batch_size is {}; expected a value > 0", batch_size);
  return std::make_shared<BatchNode>(shared_from_this(), batch_size, drop_remainder);
}

DatasetPtr Dataset::repeat(int64_t count) {
  CLEAVE_CHECK_ARG(count >= 1, "repeat: count is {}; expected a value >= 1", count);
  return std::make_shared<RepeatNode>(shared_from_this(), count);
}

DatasetPtr Dataset::take(int64_t count) {
  CLEAVE_CHECK_ARG(count >= 1 || count == -1,
                   "take: count is {}; expected a value >= 1, or -1 for every row", count);
  return std::make_shared<TakeNode>(shared_from_this(), count);
}

}  // namespace cleave::dataset
