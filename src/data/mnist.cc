// MnistDataset: the IDX files of MNIST.
//
// IDX layout (big-endian): an image file is magic 0x00000803, count, rows, cols, then
// count * rows * cols pixel bytes; a label file is magic 0x00000801, count, then count label bytes.
#include <memory>
#include <string>
#include <vector>

#include "cleave/core/error.h"
#include "cleave/data/dataset.h"
#include "data/files.h"
#include "data/nodes.h"

namespace cleave::dataset {

namespace {

constexpr const char* kSource = "MnistDataset";
constexpr uint32_t kImageMagic = 0x00000803;
constexpr uint32_t kLabelMagic = 0x00000801;
constexpr int kNumClasses = 10;

struct MnistData {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols
  std::vector<int32_t> labels;  // count
};

// Appends the set whose files are `images_path` and `labels_path` to `data`.
void read_set(const std::string& images_path, const std::string& labels_path, MnistData& data) {
  CLEAVE_CHECK_ARG(detail::file_exists(images_path),
                   "{}: missing file '{}' (the images of the set whose labels are '{}')", kSource,
                   images_path, labels_path);
  CLEAVE_CHECK_ARG(detail::file_exists(labels_path),
                   "{}: missing file '{}' (the labels of the set whose images are '{}')", kSource,
                   labels_path, images_path);
  const std::vector<uint8_t> images = detail::read_file(kSource, images_path);
  CLEAVE_CHECK_ARG(images.size() >= 16,
                   "{}: file '{}' is truncated: {} bytes; an IDX image file has a 16-byte header",
                   kSource, images_path, images.size());
  const uint32_t image_magic = detail::read_be32(images, 0);
  CLEAVE_CHECK_ARG(image_magic == kImageMagic,
                   "{}: file '{}' has magic number 0x{:08x}; expected 0x{:08x} (IDX images, "
                   "unsigned bytes, 3 dims)",
                   kSource, images_path, image_magic, kImageMagic);
  const int64_t count = detail::read_be32(images, 4);
  const int64_t rows = detail::read_be32(images, 8);
  const int64_t cols = detail::read_be32(images, 12);
  CLEAVE_CHECK_ARG(rows > 0 && cols > 0 && rows <= 65536 && cols <= 65536,
                   "{}: file '{}' is corrupt: its header gives images of {} x {}; expected sides "
                   "in [1, 65536] (28 x 28 for MNIST)",
                   kSource, images_path, rows, cols);
  // 128-bit: a corrupt header's count x rows x cols can overflow 64 bits.
  const __int128 expected = __int128{16} + __int128{count} * rows * cols;
  CLEAVE_CHECK_ARG(static_cast<__int128>(images.size()) == expected,
                   "{}: file '{}' is truncated or corrupt: {} bytes; expected {} (16-byte header "
                   "+ {} images of {} x {})",
                   kSource, images_path, images.size(), static_cast<double>(expected), count, rows,
                   cols);
  if (!data.pixels.empty()) {
    CLEAVE_CHECK_ARG(rows == data.rows && cols == data.cols,
                     "{}: file '{}' has images of {} x {}; expected {} x {} like the other set",
                     kSource, images_path, rows, cols, data.rows, data.cols);
  }
  data.rows = rows;
  data.cols = cols;

  const std::vector<uint8_t> labels = detail::read_file(kSource, labels_path);
  CLEAVE_CHECK_ARG(labels.size() >= 8,
                   "{}: file '{}' is truncated: {} bytes; an IDX label file has an 8-byte header",
                   kSource, labels_path, labels.size());
  const uint32_t label_magic = detail::read_be32(labels, 0);
  CLEAVE_CHECK_ARG(label_magic == kLabelMagic,
                   "{}: file '{}' has magic number 0x{:08x}; expected 0x{:08x} (IDX labels, "
                   "unsigned bytes, 1 dim)",
                   kSource, labels_path, label_magic, kLabelMagic);
  const int64_t label_count = detail::read_be32(labels, 4);
  CLEAVE_CHECK_ARG(label_count == count,
                   "{}: file '{}' holds {} labels but '{}' holds {} images; expected equal counts",
                   kSource, labels_path, label_count, images_path, count);
  CLEAVE_CHECK_ARG(static_cast<int64_t>(labels.size()) == 8 + count,
                   "{}: file '{}' is truncated or corrupt: {} bytes; expected {} (8-byte header + "
                   "{} labels)",
                   kSource, labels_path, labels.size(), 8 + count, count);
  for (int64_t i = 0; i < count; ++i) {
    const int label = labels[8 + i];
    CLEAVE_CHECK_ARG(label < kNumClasses,
                     "{}: file '{}' has label {} at index {}; expected a label in [0, {})", kSource,
                     labels_path, label, i, kNumClasses);
    data.labels.push_back(label);
  }
  data.pixels.insert(data.pixels.end(), images.begin() + 16, images.end());
}

}  // namespace

DatasetPtr MnistDataset(const std::string& dir, MnistOptions options) {
  detail::check_source_options(kSource, options);
  CLEAVE_CHECK_ARG(options.usage == "train" || options.usage == "test" || options.usage == "all",
                   "{}: usage is '{}'; expected 'train', 'test' or 'all'", kSource, options.usage);
  detail::check_folder(kSource, dir);
  struct Set {
    std::string usage, images, labels;
  };
  const Set sets[] = {{"train", dir + "/train-images-idx3-ubyte", dir + "/train-labels-idx1-ubyte"},
                      {"test", dir + "/t10k-images-idx3-ubyte", dir + "/t10k-labels-idx1-ubyte"}};
  auto data = std::make_shared<MnistData>();
  bool found = false;
  for (const Set& set : sets) {
    if (options.usage != "all" && options.usage != set.usage) continue;
    const bool present = detail::file_exists(set.images) || detail::file_exists(set.labels);
    if (!present && options.usage == "all") continue;
    read_set(set.images, set.labels, *data);
    found = true;
  }
  CLEAVE_CHECK_ARG(found,
                   "{}: folder '{}' holds no MNIST files; expected train-images-idx3-ubyte and "
                   "train-labels-idx1-ubyte, or t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte",
                   kSource, dir);

  const int64_t size = static_cast<int64_t>(data->labels.size());
  // Decodes only the needed columns (NOTE [Column projection]).
  auto get_row = [data](int64_t i, const ColumnMask& needed) -> Row {
    Row row(2);
    if (needed[0]) {
      const int64_t pixels = data->rows * data->cols;
      row[0] = Tensor::empty(Shape{data->rows, data->cols, 1}, DType::kFloat32);
      float* out = row[0].data<float>();
      const uint8_t* in = data->pixels.data() + i * pixels;
      for (int64_t k = 0; k < pixels; ++k) out[k] = static_cast<float>(in[k]);
    }
    if (needed[1]) {
      row[1] = Tensor::empty(Shape{}, DType::kInt32);
      *row[1].data<int32_t>() = data->labels[static_cast<size_t>(i)];
    }
    return row;
  };
  return std::make_shared<detail::IndexedSource>(
      kSource, std::vector<std::string>{"image", "label"}, size, std::move(get_row), options);
}

}  // namespace cleave::dataset
