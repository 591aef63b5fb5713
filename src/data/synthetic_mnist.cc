// Handwritten-looking digits for synthetic::mnist_images.
//
// A digit is a set of strokes (polylines) in the unit box, x to the right and y down. To draw one
// image we jitter every control point, map the box to pixels through a random affine map (the
// digit fills about 20 x 20 pixels centred in 28 x 28, as MNIST's), and rasterise each segment as
// a capsule of random half-width: a pixel's ink is max over segments of clamp(w + 0.5 - d, 0, 1),
// d its distance to the segment. Then pixel noise. Each image has its own generator, seeded from
// (seed, image index), so the images can be drawn in parallel and stay deterministic.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>

#include "cleave/core/error.h"
#include "cleave/data/synthetic.h"
#include "data/nodes.h"
#include "data/synthetic_common.h"

namespace cleave::dataset::synthetic {

namespace {

struct Point {
  double x, y;
};
using Stroke = std::vector<Point>;
using Glyph = std::vector<Stroke>;

constexpr double kPi = 3.14159265358979323846;

// Points on the ellipse arc (cx + rx cos t, cy + ry sin t), t from a0 to a1 degrees (y down:
// 270 is the top, 90 the bottom).
Stroke arc(double cx, double cy, double rx, double ry, double a0, double a1, int n = 14) {
  Stroke s;
  for (int i = 0; i <= n; ++i) {
    const double t = (a0 + (a1 - a0) * i / n) * kPi / 180.0;
    s.push_back({cx + rx * std::cos(t), cy + ry * std::sin(t)});
  }
  return s;
}

Stroke join(Stroke a, const Stroke& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::array<Glyph, 10>& glyphs() {
  static const std::array<Glyph, 10> g = {
      Glyph{arc(0.5, 0.5, 0.3, 0.42, 0, 360, 24)},
      Glyph{{{0.34, 0.26}, {0.52, 0.1}, {0.52, 0.9}}},
      Glyph{join(arc(0.5, 0.32, 0.28, 0.21, 195, 390), {{0.2, 0.9}, {0.82, 0.9}})},
      Glyph{join(arc(0.47, 0.3, 0.25, 0.19, 215, 450), arc(0.47, 0.7, 0.29, 0.21, 270, 510))},
      Glyph{{{0.66, 0.9}, {0.66, 0.1}, {0.14, 0.64}, {0.86, 0.64}}},
      Glyph{join({{0.76, 0.12}, {0.32, 0.12}}, arc(0.47, 0.65, 0.28, 0.23, 238, 510))},
      Glyph{join({{0.7, 0.1}, {0.47, 0.22}, {0.31, 0.42}}, arc(0.5, 0.68, 0.22, 0.21, 200, 560))},
      Glyph{{{0.18, 0.12}, {0.82, 0.12}, {0.42, 0.9}}},
      Glyph{arc(0.5, 0.29, 0.19, 0.18, 0, 360, 18), arc(0.5, 0.7, 0.23, 0.21, 0, 360, 20)},
      Glyph{arc(0.5, 0.32, 0.22, 0.2, 0, 360, 20), {{0.72, 0.32}, {0.62, 0.9}}},
  };
  return g;
}

void draw_digit(int label, std::mt19937_64& rng, uint8_t* out) {
  constexpr int kSide = 28;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::normal_distribution<double> jitter(0.0, 0.012);
  // A smooth warp of the box (a wavy, uneven hand), then independent jitter of the points.
  const double wx = 0.035 * u(rng), wy = 0.035 * u(rng);
  const double fx = 0.6 + 0.5 * (u(rng) + 1.0), fy = 0.6 + 0.5 * (u(rng) + 1.0);
  const double phx = kPi * u(rng), phy = kPi * u(rng);
  auto warp = [&](Point p) {
    return Point{p.x + wx * std::sin(2 * kPi * fy * p.y + phx) + jitter(rng),
                 p.y + wy * std::sin(2 * kPi * fx * p.x + phy) + jitter(rng)};
  };
  // Affine map from the unit box (centred at 0.5, 0.5) to pixels.
  const double angle = u(rng) * 14.0 * kPi / 180.0;
  const double shear = u(rng) * 0.3;
  const double scale = 19.0 * (1.0 + 0.12 * u(rng));
  const double aspect = 1.0 + 0.12 * u(rng);
  const double sx = scale * aspect, sy = scale / aspect;
  const double c = std::cos(angle), s = std::sin(angle);
  const double tx = 14.0 + 1.5 * u(rng), ty = 14.0 + 1.5 * u(rng);
  auto map = [&](Point p) {
    const double x = (p.x - 0.5 + shear * (p.y - 0.5)) * sx;
    const double y = (p.y - 0.5) * sy;
    return Point{tx + c * x - s * y, ty + s * x + c * y};
  };
  const double half_width = 0.9 + 0.7 * (u(rng) + 1.0) * 0.5;  // 0.9 .. 1.6 px

  std::array<float, kSide * kSide> ink{};
  for (const Stroke& stroke : glyphs()[label]) {
    std::vector<Point> pts;
    for (const Point& p : stroke) pts.push_back(map(warp(p)));
    for (size_t k = 0; k + 1 < pts.size(); ++k) {
      const Point a = pts[k], b = pts[k + 1];
      const double reach = half_width + 1.0;
      const int x0 = std::max(0, static_cast<int>(std::floor(std::min(a.x, b.x) - reach)));
      const int x1 = std::min(kSide - 1, static_cast<int>(std::ceil(std::max(a.x, b.x) + reach)));
      const int y0 = std::max(0, static_cast<int>(std::floor(std::min(a.y, b.y) - reach)));
      const int y1 = std::min(kSide - 1, static_cast<int>(std::ceil(std::max(a.y, b.y) + reach)));
      const double dx = b.x - a.x, dy = b.y - a.y;
      const double len2 = std::max(dx * dx + dy * dy, 1e-12);
      for (int y = y0; y <= y1; ++y) {
        for (int x = x0; x <= x1; ++x) {
          const double px = x + 0.5 - a.x, py = y + 0.5 - a.y;
          const double t = std::clamp((px * dx + py * dy) / len2, 0.0, 1.0);
          const double ex = px - t * dx, ey = py - t * dy;
          const double d = std::sqrt(ex * ex + ey * ey);
          const float v = static_cast<float>(std::clamp(half_width + 0.5 - d, 0.0, 1.0));
          ink[y * kSide + x] = std::max(ink[y * kSide + x], v);
        }
      }
    }
  }
  // Noise: +-20 on the ink, and a faint speckle on about one background pixel in 16, from the
  // bytes of one draw per 8 pixels (cheap: 60k images in seconds).
  const float peak = 230.0f + 25.0f * static_cast<float>(u(rng) + 1.0) * 0.5f;
  uint64_t bits = 0;
  for (int i = 0; i < kSide * kSide; ++i) {
    if (i % 8 == 0) bits = rng();
    const int byte = static_cast<int>((bits >> (8 * (i % 8))) & 0xff);
    float v = ink[i] * peak;
    if (ink[i] > 0.0f) {
      v += (static_cast<float>(byte) - 127.5f) * (20.0f / 127.5f);
    } else if ((byte & 15) == 0) {
      v += static_cast<float>(byte >> 4) * 3.0f;
    }
    out[i] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
  }
}

}  // namespace

std::vector<uint8_t> balanced_labels(int64_t count, uint64_t seed) {
  std::vector<uint8_t> labels(static_cast<size_t>(count));
  std::mt19937_64 rng(detail::mix_seed(seed, 0x1abe1));
  std::array<uint8_t, 10> block;
  std::iota(block.begin(), block.end(), 0);
  for (int64_t i = 0; i < count; ++i) {
    if (i % 10 == 0) std::shuffle(block.begin(), block.end(), rng);
    labels[i] = block[i % 10];
  }
  return labels;
}

Images mnist_images(int64_t count, uint64_t seed) {
  CLEAVE_CHECK_ARG(count >= 0, "mnist_images: count is {}; expected >= 0", count);
  Images images{count,
                28,
                28,
                1,
                std::vector<uint8_t>(static_cast<size_t>(count) * 28 * 28),
                balanced_labels(count, seed)};
#pragma omp parallel for schedule(static, 64)
  for (int64_t i = 0; i < count; ++i) {
    std::mt19937_64 rng(detail::mix_seed(seed, static_cast<uint64_t>(i)));
    draw_digit(images.labels[i], rng, images.pixels.data() + i * 28 * 28);
  }
  return images;
}

}  // namespace cleave::dataset::synthetic
