// GeneratorDataset: rows from user code, iterable or random-access.
#include <memory>
#include <string>
#include <vector>

#include "cleave/core/error.h"
#include "cleave/data/dataset.h"
#include "data/nodes.h"

namespace cleave::dataset {

namespace {

constexpr const char* kSource = "GeneratorDataset";

void check_row(const Row& row, const std::vector<std::string>& names) {
  if (row.size() == names.size()) return;
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "'" : ", '") + name + "'";
  CLEAVE_FAIL("{}: the source returned a row of {} tensors; expected {} (columns {})", kSource,
              row.size(), names.size(), list);
}

class IterableSource : public Dataset {
 public:
  IterableSource(std::function<RowGenerator()> source, std::vector<std::string> names)
      : Dataset(std::move(names)), source_(std::move(source)) {}

  // The user's generator computes every column (NOTE [Column projection]).
  std::unique_ptr<Iterator> make_iterator(int64_t /*epoch*/,
                                          const ColumnMask& /*needed*/) override {
    return std::make_unique<GeneratorIterator>(source_(), column_names());
  }

 protected:
  int64_t compute_size() override {
    RowGenerator generator = source_();
    int64_t rows = 0;
    Row row;
    while (generator(row)) ++rows;
    return rows;
  }

 private:
  class GeneratorIterator : public Iterator {
   public:
    GeneratorIterator(RowGenerator generator, std::vector<std::string> names)
        : generator_(std::move(generator)), names_(std::move(names)) {}
    bool next(Row& row) override {
      if (done_) return false;
      if (!generator_(row)) {
        done_ = true;
        return false;
      }
      check_row(row, names_);
      return true;
    }

   private:
    RowGenerator generator_;
    std::vector<std::string> names_;
    bool done_ = false;
  };

  std::function<RowGenerator()> source_;
};

void check_names(const std::vector<std::string>& names) {
  CLEAVE_CHECK_ARG(!names.empty(), "{}: column_names is empty; expected at least one name",
                   kSource);
}

}  // namespace

DatasetPtr GeneratorDataset(std::function<RowGenerator()> source,
                            std::vector<std::string> column_names, GeneratorOptions options) {
  check_names(column_names);
  CLEAVE_CHECK_ARG(static_cast<bool>(source), "{}: source is empty (a null function)", kSource);
  CLEAVE_CHECK_ARG(options.num_shards == 1 && options.shard_id == 0 && !options.shuffle &&
                       options.num_samples == 0,
                   "{}: num_shards, shard_id, shuffle and num_samples need the random-access "
                   "form GeneratorDataset(get_item, size, column_names, options); the iterable "
                   "form got num_shards {}, shard_id {}, shuffle {}, num_samples {}",
                   kSource, options.num_shards, options.shard_id, options.shuffle,
                   options.num_samples);
  return std::make_shared<IterableSource>(std::move(source), std::move(column_names));
}

DatasetPtr GeneratorDataset(std::function<Row(int64_t index)> get_item, int64_t size,
                            std::vector<std::string> column_names, GeneratorOptions options) {
  check_names(column_names);
  CLEAVE_CHECK_ARG(static_cast<bool>(get_item), "{}: get_item is empty (a null function)", kSource);
  CLEAVE_CHECK_ARG(size >= 0, "{}: size is {}; expected >= 0", kSource, size);
  SourceOptions source_options;
  source_options.num_shards = options.num_shards;
  source_options.shard_id = options.shard_id;
  source_options.shuffle = options.shuffle;
  source_options.num_samples = options.num_samples;
  // The user's get_item computes every column (NOTE [Column projection]).
  auto get_row = [get_item = std::move(get_item), names = column_names](int64_t i,
                                                                        const ColumnMask&) {
    Row row = get_item(i);
    check_row(row, names);
    return row;
  };
  return std::make_shared<detail::IndexedSource>(kSource, std::move(column_names), size,
                                                 std::move(get_row), source_options);
}

}  // namespace cleave::dataset
