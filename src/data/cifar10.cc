// Cifar10Dataset: the binary batches of CIFAR-10.
//
// Each file is a sequence of 3073-byte records: 1 label byte (0..9), then the 32 x 32 image as
// three 1024-byte planes (red, green, blue), each row-major. The train set is data_batch_1.bin ..
// data_batch_5.bin, the test set test_batch.bin.
#include <memory>
#include <string>
#include <vector>

#include "cleave/core/error.h"
#include "cleave/data/dataset.h"
#include "data/files.h"
#include "data/nodes.h"

namespace cleave::dataset {

namespace {

constexpr const char* kSource = "Cifar10Dataset";
constexpr int64_t kSide = 32;
constexpr int64_t kPlane = kSide * kSide;
constexpr int64_t kRecord = 1 + 3 * kPlane;
constexpr int kNumClasses = 10;
constexpr int kTrainFiles = 5;

struct CifarData {
  std::vector<uint8_t> records;  // count * kRecord
  int64_t count = 0;
};

void read_batch(const std::string& path, CifarData& data) {
  const std::vector<uint8_t> bytes = detail::read_file(kSource, path);
  CLEAVE_CHECK_ARG(bytes.size() % kRecord == 0,
                   "{}: file '{}' is truncated or corrupt: {} bytes; expected a multiple of {} "
                   "(records of 1 label byte + 3072 image bytes)",
                   kSource, path, bytes.size(), kRecord);
  const int64_t count = static_cast<int64_t>(bytes.size()) / kRecord;
  for (int64_t i = 0; i < count; ++i) {
    const int label = bytes[i * kRecord];
    CLEAVE_CHECK_ARG(label < kNumClasses,
                     "{}: file '{}' has label {} in record {}; expected a label in [0, {})",
                     kSource, path, label, i, kNumClasses);
  }
  data.records.insert(data.records.end(), bytes.begin(), bytes.end());
  data.count += count;
}

}  // namespace

DatasetPtr Cifar10Dataset(const std::string& dir, Cifar10Options options) {
  detail::check_source_options(kSource, options);
  CLEAVE_CHECK_ARG(options.usage == "train" || options.usage == "test" || options.usage == "all",
                   "{}: usage is '{}'; expected 'train', 'test' or 'all'", kSource, options.usage);
  detail::check_folder(kSource, dir);

  std::vector<std::string> train;
  bool any_train = false;
  for (int k = 1; k <= kTrainFiles; ++k) {
    train.push_back(dir + "/data_batch_" + std::to_string(k) + ".bin");
    any_train = any_train || detail::file_exists(train.back());
  }
  const std::string test = dir + "/test_batch.bin";

  auto data = std::make_shared<CifarData>();
  const bool want_train = options.usage == "train" || (options.usage == "all" && any_train);
  const bool want_test =
      options.usage == "test" || (options.usage == "all" && detail::file_exists(test));
  CLEAVE_CHECK_ARG(want_train || want_test,
                   "{}: folder '{}' holds no CIFAR-10 files; expected data_batch_1.bin .. "
                   "data_batch_5.bin and/or test_batch.bin",
                   kSource, dir);
  if (want_train) {
    for (const std::string& path : train) {
      CLEAVE_CHECK_ARG(detail::file_exists(path),
                       "{}: missing file '{}' (the train set is data_batch_1.bin .. "
                       "data_batch_5.bin)",
                       kSource, path);
      read_batch(path, *data);
    }
  }
  if (want_test) {
    CLEAVE_CHECK_ARG(detail::file_exists(test), "{}: missing file '{}' (the test set)", kSource,
                     test);
    read_batch(test, *data);
  }

  // Decodes only the needed columns (NOTE [Column projection]).
  auto get_row = [data](int64_t i, const ColumnMask& needed) -> Row {
    const uint8_t* record = data->records.data() + i * kRecord;
    Row row(2);
    if (needed[0]) {
      row[0] = Tensor::empty(Shape{kSide, kSide, 3}, DType::kFloat32);
      float* out = row[0].data<float>();
      for (int64_t p = 0; p < kPlane; ++p) {
        for (int64_t c = 0; c < 3; ++c)
          out[p * 3 + c] = static_cast<float>(record[1 + c * kPlane + p]);
      }
    }
    if (needed[1]) {
      row[1] = Tensor::empty(Shape{}, DType::kInt32);
      *row[1].data<int32_t>() = record[0];
    }
    return row;
  };
  return std::make_shared<detail::IndexedSource>(kSource,
                                                 std::vector<std::string>{"image", "label"},
                                                 data->count, std::move(get_row), options);
}

}  // namespace cleave::dataset
