// NeighborExchangeV2 on thread ranks: the halo of each block equals the window of the whole
// (zero-padded) image, on a 2 x 2 grid and on a periodic column of two ranks; its gradient by
// finite differences over the world.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

using comm::ProcessGroup;
using testing::all_close;
using testing::run_thread_job;

// The 2 x 2 grid: rank 2i + j holds block (i, j); -1 off the edge.
ops::NeighborExchangeV2Options grid_options(int rank, std::vector<int64_t> lens) {
  const int i = rank / 2, j = rank % 2;
  auto at = [](int r, int c) -> int64_t {
    return r < 0 || r > 1 || c < 0 || c > 1 ? -1 : 2 * r + c;
  };
  // top, top_right, right, bottom_right, bottom, bottom_left, left, top_left
  const std::vector<int64_t> ids = {at(i - 1, j), at(i - 1, j + 1), at(i, j + 1), at(i + 1, j + 1),
                                    at(i + 1, j), at(i + 1, j - 1), at(i, j - 1), at(i - 1, j - 1)};
  return {.send_rank_ids = ids, .recv_rank_ids = ids, .send_lens = lens, .recv_lens = lens};
}

TEST(NeighborExchangeV2, HalosMatchTheWholeImageOnAGrid) {
  const int64_t H = 3, W = 4;
  // The whole image (1, 2, 2H, 2W): value 100 * c + 10 * row + col.
  auto whole = [&](int64_t c, int64_t row, int64_t col) {
    return 100.0 * c + 10.0 * row + static_cast<double>(col);
  };
  run_thread_job(4, [&](ProcessGroup& g) {
    const int bi = g.rank() / 2, bj = g.rank() % 2;
    Tensor x = Tensor::empty(Shape({1, 2, H, W}), DType::kFloat64);
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t r = 0; r < H; ++r)
        for (int64_t q = 0; q < W; ++q)
          x.data<double>()[(c * H + r) * W + q] = whole(c, bi * H + r, bj * W + q);
    const Tensor y = ops::neighbor_exchange_v2(x, grid_options(g.rank(), {1, 1, 1, 1}));
    ASSERT_EQ(y.shape(), Shape({1, 2, H + 2, W + 2}));
    for (int64_t c = 0; c < 2; ++c) {
      for (int64_t r = 0; r < H + 2; ++r) {
        for (int64_t q = 0; q < W + 2; ++q) {
          const int64_t gr = bi * H + r - 1, gc = bj * W + q - 1;
          const bool inside = gr >= 0 && gr < 2 * H && gc >= 0 && gc < 2 * W;
          ASSERT_EQ(y.at({0, c, r, q}), inside ? whole(c, gr, gc) : 0.0)
              << "rank " << g.rank() << " c " << c << " r " << r << " q " << q;
        }
      }
    }
  });
}

TEST(NeighborExchangeV2, PeriodicColumnOfTwoKeepsTopAndBottomApart) {
  run_thread_job(2, [&](ProcessGroup& g) {
    const int64_t other = 1 - g.rank();
    const Tensor x =
        ops::add(ops::reshape(Tensor::arange(0, 6, 1, DType::kFloat64), Shape({1, 1, 3, 2})),
                 10.0 * g.rank());
    const Tensor y =
        ops::neighbor_exchange_v2(x, {.send_rank_ids = {other, -1, -1, -1, other, -1, -1, -1},
                                      .recv_rank_ids = {other, -1, -1, -1, other, -1, -1, -1},
                                      .send_lens = {1, 2, 0, 0},
                                      .recv_lens = {2, 1, 0, 0}});
    ASSERT_EQ(y.shape(), Shape({1, 1, 6, 2}));
    const double o = 10.0 * other, m = 10.0 * g.rank();
    // Top halo (2 rows): the other's bottom 2 rows; bottom halo (1 row): the other's top row.
    const std::vector<double> want = {o + 2, o + 3, o + 4, o + 5, m + 0, m + 1,
                                      m + 2, m + 3, m + 4, m + 5, o + 0, o + 1};
    EXPECT_EQ(y.to_double_vector(), want);
  });
}

TEST(NeighborExchangeV2, GradientByFiniteDifferences) {
  run_thread_job(4, [&](ProcessGroup& g) {
    const auto options = grid_options(g.rank(), {1, 1, 1, 1});
    const Tensor x0 = testing::random_f64(Shape({1, 1, 2, 3}), -1, 1, 10 + g.rank());
    const Tensor w = testing::random_f64(Shape({1, 1, 4, 5}), -1, 1, 20 + g.rank());
    Tensor x = x0.clone();
    x.set_requires_grad(true);
    const Tensor analytic =
        autodiff::grad(ops::reduce_sum(ops::mul(ops::neighbor_exchange_v2(x, options), w)), {x})[0];
    auto total = [&](const Tensor& xin) {
      NoGradGuard no_grad;
      Tensor l = ops::reduce_sum(ops::mul(ops::neighbor_exchange_v2(xin, options), w)).clone();
      g.all_reduce(l);
      return l.item();
    };
    const double eps = 1e-6;
    for (int q = 0; q < 4; ++q) {
      for (int64_t i = 0; i < 6; ++i) {
        Tensor plus = x0.clone(), minus = x0.clone();
        if (g.rank() == q) {
          plus.data<double>()[i] += eps;
          minus.data<double>()[i] -= eps;
        }
        const double numeric = (total(plus) - total(minus)) / (2 * eps);
        if (g.rank() == q) {
          ASSERT_NEAR(analytic.to_double_vector()[static_cast<size_t>(i)], numeric, 1e-6)
              << "rank " << q << " element " << i;
        }
      }
    }
  });
}

TEST(NeighborExchangeV2, BadAttributesAreErrors) {
  const Tensor x = Tensor::zeros(Shape({1, 1, 2, 2}), DType::kFloat32);
  EXPECT_ERROR(ops::neighbor_exchange_v2(x, {.send_rank_ids = {0, 0}}),
               "NeighborExchangeV2: send_rank_ids has 2 entries", "expected 8 each");
  EXPECT_ERROR(ops::neighbor_exchange_v2(x, {.send_lens = {2, 1, 0, 0}}),
               "send_lens [2, 1, 0, 0] do not fit input 0 of shape (1, 1, 2, 2)");
  EXPECT_ERROR(ops::neighbor_exchange_v2(x, {.recv_lens = {0, -1, 0, 0}}), "negative length");
  EXPECT_ERROR(ops::neighbor_exchange_v2(x, {.send_rank_ids = {3, -1, -1, -1, -1, -1, -1, -1}}),
               "holds rank 3 at direction 0");
  EXPECT_ERROR(ops::neighbor_exchange_v2(x, {.data_format = "NHWC"}), "\"NHWC\" is not supported");
  EXPECT_ERROR(ops::neighbor_exchange_v2(Tensor::zeros(Shape({2, 2}), DType::kFloat32), {}),
               "NeighborExchangeV2");
}

}  // namespace
}  // namespace cleave
