#include "cleave/train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "checkpoint.pb.h"  // the generated reference (tests/CMakeLists.txt)
#include "testing/gradcheck.h"
#include "train/checkpoint_names.h"
#include "train/crc32c.h"
#include "train/train_testing.h"

namespace cleave::train {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    path_ =
        fs::temp_directory_path() / fmt::format("cleave_ckpt_test_{}_{}", ::getpid(), counter_++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

NamedTensors sample_tensors() {
  return {{"w", Tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e-3f}, {2, 3})},
          {"d", Tensor::from_vector<double>({0.1, 1e300})},
          {"i32", Tensor::from_vector<int32_t>({-7, 5, 2147483647}, {3, 1})},
          {"i64", Tensor::scalar(123456789012.0, DType::kInt64)},
          {"b", Tensor::from_vector<bool>({true, false, true})},
          {"empty", Tensor::zeros({0, 4})}};
}

void expect_same(const ParamMap& loaded, const NamedTensors& saved) {
  ASSERT_EQ(loaded.size(), saved.size());
  for (const auto& [name, t] : saved) {
    ASSERT_TRUE(loaded.count(name)) << name;
    const Tensor& l = loaded.at(name);
    EXPECT_EQ(l.dtype(), t.dtype()) << name;
    EXPECT_EQ(l.shape(), t.shape()) << name;
    EXPECT_EQ(l.to_double_vector(), t.to_double_vector()) << name;
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class CheckpointFormats : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointFormats, RoundTripsEveryDtype) {
  TempDir dir;
  const std::string path = dir / ("a." + GetParam());
  save_checkpoint(sample_tensors(), path);
  expect_same(load_checkpoint(path), sample_tensors());
  // Only the file itself is left: no temporary files.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST_P(CheckpointFormats, SaveReplacesTheFileAndLoadsIntoANet) {
  TempDir dir;
  const std::string path = dir / ("net." + GetParam());
  set_seed(1);
  testing::SmallNet a;
  save_checkpoint(sample_tensors(), path);
  save_checkpoint(a, path);  // overwrites
  set_seed(2);
  testing::SmallNet b;
  EXPECT_NE(b.fc1->weight.to_double_vector(), a.fc1->weight.to_double_vector());
  ParamMap params = load_checkpoint(path);
  params["extra"] = Tensor::ones({1});
  EXPECT_EQ(load_param_into_net(b, params), std::vector<std::string>{"extra"});
  for (const auto& [name, t] : a.parameters_and_names()) {
    EXPECT_EQ(params.at(name).to_double_vector(), t.to_double_vector()) << name;
  }
  EXPECT_EQ(b.fc1->weight.to_double_vector(), a.fc1->weight.to_double_vector());
  EXPECT_EQ(b.fc2->bias.to_double_vector(), a.fc2->bias.to_double_vector());
}

TEST_P(CheckpointFormats, TruncatedFilesAreClearErrors) {
  TempDir dir;
  const std::string path = dir / ("t." + GetParam());
  save_checkpoint(sample_tensors(), path);
  const std::string bytes = read_bytes(path);
  // Cut inside the data of the first tensor, in the middle, and one byte short of the end.
  for (size_t keep : {size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    write_bytes(path, bytes.substr(0, keep));
    EXPECT_ERROR(load_checkpoint(path), "cannot load checkpoint '" + path + "'");
  }
  // A 0-byte file (an empty protobuf message would parse as a checkpoint of no tensors).
  write_bytes(path, "");
  EXPECT_ERROR(load_checkpoint(path), "cannot load checkpoint '" + path + "'",
               "the file is empty (0 bytes)");
}

// Every prefix of a checkpoint, and 500 seeded random corruptions of it (bytes overwritten,
// runs deleted or repeated), either load or throw cleave's Error naming the file: never a crash,
// another exception type or a hang. (The fuzzers of fuzz/ go further; this runs in every build.)
TEST_P(CheckpointFormats, EveryCutAndCorruptionIsAnErrorOrALoad) {
  TempDir dir;
  const std::string path = dir / ("c." + GetParam());
  save_checkpoint(sample_tensors(), path, {{"cleave.rank", "0"}});
  const std::string bytes = read_bytes(path);
  const auto try_load = [&](const std::string& content) {
    write_bytes(path, content);
    try {
      load_checkpoint(path);
      load_checkpoint_metadata(path);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  for (size_t keep = 0; keep < bytes.size(); ++keep) try_load(bytes.substr(0, keep));
  std::mt19937 random(7);
  for (int i = 0; i < 500; ++i) {
    std::string c = bytes;
    const size_t at = random() % c.size();
    const size_t n = 1 + random() % 8;
    switch (random() % 3) {
      case 0:
        for (size_t k = at; k < std::min(c.size(), at + n); ++k) c[k] = static_cast<char>(random());
        break;
      case 1:
        c.erase(at, n);
        break;
      default:
        c.insert(at, c.substr(at, n));
        break;
    }
    try_load(c);
  }
}

TEST_P(CheckpointFormats, AFlippedBitIsAChecksumError) {
  TempDir dir;
  const std::string path = dir / ("f." + GetParam());
  save_checkpoint(sample_tensors(), path);
  const std::string bytes = read_bytes(path);
  // The last float of "w" (-1e-3f) sits in the data, whatever the format: flip one bit of it.
  const float value = -1e-3f;
  const std::string pattern(reinterpret_cast<const char*>(&value), sizeof value);
  const size_t at = bytes.find(pattern);
  ASSERT_NE(at, std::string::npos);
  std::string flipped = bytes;
  flipped[at + 1] = static_cast<char>(flipped[at + 1] ^ 0x10);
  write_bytes(path, flipped);
  EXPECT_ERROR(load_checkpoint(path), "cannot load checkpoint '" + path + "'",
               "does not match its checksum", "the file is corrupt");
  write_bytes(path, bytes);
  expect_same(load_checkpoint(path), sample_tensors());
}

TEST_P(CheckpointFormats, NonFiniteValuesAreRefusedOnRequest) {
  TempDir dir;
  const std::string path = dir / ("n." + GetParam());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const NamedTensors tensors = {
      {"ok", Tensor::from_vector<float>({1.0f, 2.0f})},
      {"fc.weight", Tensor::from_vector<float>({1.0f, nan, 3.0f, nan}, {2, 2})},
      {"steps", Tensor::from_vector<int32_t>({1})}};
  save_checkpoint(tensors, path);
  // Loaded as saved by default (MindSpore's behaviour).
  EXPECT_TRUE(std::isnan(load_checkpoint(path).at("fc.weight").to_double_vector()[1]));
  EXPECT_ERROR(load_checkpoint(path, {.non_finite = NonFinite::kRefuse}),
               "cannot load checkpoint '" + path + "'",
               "tensor 'fc.weight' (Float32 (2, 2)) holds 2 non-finite value(s)",
               "the first nan at flat index 1", "NonFinite::kRefuse");
  save_checkpoint({{"d", Tensor::from_vector<double>({-std::numeric_limits<double>::infinity()})}},
                  path);
  EXPECT_ERROR(load_checkpoint(path, {.non_finite = NonFinite::kRefuse}), "tensor 'd'",
               "the first -inf at flat index 0");
  save_checkpoint(sample_tensors(), path);
  expect_same(load_checkpoint(path, {.non_finite = NonFinite::kRefuse}), sample_tensors());
}

INSTANTIATE_TEST_SUITE_P(Train, CheckpointFormats, ::testing::Values("ckpt", "safetensors"));

TEST(Checkpoint, CkptIsMindSporesProtobufLayout) {
  TempDir dir;
  const std::string path = dir / "one.ckpt";
  save_checkpoint({{"fc.bias", Tensor::from_vector<float>({1.0f, 2.0f})}}, path);
  // Hand-encoded Checkpoint{value{tag:"fc.bias" tensor{dims:2 tensor_type:"Float32"
  // tensor_content:<8 bytes>}}}.
  const std::string content("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  const std::string tensor = std::string("\x08\x02", 2) +
                             "\x12\x07"
                             "Float32" +
                             "\x1a\x08" + content;
  const std::string value = std::string("\x0a\x07") + "fc.bias" + "\x12" +
                            std::string(1, static_cast<char>(tensor.size())) + tensor;
  // The checksum first: field 100 (fixed32) = CRC32C of "fc.bias\0Float32\0", the dim 2 as an
  // int64 and the content (0x5fffc53b, computed independently).
  const std::string crc("\xa5\x06\x3b\xc5\xff\x5f", 6);
  const std::string expected =
      crc + std::string("\x0a") + std::string(1, static_cast<char>(value.size())) + value;
  EXPECT_EQ(read_bytes(path), expected);
  // Without the checksum (a file of MindSpore or of an older cleave) it loads unchecked.
  write_bytes(path, expected.substr(crc.size()));
  EXPECT_EQ(load_checkpoint(path).at("fc.bias").to_double_vector(), (std::vector<double>{1, 2}));
}

// The hand-written writer and reader (NOTE [Encoding .ckpt by hand]) against protobuf's generated
// classes: what cleave writes parses as a Checkpoint message with every tensor, dtype, shape,
// byte and metadata entry; what protobuf serializes (fields in its own order: the checksum last)
// loads in cleave.
TEST(Checkpoint, CkptWriterAndReaderAgreeWithProtobuf) {
  TempDir dir;
  const std::string path = dir / "p.ckpt";
  const NamedTensors tensors = {
      {"w", Tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e-3f}, {2, 3})},
      {"step", Tensor::from_vector<int64_t>({1234567890123LL})},
      {"flags", Tensor::from_vector<bool>({true, false, true})},
      {"big", Tensor::ones({300, 2}, DType::kFloat64)}};
  save_checkpoint(tensors, path, {{"cleave.rank", "3"}, {"note", "x"}});
  proto::Checkpoint ckpt;
  ASSERT_TRUE(ckpt.ParseFromString(read_bytes(path)));
  ASSERT_EQ(ckpt.value_size(), 4);
  for (int i = 0; i < 4; ++i) {
    const auto& [name, t] = tensors[static_cast<size_t>(i)];
    const auto& v = ckpt.value(i);
    EXPECT_EQ(v.tag(), name);
    EXPECT_EQ(std::vector<int64_t>(v.tensor().dims().begin(), v.tensor().dims().end()),
              t.shape().dims());
    EXPECT_EQ(v.tensor().tensor_content(),
              std::string(static_cast<const char*>(t.raw_data()), t.nbytes()));
  }
  EXPECT_EQ(ckpt.value(3).tensor().tensor_type(), "Float64");
  EXPECT_TRUE(ckpt.has_crc32c());
  ASSERT_EQ(ckpt.metadata_size(), 2);
  EXPECT_EQ(ckpt.metadata(0).key(), "cleave.rank");
  EXPECT_EQ(ckpt.metadata(0).value(), "3");
  EXPECT_EQ(load_checkpoint_metadata(path),
            (std::map<std::string, std::string>{{"cleave.rank", "3"}, {"note", "x"}}));
  // protobuf's own serialization (crc32c last) loads back, checksum verified.
  write_bytes(path, ckpt.SerializeAsString());
  expect_same(load_checkpoint(path), tensors);
}

TEST(Checkpoint, SafetensorsHeaderAndMetadata) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  save_checkpoint({{"x", Tensor::from_vector<float>({1.0f, 2.0f}, {1, 2})}}, path,
                  {{"format", "pt"}});
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 8);
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("x":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]})"),
            std::string::npos)
      << header;
  // The checksum is in the metadata, as other safetensors readers expect strings there, but
  // load_checkpoint_metadata leaves it out.
  EXPECT_NE(header.find(R"("cleave.crc32c":")"), std::string::npos) << header;
  EXPECT_EQ(load_checkpoint_metadata(path), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_ERROR(save_checkpoint({{"x", Tensor::ones({1})}}, path, {{"cleave.crc32c", "0"}}),
               "metadata key \"cleave.crc32c\" is reserved");
}

TEST(Checkpoint, CorruptFilesAreClearErrors) {
  TempDir dir;
  const std::string st = dir / "c.safetensors";
  save_checkpoint({{"x", Tensor::ones({2})}}, st);
  std::string bytes = read_bytes(st);
  // A header length past the end of the file.
  std::string bad = bytes;
  bad[0] = '\x7f';
  bad[3] = '\x01';
  write_bytes(st, bad);
  EXPECT_ERROR(load_checkpoint(st), st, "header length", "truncated");
  // Not JSON.
  bad = bytes;
  bad[8] = '[';
  write_bytes(st, bad);
  EXPECT_ERROR(load_checkpoint(st), st, "not a JSON object");
  // An unknown dtype and wrong offsets.
  const std::string header = R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  std::string f16(8, '\0');
  f16[0] = static_cast<char>(header.size());
  write_bytes(st, f16 + header + std::string(4, '\0'));
  EXPECT_ERROR(load_checkpoint(st), st, "'x' has dtype 'F16'", "F32");
  const std::string header2 = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  std::string len2(8, '\0');
  len2[0] = static_cast<char>(header2.size());
  write_bytes(st, len2 + header2 + std::string(8, '\0'));
  EXPECT_ERROR(load_checkpoint(st), st, "tensor 'x' (Float32 (3)) has 8 bytes", "expected 12");
  // Another tool's file without a checksum loads unchecked; a malformed checksum is an error.
  const std::string header3 = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string len3(8, '\0');
  len3[0] = static_cast<char>(header3.size());
  write_bytes(st, len3 + header3 + std::string(8, '\0'));
  EXPECT_EQ(load_checkpoint(st).at("x").to_double_vector(), (std::vector<double>{0, 0}));
  const std::string header4 =
      R"({"__metadata__":{"cleave.crc32c":"xyz"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string len4(8, '\0');
  len4[0] = static_cast<char>(header4.size());
  write_bytes(st, len4 + header4 + std::string(8, '\0'));
  EXPECT_ERROR(load_checkpoint(st), st, "metadata \"cleave.crc32c\" is \"xyz\"", "8 lowercase hex");

  const std::string ck = dir / "c.ckpt";
  write_bytes(ck, "this is not a protobuf message at all");
  EXPECT_ERROR(load_checkpoint(ck), ck, "not a valid .ckpt file");
  EXPECT_ERROR(load_checkpoint(dir / "missing.ckpt"), "cannot load checkpoint", "missing.ckpt",
               "No such file");
  EXPECT_ERROR(load_checkpoint(dir / "x.pt"), "x.pt", "unknown format", ".ckpt", ".safetensors");
  EXPECT_ERROR(save_checkpoint({{"x", Tensor::ones({1})}}, dir / "x.bin"), "unknown format");
}

TEST(Checkpoint, LatestCheckpointIsTheNewestByEpochThenStep) {
  TempDir dir;
  EXPECT_ERROR(latest_checkpoint(dir / "missing", "lenet"), "latest_checkpoint",
               "missing' is not a folder");
  EXPECT_ERROR(latest_checkpoint(dir.path().string(), "lenet"), "holds no checkpoint",
               "'lenet-<epoch>_<step>.ckpt'");
  for (const char* name : {"lenet-1_10.ckpt", "lenet-2_1.safetensors", "lenet-10_1.ckpt",
                           "lenet-10_3.ckpt", "other-99_9.ckpt", "lenet-11_1.bin"}) {
    write_bytes(dir / name, "x");
  }
  EXPECT_EQ(latest_checkpoint(dir.path().string(), "lenet"), dir / "lenet-10_3.ckpt");
  EXPECT_EQ(latest_checkpoint(dir.path().string(), "other"), dir / "other-99_9.ckpt");
}

TEST(Checkpoint, SaveChecksNamesAndFolder) {
  TempDir dir;
  EXPECT_ERROR(
      save_checkpoint({{"a", Tensor::ones({1})}, {"a", Tensor::ones({1})}}, dir / "d.ckpt"),
      "the name 'a' is given twice");
  EXPECT_ERROR(save_checkpoint({{"", Tensor::ones({1})}}, dir / "d.ckpt"), "empty name");
  EXPECT_ERROR(save_checkpoint({{"a", Tensor()}}, dir / "d.ckpt"), "tensor 'a' is undefined");
  EXPECT_ERROR(save_checkpoint({{"a", Tensor::ones({1})}}, dir / "no/such/d.ckpt"), "the folder",
               "does not exist");
  EXPECT_FALSE(fs::exists(dir / "d.ckpt"));
}

TEST(Checkpoint, FailedSaveLeavesThePreviousFile) {
  TempDir dir;
  const std::string path = dir / "keep.ckpt";
  save_checkpoint({{"a", Tensor::ones({3})}}, path);
  const std::string before = read_bytes(path);
  // A save that fails its checks never touches the file.
  EXPECT_ERROR(save_checkpoint({{"a", Tensor::ones({3})}, {"a", Tensor::ones({1})}}, path),
               "given twice");
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(Checkpoint, LoadParamIntoNetReportsEveryMismatch) {
  testing::SmallNet net;
  const std::vector<double> before = net.fc1->weight.to_double_vector();
  ParamMap params;
  params["fc1.weight"] = Tensor::zeros({8, 5});              // wrong shape
  params["fc1.bias"] = Tensor::zeros({8}, DType::kFloat64);  // wrong dtype
  params["fc2.weight"] = Tensor::zeros({3, 8});              // fine; fc2.bias missing
  EXPECT_ERROR(load_param_into_net(net, params), "SmallNet", "3 problem(s), nothing was loaded",
               "'fc1.weight' is Float32 (8, 5) in the checkpoint but Float32 (8, 4) in the network",
               "'fc1.bias' is Float64 (8) in the checkpoint but Float32 (8)",
               "'fc2.bias' (Float32 (3)) is missing");
  EXPECT_EQ(net.fc1->weight.to_double_vector(), before);
  EXPECT_NE(net.fc2->weight.to_double_vector(), std::vector<double>(24, 0.0));
}

TEST(ModelCheckpoint, NamesFilesAndKeepsTheNewest) {
  TempDir dir;
  set_seed(1);
  auto net = std::make_shared<testing::SmallNet>();
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.05, 0.9);
  Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
  auto ckpt = std::make_shared<ModelCheckpoint>(
      CheckpointConfig{.save_checkpoint_steps = 2, .keep_checkpoint_max = 3}, "lenet",
      dir / "ckpt");
  // 3 epochs of 3 steps: saves at global steps 2, 4, 6, 8 and at the end (9).
  model.train(3, testing::blobs_dataset(48, 16), {ckpt});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "ckpt")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  // Each file with its commit marker (NOTE [Checkpoint sets]); the deleted files' markers go too.
  EXPECT_EQ(names, (std::vector<std::string>{"lenet-2_3.ckpt", "lenet-2_3.ckpt.commit",
                                             "lenet-3_2.ckpt", "lenet-3_2.ckpt.commit",
                                             "lenet-3_3.ckpt", "lenet-3_3.ckpt.commit"}));
  EXPECT_EQ(ckpt->latest_checkpoint(), dir / "ckpt/lenet-3_3.ckpt");
  const ParamMap saved = load_checkpoint(ckpt->latest_checkpoint());
  EXPECT_EQ(saved.at("step_num").item(), 9);
  EXPECT_EQ(saved.at("epoch_num").item(), 3);
  EXPECT_EQ(saved.at("global_step").item(), 9);
  EXPECT_TRUE(saved.count("moments.fc1.weight"));
  EXPECT_EQ(saved.at("fc2.bias").to_double_vector(), net->fc2->bias.to_double_vector());
  EXPECT_ERROR(ModelCheckpoint(CheckpointConfig{.save_checkpoint_steps = 0}),
               "save_checkpoint_steps is 0");
  EXPECT_ERROR(ModelCheckpoint(CheckpointConfig{.keep_checkpoint_max = 0}),
               "keep_checkpoint_max is 0");
  EXPECT_ERROR(ModelCheckpoint(CheckpointConfig{.format = "pt"}), "format is 'pt'");
}

}  // namespace
TEST(CheckpointNames, SavedNamesReadBackAndOthersAreNot) {
  const SavedName saved[] = {{"lenet", 1, 5, "ckpt"}, {"lenet-v2_a", 10, 3, "safetensors"}};
  for (const SavedName& want : saved) {
    const std::string name =
        fmt::format("{}-{}_{}.{}", want.prefix, want.epoch, want.step, want.format);
    const std::optional<SavedName> got = parse_saved_name(name);
    ASSERT_TRUE(got) << name;
    EXPECT_EQ(got->prefix, want.prefix) << name;
    EXPECT_EQ(got->epoch, want.epoch) << name;
    EXPECT_EQ(got->step, want.step) << name;
    EXPECT_EQ(got->format, want.format) << name;
  }
  for (const char* other :
       {"lenet-1_5.txt", "lenet-x_5.ckpt", "-1_2.ckpt", "lenet-1_.ckpt", "lenet-_1.ckpt",
        "lenet1_5.ckpt", "lenet-1-5.ckpt", "lenet-99999999999999999999_1.ckpt", "ckpt", ""}) {
    EXPECT_FALSE(parse_saved_name(other)) << other;
  }
}

// The three-stream instruction path (NOTE [Three CRC streams]) against the one-byte table, on
// lengths around its 768-byte and 24 KiB blocks, at every alignment, whole and in two calls.
TEST(Crc32c, ThreeStreamsEqualTheTableAtEveryLengthAndSplit) {
  {
    Crc32c check;
    check.update("123456789", 9);
    EXPECT_EQ(check.value(), 0xE3069283u);  // CRC32C's published check value
  }
  std::mt19937 rng(7);
  std::vector<unsigned char> data(3 * 8192 * 2 + 64);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths = {0,   1,   7,    8,     9,     255,   767,
                                 768, 769, 4096, 24575, 24576, 24577, data.size() - 64};
  for (int i = 0; i < 30; ++i) lengths.push_back(rng() % (data.size() - 64));
  for (const size_t n : lengths) {
    for (size_t align = 0; align < 8; ++align) {
      const unsigned char* p = data.data() + align;
      Crc32c fast, table, split;
      fast.update(p, n);
      table.update_bytewise(p, n);
      const size_t cut = n / 3;
      split.update(p, cut);
      split.update(p + cut, n - cut);
      EXPECT_EQ(fast.value(), table.value()) << "length " << n << ", alignment " << align;
      EXPECT_EQ(split.value(), table.value()) << "length " << n << " cut at " << cut;
    }
  }
}

}  // namespace cleave::train
