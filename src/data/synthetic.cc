// Synthetic CIFAR-10 images, and the writers of both synthetic data sets in the real formats.
#include "cleave/data/synthetic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "cleave/core/error.h"
#include "data/nodes.h"
#include "data/synthetic_common.h"

namespace cleave::dataset::synthetic {

namespace {

// ---------------------------------------------------------------------------------------------
// CIFAR-10 stand-in. Class k is a shape with its own colour family and texture; `paint` returns
// the object's opacity at a point (x, y) relative to the object's centre, in units of its radius
// (rotated by the image's angle), and may change the colour (textures with two colours).
// ---------------------------------------------------------------------------------------------

struct Rgb {
  float r, g, b;
};

constexpr std::array<Rgb, 10> kClassColours = {{
    {220, 40, 40},    // 0 disc: red
    {40, 200, 60},    // 1 square: green
    {50, 80, 230},    // 2 triangle: blue
    {235, 220, 40},   // 3 horizontal stripes: yellow
    {210, 50, 200},   // 4 ring: magenta
    {40, 210, 220},   // 5 cross: cyan
    {245, 140, 30},   // 6 checkerboard: orange and black
    {245, 245, 245},  // 7 diagonal stripes: white
    {130, 50, 200},   // 8 diamond: purple
    {20, 20, 20},     // 9 vertical bars: black
}};

// Opacity of class `label` at (x, y) in object units; `second` is set for the dark squares of the
// checkerboard. `px`, `py` are image pixel coordinates for textures fixed to the pixel grid.
float paint(int label, double x, double y, double px, double py, bool& second) {
  const double ax = std::abs(x), ay = std::abs(y), r = std::hypot(x, y);
  second = false;
  switch (label) {
    case 0:
      return r < 1.0;
    case 1:
      return std::max(ax, ay) < 0.8;
    case 2:  // upward triangle
      return y < 0.7 && y > -0.9 && ax < (y + 0.9) * 0.62;
    case 3:
      return std::max(ax, ay) < 0.95 && static_cast<int>(std::floor(py / 2.5)) % 2 == 0;
    case 4:
      return r < 1.0 && r > 0.55;
    case 5:
      return (ax < 0.3 && ay < 1.0) || (ay < 0.3 && ax < 1.0);
    case 6:
      if (std::max(ax, ay) >= 0.9) return 0.0f;
      second = (static_cast<int>(std::floor(px / 3)) + static_cast<int>(std::floor(py / 3))) % 2;
      return 1.0f;
    case 7:
      return r < 1.3 && static_cast<int>(std::floor((px + py) / 3.0)) % 2 == 0 ? 0.85f : 0.0f;
    case 8:
      return ax + ay < 1.0;
    default:
      return std::max(ax, ay) < 0.9 && static_cast<int>(std::floor(px / 2.0)) % 2 == 0;
  }
}

void draw_cifar(int label, std::mt19937_64& rng, uint8_t* out) {
  constexpr int kSide = 32;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  // Background: a gradient between two random mid-range colours.
  Rgb c1{60 + 140 * u(rng), 60 + 140 * u(rng), 60 + 140 * u(rng)};
  Rgb c2{60 + 140 * u(rng), 60 + 140 * u(rng), 60 + 140 * u(rng)};
  const float direction = u(rng) * 6.2831853f;
  const float gx = std::cos(direction) / kSide, gy = std::sin(direction) / kSide;
  // Object: place, size, rotation, shade.
  const double cx = 11 + 10 * u(rng), cy = 11 + 10 * u(rng);
  const double radius = 7 + 5 * u(rng);
  const double angle = (label == 0 || label == 4 ? 0.0 : (u(rng) - 0.5) * 0.7);
  const double ca = std::cos(angle), sa = std::sin(angle);
  const float shade = 0.8f + 0.3f * u(rng);
  const Rgb base = kClassColours[label];
  const Rgb colour{std::clamp(base.r * shade + 30 * (u(rng) - 0.5f), 0.0f, 255.0f),
                   std::clamp(base.g * shade + 30 * (u(rng) - 0.5f), 0.0f, 255.0f),
                   std::clamp(base.b * shade + 30 * (u(rng) - 0.5f), 0.0f, 255.0f)};
  const Rgb dark{15, 15, 15};
  for (int py = 0; py < kSide; ++py) {
    for (int px = 0; px < kSide; ++px) {
      const float t = std::clamp(0.5f + (px - 16) * gx + (py - 16) * gy, 0.0f, 1.0f);
      Rgb p{c1.r + (c2.r - c1.r) * t, c1.g + (c2.g - c1.g) * t, c1.b + (c2.b - c1.b) * t};
      const double dx = (px + 0.5 - cx) / radius, dy = (py + 0.5 - cy) / radius;
      const double x = ca * dx + sa * dy, y = -sa * dx + ca * dy;
      bool second = false;
      const float alpha = paint(label, x, y, px, py, second);
      const Rgb& ink = second ? dark : colour;
      p = {p.r + (ink.r - p.r) * alpha, p.g + (ink.g - p.g) * alpha, p.b + (ink.b - p.b) * alpha};
      // Uniform noise of +-14 per channel from the bytes of one draw (cheap: 60k images).
      const uint64_t bits = rng();
      auto noisy = [bits](float v, int k) {
        const float n = (static_cast<float>((bits >> (8 * k)) & 0xff) - 127.5f) * (14.0f / 127.5f);
        return static_cast<uint8_t>(std::clamp(v + n, 0.0f, 255.0f));
      };
      uint8_t* o = out + (py * kSide + px) * 3;
      o[0] = noisy(p.r, 0);
      o[1] = noisy(p.g, 1);
      o[2] = noisy(p.b, 2);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Writers
// ---------------------------------------------------------------------------------------------

void put_be32(std::vector<uint8_t>& bytes, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(v >> shift));
}

// Writes `bytes` to path.tmp, then renames it to path.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    CLEAVE_CHECK_ARG(out.good(), "cleave-datagen: cannot create file '{}'", tmp);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.flush();
    CLEAVE_CHECK_ARG(out.good(), "cleave-datagen: cannot write file '{}' ({} bytes)", tmp,
                     bytes.size());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  CLEAVE_CHECK_ARG(!ec, "cleave-datagen: cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

void make_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  CLEAVE_CHECK_ARG(!ec, "cleave-datagen: cannot create folder '{}': {}", dir, ec.message());
}

void write_idx(const std::string& dir, const std::string& prefix, const Images& images) {
  std::vector<uint8_t> header;
  put_be32(header, 0x803);
  put_be32(header, static_cast<uint32_t>(images.count));
  put_be32(header, static_cast<uint32_t>(images.height));
  put_be32(header, static_cast<uint32_t>(images.width));
  header.insert(header.end(), images.pixels.begin(), images.pixels.end());
  write_file(dir + "/" + prefix + "-images-idx3-ubyte", header);
  std::vector<uint8_t> labels;
  put_be32(labels, 0x801);
  put_be32(labels, static_cast<uint32_t>(images.count));
  labels.insert(labels.end(), images.labels.begin(), images.labels.end());
  write_file(dir + "/" + prefix + "-labels-idx1-ubyte", labels);
}

// CIFAR records [first, last) of `images` (HWC) as one batch file (label, then R, G, B planes).
void write_cifar_batch(const std::string& path, const Images& images, int64_t first, int64_t last) {
  constexpr int64_t kPlane = 32 * 32;
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<size_t>((last - first) * (1 + 3 * kPlane)));
  for (int64_t i = first; i < last; ++i) {
    bytes.push_back(images.labels[i]);
    const uint8_t* image = images.pixels.data() + i * 3 * kPlane;
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t p = 0; p < kPlane; ++p) bytes.push_back(image[p * 3 + c]);
    }
  }
  write_file(path, bytes);
}

void check_counts(const char* what, int64_t train, int64_t test) {
  CLEAVE_CHECK_ARG(train >= 0 && test >= 0,
                   "cleave-datagen {}: --train {} and --test {}; expected counts >= 0", what, train,
                   test);
}

// Distinct streams for the train and test splits of one seed.
constexpr uint64_t kTrainStream = 0x7472'6169'6eULL;
constexpr uint64_t kTestStream = 0x7465'7374ULL;

}  // namespace

Images cifar10_images(int64_t count, uint64_t seed) {
  CLEAVE_CHECK_ARG(count >= 0, "cifar10_images: count is {}; expected >= 0", count);
  Images images{count,
                32,
                32,
                3,
                std::vector<uint8_t>(static_cast<size_t>(count) * 32 * 32 * 3),
                balanced_labels(count, seed)};
#pragma omp parallel for schedule(static, 64)
  for (int64_t i = 0; i < count; ++i) {
    std::mt19937_64 rng(detail::mix_seed(seed, static_cast<uint64_t>(i)));
    draw_cifar(images.labels[i], rng, images.pixels.data() + i * 32 * 32 * 3);
  }
  return images;
}

void write_mnist(const std::string& dir, int64_t train, int64_t test, uint64_t seed) {
  check_counts("mnist", train, test);
  const std::string root = dir + "/MNIST_Data";
  make_folder(root + "/train");
  make_folder(root + "/test");
  write_idx(root + "/train", "train", mnist_images(train, detail::mix_seed(seed, kTrainStream)));
  write_idx(root + "/test", "t10k", mnist_images(test, detail::mix_seed(seed, kTestStream)));
}

void write_cifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed) {
  check_counts("cifar10", train, test);
  const std::string root = dir + "/cifar-10-batches-bin";
  make_folder(root);
  const Images train_images = cifar10_images(train, detail::mix_seed(seed, kTrainStream));
  for (int64_t k = 0; k < 5; ++k) {
    write_cifar_batch(root + "/data_batch_" + std::to_string(k + 1) + ".bin", train_images,
                      train * k / 5, train * (k + 1) / 5);
  }
  write_cifar_batch(root + "/test_batch.bin",
                    cifar10_images(test, detail::mix_seed(seed, kTestStream)), 0, test);
}

}  // namespace cleave::dataset::synthetic
