// Datasets (mindspore.dataset): sources (MNIST, CIFAR-10, generators) and the pipeline operations
// map / shuffle / batch / repeat / take, iterated one epoch at a time.
//
// NOTE [Dataset pipeline]
// A pipeline is a chain of Dataset nodes, each holding a shared_ptr to its child (the node it
// reads from): `MnistDataset(dir)->map(...)->shuffle(10000)->batch(32, true)->repeat(2)`. Nodes
// are immutable after construction and may be shared by several pipelines.
//
// create_tuple_iterator() starts one epoch: it builds one iterator per node (each pulling from its
// child's iterator) and runs that chain on a background thread that fills a bounded prefetch
// queue (config::set_prefetch_size rows, or batches after batch()); next() pops from the queue.
// map(..., num_parallel_workers > 1) applies its transforms on that many further threads and
// hands rows on in their original order. Destroying an iterator mid-epoch stops and joins every
// thread it started. An exception thrown on a background thread (a corrupt file, a transform
// given a bad tensor) is rethrown, message intact, by the next() call that would have returned the
// row it broke.
//
// NOTE [Dataset randomness]
// Every random choice (source shuffle, shuffle(), random transforms) is a pure function of a seed
// drawn with cleave::next_seed() when the node is constructed, the epoch number and the row's
// position in the epoch. Hence: the same set_seed before building a pipeline gives the same rows
// in every epoch, whatever the number of workers; each create_tuple_iterator() call on a pipeline
// starts the next epoch (epoch 0, 1, ...) with a new order. Random transforms draw from
// transform_generator(), which map() reseeds for every row.
//
// NOTE [Column projection]
// A consumer that reads only some columns (a worker of a placed training step whose part reads
// the label but not the image) asks for those: create_tuple_iterator(num_epochs, needed), or
// set_needed_columns() on an iterator that is already running. The request travels down the
// chain to the source, each node deciding what it needs from its child:
//   * map: when none of its columns is needed it is skipped (its transforms are not called, its
//     worker threads not started); otherwise it runs as without projection, on all its columns
//     (its transforms may draw random numbers column after column, so running only some would
//     change the others' draws), and its columns are needed from its child;
//   * shuffle, repeat, take: pass the request on; their orders depend only on seeds and row
//     counts, so rows come in the same order;
//   * batch: stacks only the needed columns;
//   * MnistDataset, Cifar10Dataset decode only the needed columns; GeneratorDataset calls the
//     user's code as usual.
// The rows then have every column, in column_names() order: the needed ones hold exactly the
// values of the unprojected pipeline, the others are undefined Tensors.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::dataset {

// One row of a dataset: one tensor per column, in column_names() order.
using Row = std::vector<Tensor>;
// A per-column transform: takes one tensor, returns the transformed tensor. The named transforms
// of cleave/data/transforms.h (vision::Resize, transforms::TypeCast, ...) convert to this.
using Transform = std::function<Tensor(const Tensor&)>;

// Which columns a consumer needs: one flag per column, in column_names() order
// (NOTE [Column projection]).
using ColumnMask = std::vector<bool>;

// Rows of one epoch.
class Iterator {
 public:
  virtual ~Iterator();
  // Fills `row` with the next row and returns true, or returns false at the end of the epoch
  // (and on every later call). Blocks until a row is ready. Rethrows errors of background
  // threads (NOTE [Dataset pipeline]).
  virtual bool next(Row& row) = 0;
  // Asks for only the `needed` columns (NOTE [Column projection]) in the epochs this iterator
  // has not begun preparing yet; the epochs already begun keep their columns. Whether the next
  // epoch is already begun depends on how far the background thread has read ahead, so the
  // caller must accept rows with or without the unneeded columns. Returns false (and changes
  // nothing) on iterators that do not support it; those of create_tuple_iterator(num_epochs) do.
  virtual bool set_needed_columns(const ColumnMask& needed);
};

class Dataset : public std::enable_shared_from_this<Dataset> {
 public:
  virtual ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const std::vector<std::string>& column_names() const { return column_names_; }
  // Rows in one epoch (batches after batch(), times count after repeat()). Computed once; for an
  // iterable GeneratorDataset this runs the generator through one epoch.
  int64_t get_dataset_size();

  // Applies `operations` in order to each column of `input_columns` (every name must be a column;
  // at least one operation and one column). num_parallel_workers >= 1 threads apply them.
  std::shared_ptr<Dataset> map(std::vector<Transform> operations,
                               std::vector<std::string> input_columns,
                               int num_parallel_workers = 1);
  // MindSpore's buffered shuffle: fills a buffer of buffer_size rows (> 0), then repeatedly emits
  // a random buffered row and puts the next incoming row in its place.
  std::shared_ptr<Dataset> shuffle(int64_t buffer_size);
  // Stacks batch_size (> 0) consecutive rows into one, each column gaining a leading dim of
  // batch_size; a last, smaller batch is kept unless drop_remainder. Every row of a batch must
  // have the same shapes and dtypes.
  std::shared_ptr<Dataset> batch(int64_t batch_size, bool drop_remainder = false);
  // count (>= 1) passes over the child per epoch, each a new child epoch (a new shuffle order).
  std::shared_ptr<Dataset> repeat(int64_t count = 1);
  // MindSpore's take: the first `count` rows of every epoch of this dataset (all of them when it
  // has fewer), or every row when count is -1. Stops pulling from its child after `count` rows,
  // so `...->batch(32, true)->take(100)` reads only the first 100 batches' images. count must be
  // >= 1 or -1.
  std::shared_ptr<Dataset> take(int64_t count = -1);

  // One epoch per call; each call starts a new epoch (a new shuffle order, deterministic for a
  // given cleave::set_seed and epoch number). The iterator may outlive this handle.
  std::unique_ptr<Iterator> create_tuple_iterator();
  // num_epochs (>= 1) consecutive epochs through one iterator, as MindSpore's training loop
  // iterates: next() returns false at the end of each epoch, and the next call returns the first
  // row of the following epoch, which the background thread has been preparing meanwhile (so the
  // shuffle buffer of epoch e + 1 fills while epoch e is consumed); false for good after the last
  // epoch. The epochs are the same as those of num_epochs calls of create_tuple_iterator().
  std::unique_ptr<Iterator> create_tuple_iterator(int64_t num_epochs);
  // The same epochs with only the `needed` columns computed (NOTE [Column projection]): one
  // flag per column; the other columns of every row are undefined Tensors.
  std::unique_ptr<Iterator> create_tuple_iterator(int64_t num_epochs, ColumnMask needed);

  // ---- pipeline internals (used by the nodes in src/data) ----
  // An iterator over epoch `epoch` of this node, pulled on the calling thread, computing at least
  // the columns flagged in `needed` (one flag per column; NOTE [Column projection]): the others
  // may be undefined Tensors.
  virtual std::unique_ptr<Iterator> make_iterator(int64_t epoch, const ColumnMask& needed) = 0;

 protected:
  explicit Dataset(std::vector<std::string> column_names);
  // Rows per epoch of this node.
  virtual int64_t compute_size() = 0;

 private:
  std::vector<std::string> column_names_;
  std::atomic<int64_t> next_epoch_{0};
  std::mutex size_mutex_;
  int64_t size_ = -1;
};
using DatasetPtr = std::shared_ptr<Dataset>;

// ---- sources ----

// Sharding and order of a file source (MindSpore's DistributedSampler).
//
// NOTE [Dataset sharding]
// With N samples and S = num_shards, every shard has ceil(N / S) rows, as in MindSpore, so that
// every rank runs the same number of steps. The epoch's order (0..N-1, or a permutation of it
// when shuffle, the same permutation in every shard) is read round-robin: shard k takes positions
// k, k + S, k + 2S, ... of that order, wrapping around to its start. Each sample is in exactly
// one shard when S divides N; otherwise the first S * ceil(N / S) - N samples of the order are
// read a second time, by the last shards (padding, never more than S - 1 rows in all).
// num_samples (> 0) then keeps only the first num_samples rows of the shard.
struct SourceOptions {
  int64_t num_shards = 1;   // >= 1
  int64_t shard_id = 0;     // in [0, num_shards)
  bool shuffle = true;      // a new permutation each epoch (MindSpore's default for file sources)
  int64_t num_samples = 0;  // 0: all of the shard
};

// "train": train-* / data_batch_* files only; "test": t10k-* / test_batch.bin only; "all":
// whichever sets are present in the folder (train first), at least one.
struct MnistOptions : SourceOptions {
  std::string usage = "all";
};
struct Cifar10Options : SourceOptions {
  std::string usage = "all";
};

// MNIST in the IDX format from folder `dir`: train-images-idx3-ubyte + train-labels-idx1-ubyte
// and/or t10k-images-idx3-ubyte + t10k-labels-idx1-ubyte. Columns "image": Float32 (28, 28, 1)
// HWC holding the bytes 0..255 (cleave has no uint8 dtype), "label": Int32 scalar in 0..9.
// Reads and checks the files now; throws Error naming the file for a missing folder or file, a
// wrong magic number, a truncated file, mismatched counts or a label > 9.
std::shared_ptr<Dataset> MnistDataset(const std::string& dir, MnistOptions options = {});

// CIFAR-10 binary batches from folder `dir`: data_batch_1.bin .. data_batch_5.bin and/or
// test_batch.bin (records of 1 label byte + 3072 bytes of R, G, B planes). Columns "image":
// Float32 (32, 32, 3) HWC holding 0..255, "label": Int32 scalar in 0..9. Errors as MnistDataset.
std::shared_ptr<Dataset> Cifar10Dataset(const std::string& dir, Cifar10Options options = {});

// A generator source: one epoch of rows.
using RowGenerator = std::function<bool(Row& row)>;  // false: end of epoch

struct GeneratorOptions {
  int64_t num_shards = 1;  // random-access form only
  int64_t shard_id = 0;
  bool shuffle = false;  // random-access form only (MindSpore's default is true for it)
  int64_t num_samples = 0;
};

// Iterable form (a Python generator function): `source` is called at the start of every epoch and
// returns the generator of that epoch's rows, each with one tensor per name of column_names. Both
// may run on a background thread. get_dataset_size() runs one extra epoch to count the rows.
std::shared_ptr<Dataset> GeneratorDataset(std::function<RowGenerator()> source,
                                          std::vector<std::string> column_names,
                                          GeneratorOptions options = {});
// Random-access form (__getitem__ + __len__): row i of `size` rows is get_item(i); supports
// shuffle and sharding (NOTE [Dataset sharding]). get_item is called on background threads, one
// call at a time per iterator (concurrently only when several iterators are alive).
std::shared_ptr<Dataset> GeneratorDataset(std::function<Row(int64_t index)> get_item, int64_t size,
                                          std::vector<std::string> column_names,
                                          GeneratorOptions options = {});

// The generator random transforms draw from; map() reseeds it on its thread for every row
// (NOTE [Dataset randomness]).
std::mt19937_64& transform_generator();

namespace config {
// Rows (or batches) buffered ahead of next() by every iterator; >= 1. Default 8.
void set_prefetch_size(int64_t size);
int64_t get_prefetch_size();
}  // namespace config

}  // namespace cleave::dataset
