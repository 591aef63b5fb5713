// Vision and common transforms of cleave/data/transforms.h. Each runs on the dataset's own
// threads (one row at a time), so the loops are plain and single-threaded.
#include "cleave/data/transforms.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "cleave/data/dataset.h"
#include "data/nodes.h"

namespace cleave::dataset {

namespace {

struct ImageDims {
  int64_t h, w, c;
};

// (H, W, C) or (H, W) as one channel.
ImageDims image_dims(const char* transform, const Tensor& image) {
  CLEAVE_CHECK_ARG(image.defined(), "{}: the image is an undefined tensor", transform);
  CLEAVE_CHECK_ARG(image.rank() == 3 || image.rank() == 2,
                   "{}: the image has shape {}; expected (H, W, C) or (H, W)", transform,
                   image.shape().to_string());
  return {image.dim(0), image.dim(1), image.rank() == 3 ? image.dim(2) : 1};
}

Shape image_shape(const Tensor& like, int64_t h, int64_t w, int64_t c) {
  return like.rank() == 3 ? Shape{h, w, c} : Shape{h, w};
}

Tensor cast_to(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype);
  const int64_t n = x.numel();
  CLEAVE_DISPATCH_ALL(x.dtype(), [&] {
    using In = T;
    const In* in = x.data<In>();
    CLEAVE_DISPATCH_ALL(dtype, [&] {
      T* o = out.data<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(in[i]);
    });
  });
  return out;
}

// Source index i0, i1 and the weight of i1 for output index i (NOTE [Resize coordinate mapping]
// of the resize kernels: half-pixel centres, clamped at 0; the same float arithmetic).
struct Tap {
  int64_t i0, i1;
  float w1;
};
Tap linear_tap(int64_t i, int64_t in, int64_t out) {
  double s = static_cast<double>((2 * i + 1) * in - out) / static_cast<double>(2 * out);
  s = std::max(s, 0.0);
  Tap t;
  t.i0 = std::min(static_cast<int64_t>(std::floor(s)), in - 1);
  t.i1 = std::min(t.i0 + 1, in - 1);
  t.w1 = static_cast<float>(s - static_cast<double>(t.i0));
  return t;
}
int64_t nearest_tap(int64_t i, int64_t in, int64_t out) {
  return std::min((2 * i + 1) * in / (2 * out), in - 1);
}

// The linear taps of every output index along one dim, as int32 indices (so that the column loop
// compiles to 8-wide gathers) and both weights. Kept per thread for the last (in, out) seen: a
// map applies one Resize to images of one size, and computing the taps (a division and a floor
// each) cost more than the interpolation itself.
//
// For one channel the table also cuts the outputs into groups of 8 whose first taps (i0) lie
// within the 8 source elements from a `base` and whose second taps (i1) within the 8 from
// base + 1. That holds for any upsampling, e.g. seed 000's 28 -> 32, whose taps repeat every 8
// outputs over 7 inputs. When every group has one (`permutable`), the image is resized without
// gathers: per output row and group, the two windows of the blended source row are computed in
// registers and the taps picked with two permutes (vpermps).
struct TapTable {
  int64_t in = -1, out = -1;
  std::vector<int32_t> i0, i1;
  std::vector<float> w0, w1;
  bool permutable = false;
  std::vector<int32_t> base;    // per group of 8 outputs
  std::vector<int32_t> p0, p1;  // per output: i0 - base, i1 - (base + 1)
  std::vector<int32_t> m0, m1;  // per output lane: -1 where base (+ 1) + lane < in, else 0
};

const TapTable& linear_table(TapTable& table, int64_t in, int64_t out) {
  if (table.in == in && table.out == out) return table;
  table.i0.resize(out);
  table.i1.resize(out);
  table.w0.resize(out);
  table.w1.resize(out);
  for (int64_t i = 0; i < out; ++i) {
    const Tap t = linear_tap(i, in, out);
    table.i0[i] = static_cast<int32_t>(t.i0);
    table.i1[i] = static_cast<int32_t>(t.i1);
    table.w1[i] = t.w1;
    table.w0[i] = 1.0f - t.w1;
  }
  const int64_t groups = out / 8;
  table.permutable = groups * 8 == out;
  table.base.assign(groups, 0);
  for (auto* v : {&table.p0, &table.p1, &table.m0, &table.m1}) v->assign(groups * 8, 0);
  for (int64_t g = 0; g < groups; ++g) {
    const int32_t base = table.i0[g * 8];
    table.base[g] = base;
    for (int64_t lane = 0; lane < 8; ++lane) {
      const int64_t k = g * 8 + lane;
      table.p0[k] = table.i0[k] - base;
      table.p1[k] = table.i1[k] - base - 1;
      table.permutable = table.permutable && table.p0[k] >= 0 && table.p0[k] < 8 &&
                         table.p1[k] >= 0 && table.p1[k] < 8;
      table.m0[k] = base + lane < in ? -1 : 0;
      table.m1[k] = base + 1 + lane < in ? -1 : 0;
    }
  }
  table.in = in;
  table.out = out;
  return table;
}

// Per-thread scratch for Resize: the tap tables of rows and columns and one blended source row.
struct ResizeScratch {
  TapTable rows, cols;
  std::vector<float> row;
};
thread_local ResizeScratch t_resize;

// Bilinear in two passes as the kernel: the two source rows into one row (contiguous), then
// across it at the output columns. One channel (MNIST) gathers from the row directly; more
// channels interpolate each pixel's channels together.
void resize_bilinear_hwc(const float* in, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                         float* y) {
  ResizeScratch& s = t_resize;
  const TapTable& rows = linear_table(s.rows, h, oh);
  const TapTable& cols = linear_table(s.cols, w, ow);
  const int64_t width = w * c;
#if defined(__AVX2__) && defined(__FMA__)
  if (c == 1 && cols.permutable) {
    // The arithmetic of the loops below, in the same order: row = fma(a, r0, b * r1), then
    // out = fma(w0, row[i0], w1 * row[i1]). Masked loads read nothing past the source row.
    const auto lanes = [](const std::vector<int32_t>& v, int64_t g) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v.data() + g * 8));
    };
    // Group by group, so that its taps, masks and weights stay in registers down the rows.
    for (int64_t g = 0; g < ow / 8; ++g) {
      const int64_t base = cols.base[g];
      const __m256i p0 = lanes(cols.p0, g), p1 = lanes(cols.p1, g);
      const __m256i m0 = lanes(cols.m0, g), m1 = lanes(cols.m1, g);
      const __m256 w0 = _mm256_loadu_ps(cols.w0.data() + g * 8);
      const __m256 w1 = _mm256_loadu_ps(cols.w1.data() + g * 8);
      for (int64_t i = 0; i < oh; ++i) {
        const float* r0 = in + rows.i0[i] * w + base;
        const float* r1 = in + rows.i1[i] * w + base;
        const __m256 a = _mm256_set1_ps(rows.w0[i]), b = _mm256_set1_ps(rows.w1[i]);
        const __m256 row0 = _mm256_fmadd_ps(a, _mm256_maskload_ps(r0, m0),
                                            _mm256_mul_ps(b, _mm256_maskload_ps(r1, m0)));
        const __m256 row1 = _mm256_fmadd_ps(a, _mm256_maskload_ps(r0 + 1, m1),
                                            _mm256_mul_ps(b, _mm256_maskload_ps(r1 + 1, m1)));
        const __m256 x0 = _mm256_permutevar8x32_ps(row0, p0);
        const __m256 x1 = _mm256_permutevar8x32_ps(row1, p1);
        _mm256_storeu_ps(y + i * ow + g * 8, _mm256_fmadd_ps(w0, x0, _mm256_mul_ps(w1, x1)));
      }
    }
    return;
  }
#endif
  if (static_cast<int64_t>(s.row.size()) < width) s.row.resize(width);
  float* __restrict row = s.row.data();
  const int32_t* __restrict c0 = cols.i0.data();
  const int32_t* __restrict c1 = cols.i1.data();
  const float* __restrict cw0 = cols.w0.data();
  const float* __restrict cw1 = cols.w1.data();
  for (int64_t i = 0; i < oh; ++i) {
    const float* __restrict r0 = in + rows.i0[i] * width;
    const float* __restrict r1 = in + rows.i1[i] * width;
    const float a = rows.w0[i], b = rows.w1[i];
#pragma omp simd
    for (int64_t k = 0; k < width; ++k) row[k] = a * r0[k] + b * r1[k];
    float* __restrict o = y + i * ow * c;
    if (c == 1) {
#pragma omp simd
      for (int64_t j = 0; j < ow; ++j) o[j] = cw0[j] * row[c0[j]] + cw1[j] * row[c1[j]];
      continue;
    }
    for (int64_t j = 0; j < ow; ++j) {
      const float* p0 = row + c0[j] * c;
      const float* p1 = row + c1[j] * c;
      const float w0 = cw0[j], w1 = cw1[j];
      for (int64_t ch = 0; ch < c; ++ch) o[j * c + ch] = w0 * p0[ch] + w1 * p1[ch];
    }
  }
}

}  // namespace

namespace vision {

// ---- Resize ----

Resize::Resize(std::vector<int64_t> size, Inter interpolation)
    : size_(std::move(size)), interpolation_(interpolation) {
  CLEAVE_CHECK_ARG(size_.size() == 1 || size_.size() == 2,
                   "Resize: size has {} values; expected 1 (shorter side) or 2 (height, width)",
                   size_.size());
  for (int64_t s : size_) {
    CLEAVE_CHECK_ARG(s > 0, "Resize: size value {} is not positive; expected > 0", s);
  }
}

Tensor Resize::operator()(const Tensor& image) const {
  const ImageDims d = image_dims("Resize", image);
  int64_t oh, ow;
  if (size_.size() == 2) {
    oh = size_[0];
    ow = size_[1];
  } else if (d.h <= d.w) {
    oh = size_[0];
    ow = std::max<int64_t>(1, d.w * size_[0] / d.h);
  } else {
    ow = size_[0];
    oh = std::max<int64_t>(1, d.h * size_[0] / d.w);
  }
  const Tensor x = cast_to(image, DType::kFloat32);
  const float* in = x.data<float>();
  Tensor out = Tensor::empty(image_shape(image, oh, ow, d.c), DType::kFloat32);
  float* y = out.data<float>();
  const int64_t c = d.c;
  if (interpolation_ == Inter::kNearest) {
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t si = nearest_tap(i, d.h, oh);
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t sj = nearest_tap(j, d.w, ow);
        std::memcpy(y + (i * ow + j) * c, in + (si * d.w + sj) * c, sizeof(float) * c);
      }
    }
    return out;
  }
  resize_bilinear_hwc(in, d.h, d.w, c, oh, ow, y);
  return out;
}

// ---- Rescale ----

Rescale::Rescale(double rescale, double shift) : rescale_(rescale), shift_(shift) {}

Tensor Rescale::operator()(const Tensor& image) const {
  CLEAVE_CHECK_ARG(image.defined(), "Rescale: the input is an undefined tensor");
  // In place on a tensor map handed over (NOTE [Reusing a transform's input]) or a fresh cast.
  const bool handed_over = detail::can_reuse_input(image);
  Tensor x = cast_to(image, DType::kFloat32);
  const bool reuse = handed_over || x.impl() != image.impl();
  Tensor out = reuse ? x : Tensor::empty(x.shape(), DType::kFloat32);
  const float* in = x.data<float>();
  float* y = out.data<float>();
  const float scale = static_cast<float>(rescale_), shift = static_cast<float>(shift_);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) y[i] = in[i] * scale + shift;
  return out;
}

// ---- Normalize ----

Normalize::Normalize(std::vector<double> mean, std::vector<double> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  CLEAVE_CHECK_ARG(!mean_.empty() && mean_.size() == std_.size(),
                   "Normalize: mean has {} values and std {}; expected the same number (>= 1), "
                   "one per channel",
                   mean_.size(), std_.size());
  for (double s : std_) {
    CLEAVE_CHECK_ARG(s > 0, "Normalize: std value {} is not positive; expected > 0", s);
  }
}

Tensor Normalize::operator()(const Tensor& image) const {
  const ImageDims d = image_dims("Normalize", image);
  CLEAVE_CHECK_ARG(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == d.c,
                   "Normalize: the image has {} channels (shape {}) but mean and std have {} "
                   "values; expected one per channel",
                   d.c, image.shape().to_string(), mean_.size());
  // In place on a tensor map handed over (NOTE [Reusing a transform's input]) or a fresh cast.
  const bool handed_over = detail::can_reuse_input(image);
  Tensor x = cast_to(image, DType::kFloat32);
  const bool reuse = handed_over || x.impl() != image.impl();
  Tensor out = reuse ? x : Tensor::empty(x.shape(), DType::kFloat32);
  const float* in = x.data<float>();
  float* y = out.data<float>();
  std::vector<float> mean(static_cast<size_t>(d.c)), inv_std(static_cast<size_t>(d.c));
  for (int64_t ch = 0; ch < d.c; ++ch) {
    const size_t k = mean_.size() == 1 ? 0 : static_cast<size_t>(ch);
    mean[ch] = static_cast<float>(mean_[k]);
    inv_std[ch] = static_cast<float>(1.0 / std_[k]);
  }
  const int64_t pixels = d.h * d.w;
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t ch = 0; ch < d.c; ++ch) {
      y[p * d.c + ch] = (in[p * d.c + ch] - mean[ch]) * inv_std[ch];
    }
  }
  return out;
}

// ---- HWC2CHW ----

Tensor HWC2CHW::operator()(const Tensor& image) const {
  const ImageDims d = image_dims("HWC2CHW", image);
  // One channel: (H, W, 1) and (1, H, W) hold the same bytes in the same order.
  if (d.c == 1) return image.view(Shape{1, d.h, d.w});
  Tensor out = Tensor::empty(Shape{d.c, d.h, d.w}, image.dtype());
  const size_t elem = dtype_size(image.dtype());
  const auto* in = static_cast<const char*>(image.raw_data());
  auto* y = static_cast<char*>(out.raw_data());
  const int64_t pixels = d.h * d.w;
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t ch = 0; ch < d.c; ++ch) {
      std::memcpy(y + (ch * pixels + p) * elem, in + (p * d.c + ch) * elem, elem);
    }
  }
  return out;
}

// ---- RandomCrop ----

RandomCrop::RandomCrop(std::vector<int64_t> size, std::vector<int64_t> padding) {
  CLEAVE_CHECK_ARG(size.size() == 1 || size.size() == 2,
                   "RandomCrop: size has {} values; expected 1 (square) or 2 (height, width)",
                   size.size());
  height_ = size[0];
  width_ = size.size() == 2 ? size[1] : size[0];
  CLEAVE_CHECK_ARG(height_ > 0 && width_ > 0, "RandomCrop: size ({}, {}) is not positive", height_,
                   width_);
  switch (padding.size()) {
    case 0:
      break;
    case 1:
      pad_left_ = pad_top_ = pad_right_ = pad_bottom_ = padding[0];
      break;
    case 2:
      pad_left_ = pad_right_ = padding[0];
      pad_top_ = pad_bottom_ = padding[1];
      break;
    case 4:
      pad_left_ = padding[0];
      pad_top_ = padding[1];
      pad_right_ = padding[2];
      pad_bottom_ = padding[3];
      break;
    default:
      CLEAVE_FAIL(
          "RandomCrop: padding has {} values; expected 0, 1, 2 (left/right, top/bottom) or 4 "
          "(left, top, right, bottom)",
          padding.size());
  }
  for (int64_t p : {pad_left_, pad_top_, pad_right_, pad_bottom_}) {
    CLEAVE_CHECK_ARG(p >= 0, "RandomCrop: padding value {} is negative; expected >= 0", p);
  }
}

Tensor RandomCrop::operator()(const Tensor& image) const {
  const ImageDims d = image_dims("RandomCrop", image);
  const int64_t ph = d.h + pad_top_ + pad_bottom_, pw = d.w + pad_left_ + pad_right_;
  CLEAVE_CHECK_ARG(ph >= height_ && pw >= width_,
                   "RandomCrop: the padded image is {} x {} (shape {} plus padding); expected at "
                   "least the crop size {} x {}",
                   ph, pw, image.shape().to_string(), height_, width_);
  std::uniform_int_distribution<int64_t> pick_top(0, ph - height_), pick_left(0, pw - width_);
  const int64_t top = pick_top(transform_generator());
  const int64_t left = pick_left(transform_generator());
  Tensor out = Tensor::zeros(image_shape(image, height_, width_, d.c), image.dtype());
  const size_t pixel = dtype_size(image.dtype()) * static_cast<size_t>(d.c);
  const auto* in = static_cast<const char*>(image.raw_data());
  auto* y = static_cast<char*>(out.raw_data());
  // Output (i, j) is padded (top + i, left + j), i.e. source (top + i - pad_top, ...).
  for (int64_t i = 0; i < height_; ++i) {
    const int64_t si = top + i - pad_top_;
    if (si < 0 || si >= d.h) continue;
    const int64_t j0 = std::max<int64_t>(0, pad_left_ - left);
    const int64_t j1 = std::min<int64_t>(width_, d.w + pad_left_ - left);
    if (j1 <= j0) continue;
    const int64_t sj0 = left + j0 - pad_left_;
    std::memcpy(y + (i * width_ + j0) * pixel, in + (si * d.w + sj0) * pixel,
                pixel * static_cast<size_t>(j1 - j0));
  }
  return out;
}

// ---- RandomHorizontalFlip ----

RandomHorizontalFlip::RandomHorizontalFlip(double prob) : prob_(prob) {
  CLEAVE_CHECK_ARG(prob >= 0.0 && prob <= 1.0,
                   "RandomHorizontalFlip: prob is {}; expected a value in [0, 1]", prob);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& image) const {
  const ImageDims d = image_dims("RandomHorizontalFlip", image);
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  if (!(draw(transform_generator()) < prob_)) return image;
  Tensor out = Tensor::empty(image.shape(), image.dtype());
  const size_t pixel = dtype_size(image.dtype()) * static_cast<size_t>(d.c);
  const auto* in = static_cast<const char*>(image.raw_data());
  auto* y = static_cast<char*>(out.raw_data());
  for (int64_t i = 0; i < d.h; ++i) {
    for (int64_t j = 0; j < d.w; ++j) {
      std::memcpy(y + (i * d.w + j) * pixel, in + (i * d.w + (d.w - 1 - j)) * pixel, pixel);
    }
  }
  return out;
}

}  // namespace vision

namespace transforms {

TypeCast::TypeCast(DType dtype) : dtype_(dtype) {}

Tensor TypeCast::operator()(const Tensor& x) const {
  CLEAVE_CHECK_ARG(x.defined(), "TypeCast: the input is an undefined tensor");
  return cast_to(x, dtype_);
}

}  // namespace transforms

}  // namespace cleave::dataset
