// The collective primitives, eagerly, on jobs of thread ranks (testing::run_thread_job: each
// thread's world group installed for it): forward values, the gradient rule of each primitive by
// finite differences over the whole world, standalone identities, and bad input.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

using comm::ProcessGroup;
using comm::ReduceOp;
using testing::all_close;
using testing::random_f64;
using testing::run_thread_job;

Tensor iota(const Shape& shape, double start, DType dtype = DType::kFloat64) {
  return ops::cast(ops::add(ops::reshape(Tensor::arange(0, static_cast<double>(shape.numel()), 1,
                                                        DType::kFloat64),
                                         shape),
                            start),
                   dtype);
}

// NOTE [Gradient check over a world]
// The scalar checked is L = sum over ranks s of sum(w_s * y_s), w_s a fixed random tensor of rank
// s. Analytic: each rank backpropagates its own term; the collectives' gradient rules carry the
// other ranks' contributions. Numeric: for every rank q and element i of x_q (in the same order on
// every rank), all ranks evaluate L with x_q[i] moved by +-eps (only on rank q) and sum their
// terms with an all-reduce; rank q compares the central difference with its analytic gradient.
void check_world_grad(ProcessGroup& g, const Shape& x_shape,
                      const std::function<Tensor(const Tensor&)>& fn) {
  const Tensor x0 = random_f64(x_shape, -1, 1, 100 + static_cast<uint64_t>(g.rank()));
  Tensor y_shape_probe;
  {
    NoGradGuard no_grad;
    y_shape_probe = fn(x0);
  }
  const Tensor w = random_f64(y_shape_probe.shape(), -1, 1, 200 + static_cast<uint64_t>(g.rank()));
  Tensor x = x0.clone();
  x.set_requires_grad(true);
  const Tensor loss = ops::reduce_sum(ops::mul(fn(x), w));
  const Tensor analytic = autodiff::grad(loss, {x})[0];

  const double eps = 1e-6;
  auto total = [&](const Tensor& xin) {
    NoGradGuard no_grad;
    Tensor l = ops::reduce_sum(ops::mul(fn(xin), w)).clone();
    g.all_reduce(l);
    return l.item();
  };
  const std::vector<double> a = analytic.to_double_vector();
  for (int q = 0; q < g.size(); ++q) {
    for (int64_t i = 0; i < x_shape.numel(); ++i) {
      Tensor plus = x0.clone(), minus = x0.clone();
      if (g.rank() == q) {
        plus.data<double>()[i] += eps;
        minus.data<double>()[i] -= eps;
      }
      const double numeric = (total(plus) - total(minus)) / (2 * eps);
      if (g.rank() == q) {
        ASSERT_NEAR(a[static_cast<size_t>(i)], numeric, 1e-6 + 1e-5 * std::abs(numeric))
            << "rank " << q << " element " << i;
      }
    }
  }
}

TEST(CollectivePrimitives, StandaloneCollectivesAreIdentities) {
  const Tensor x = iota(Shape({2, 3}), 1);
  EXPECT_TRUE(all_close(ops::all_reduce(x), x));
  EXPECT_TRUE(all_close(ops::all_reduce(x, {.op = ReduceOp::kMean}), x));
  EXPECT_TRUE(all_close(ops::all_gather(x), x));
  EXPECT_TRUE(all_close(ops::reduce_scatter(x), x));
  EXPECT_TRUE(all_close(ops::broadcast(x, {.root_rank = 0}), x));
  EXPECT_TRUE(
      all_close(ops::all_to_all(x, {.split_count = 1, .split_dim = 1, .concat_dim = 0}), x));
  const auto got = ops::neighbor_exchange({x}, {.send_rank_ids = {0},
                                                .recv_rank_ids = {0},
                                                .recv_shapes = {Shape({2, 3})},
                                                .recv_type = DType::kFloat64});
  EXPECT_TRUE(all_close(got[0], x));
  ops::barrier();
  EXPECT_EQ(comm::world_size(), 1);
}

TEST(CollectivePrimitives, ForwardValues) {
  for (int size : {2, 3, 4}) {
    run_thread_job(size, [&](ProcessGroup& g) {
      const int r = g.rank();
      const Tensor x = iota(Shape({2, 2}), 10.0 * r);  // rank r: 10r + (0, 1, 2, 3)
      double base = 0;
      for (int s = 0; s < size; ++s) base += 10.0 * s;
      EXPECT_TRUE(
          all_close(ops::all_reduce(x), ops::add(ops::mul(iota(Shape({2, 2}), 0), size), base)))
          << size;
      EXPECT_TRUE(all_close(ops::all_reduce(x, {.op = ReduceOp::kMax}),
                            iota(Shape({2, 2}), 10.0 * (size - 1))));
      EXPECT_TRUE(
          all_close(ops::all_reduce(x, {.op = ReduceOp::kMean}), iota(Shape({2, 2}), base / size)));
      const Tensor gathered = ops::all_gather(x);
      EXPECT_EQ(gathered.shape(), Shape({2 * size, 2}));
      EXPECT_EQ(gathered.at({2 * (size - 1), 1}), 10.0 * (size - 1) + 1);
      // ReduceScatter: rank r keeps rows [r] of the sum of every rank's (size, 2) input.
      const Tensor rs = ops::reduce_scatter(iota(Shape({size, 2}), r));
      EXPECT_EQ(rs.shape(), Shape({1, 2}));
      double rank_sum = 0;
      for (int s = 0; s < size; ++s) rank_sum += s;
      EXPECT_EQ(rs.at({0, 1}), size * (2.0 * r + 1) + rank_sum);
      EXPECT_TRUE(all_close(ops::broadcast(x, {.root_rank = size - 1}),
                            iota(Shape({2, 2}), 10.0 * (size - 1))));
      const Tensor ints = ops::all_reduce(iota(Shape({3}), r, DType::kInt32));
      EXPECT_EQ(ints.dtype(), DType::kInt32);
      EXPECT_EQ(ints.to_vector<int32_t>()[2], static_cast<int32_t>(size * 2 + rank_sum));
    });
  }
}

// AlltoAll against its definition: split x along split_dim into `size` blocks, block j to rank
// j, blocks received concatenated along concat_dim in rank order.
TEST(CollectivePrimitives, AllToAllMatchesSplitAndConcat) {
  const int size = 2;
  const Shape shape({2, 4, 3});
  for (int64_t split_dim : {0, 1}) {
    for (int64_t concat_dim : {0, 1, 2}) {
      run_thread_job(size, [&](ProcessGroup& g) {
        auto input_of = [&](int r) { return iota(shape, 100.0 * r); };
        const Tensor y = ops::all_to_all(
            input_of(g.rank()),
            {.split_count = size, .split_dim = split_dim, .concat_dim = concat_dim});
        std::vector<Tensor> blocks;
        for (int j = 0; j < size; ++j) {
          blocks.push_back(ops::split(input_of(j), split_dim, size)[static_cast<size_t>(g.rank())]);
        }
        EXPECT_TRUE(all_close(y, ops::concat(blocks, concat_dim)))
            << "split_dim " << split_dim << " concat_dim " << concat_dim;
      });
    }
  }
}

TEST(CollectivePrimitives, NeighborExchangeRingAndSendRecv) {
  run_thread_job(3, [&](ProcessGroup& g) {
    const int r = g.rank(), left = (r + 2) % 3, right = (r + 1) % 3;
    const auto got =
        ops::neighbor_exchange({iota(Shape({2}), 10.0 * r), iota(Shape({3}), 10.0 * r)},
                               {.send_rank_ids = {left, right},
                                .recv_rank_ids = {right, left},
                                .recv_shapes = {Shape({2}), Shape({3})},
                                .recv_type = DType::kFloat64});
    EXPECT_TRUE(all_close(got[0], iota(Shape({2}), 10.0 * right)));
    EXPECT_TRUE(all_close(got[1], iota(Shape({3}), 10.0 * left)));
    if (r == 0) {
      ops::send(iota(Shape({4}), 7), {.dest_rank = 2, .sr_tag = 3});
    } else if (r == 2) {
      const Tensor got2 =
          ops::recv(Tensor::scalar(0),
                    {.src_rank = 0, .sr_tag = 3, .shape = Shape({4}), .dtype = DType::kFloat64});
      EXPECT_TRUE(all_close(got2, iota(Shape({4}), 7)));
    }
    ops::barrier();
  });
}

TEST(CollectiveGradients, AllReduceEveryOp) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    run_thread_job(3, [&](ProcessGroup& g) {
      check_world_grad(g, Shape({2, 2}),
                       [&](const Tensor& x) { return ops::all_reduce(x, {.op = op}); });
    });
  }
}

TEST(CollectiveGradients, AllGatherAndReduceScatter) {
  for (int size : {2, 4}) {
    run_thread_job(size, [&](ProcessGroup& g) {
      check_world_grad(g, Shape({1, 3}), [](const Tensor& x) { return ops::all_gather(x); });
      check_world_grad(g, Shape({size, 2}), [](const Tensor& x) { return ops::reduce_scatter(x); });
      check_world_grad(g, Shape({size, 1}), [](const Tensor& x) {
        return ops::reduce_scatter(x, {.op = ReduceOp::kMean});
      });
    });
  }
}

TEST(CollectiveGradients, BroadcastFromEachRoot) {
  run_thread_job(3, [&](ProcessGroup& g) {
    for (int64_t root = 0; root < 3; ++root) {
      check_world_grad(g, Shape({3}),
                       [&](const Tensor& x) { return ops::broadcast(x, {.root_rank = root}); });
    }
  });
}

TEST(CollectiveGradients, AllToAllSwapsSplitAndConcat) {
  run_thread_job(2, [&](ProcessGroup& g) {
    check_world_grad(g, Shape({2, 2, 1}), [](const Tensor& x) {
      return ops::all_to_all(x, {.split_count = 2, .split_dim = 1, .concat_dim = 0});
    });
  });
}

TEST(CollectiveGradients, NeighborExchangeAndSendRecv) {
  run_thread_job(2, [&](ProcessGroup& g) {
    const int other = 1 - g.rank();
    check_world_grad(g, Shape({3}), [&](const Tensor& x) {
      return ops::neighbor_exchange({x}, {.send_rank_ids = {other},
                                          .recv_rank_ids = {other},
                                          .recv_shapes = {Shape({3})},
                                          .recv_type = DType::kFloat64})[0];
    });
    // Rank 0 sends x to rank 1, which sends 2 * x back. Each rank's result depends on its Send's
    // dependency output (an empty tensor), so that backward runs the Send's gradient (a Recv).
    check_world_grad(g, Shape({2}), [&](const Tensor& x) {
      if (g.rank() == 0) {
        const Tensor token = ops::send(x, {.dest_rank = 1, .sr_tag = 1});
        return ops::add(
            ops::recv(token,
                      {.src_rank = 1, .sr_tag = 2, .shape = Shape({2}), .dtype = DType::kFloat64}),
            ops::mul(x, 0.0));
      }
      const Tensor got =
          ops::recv(x, {.src_rank = 0, .sr_tag = 1, .shape = Shape({2}), .dtype = DType::kFloat64});
      const Tensor token = ops::send(ops::mul(got, 2.0), {.dest_rank = 0, .sr_tag = 2});
      return ops::add(ops::mul(x, 0.0), ops::reduce_sum(token));
    });
  });
}

TEST(CollectivePrimitives, BadInputIsAnError) {
  run_thread_job(2, [&](ProcessGroup& g) {
    const Tensor x = iota(Shape({3, 2}), 0);
    EXPECT_ERROR(ops::reduce_scatter(x), "ReduceScatter: input 0 has shape (3, 2)",
                 "divisible by the size of group 'hccl_world_group' (2)");
    EXPECT_ERROR(ops::all_to_all(x, {.split_count = 3}), "AlltoAll: split_count 3",
                 "size of group 'hccl_world_group' (2)");
    EXPECT_ERROR(ops::all_to_all(x, {.split_count = 2, .split_dim = 0}),
                 "dim 0 (split_dim) of size 3 must be divisible by split_count 2");
    EXPECT_ERROR(ops::all_to_all(x, {.split_count = 2, .split_dim = 5}),
                 "split_dim 5 is out of range");
    EXPECT_ERROR(ops::broadcast(x, {.root_rank = 2}), "Broadcast: root_rank 2 is out of range");
    EXPECT_ERROR(ops::all_reduce(x, {.group = "nowhere"}),
                 "AllReduce:", "group 'nowhere' is not registered");
    EXPECT_ERROR(ops::send(x, {.dest_rank = 9}), "Send: dest_rank holds rank 9");
    EXPECT_ERROR(ops::all_reduce(iota(Shape({2}), 0, DType::kInt32), {.op = ReduceOp::kMean}),
                 "AllReduce");
    EXPECT_ERROR(
        ops::neighbor_exchange(
            {x}, {.send_rank_ids = {0, 1}, .recv_rank_ids = {1}, .recv_shapes = {Shape({1})}}),
        "NeighborExchange: 1 inputs but 2 send_rank_ids");
    ops::barrier();
  });
}

}  // namespace
}  // namespace cleave

namespace cleave {
namespace {

// A collective made as the parallel rewrite makes them: from the registry with group attributes
// only (NOTE [Group attributes]), no live group looked up at the call.
Tensor call_on_ranks(const char* op, const Tensor& x, std::vector<int64_t> ranks,
                     ir::Attrs attrs = {}) {
  attrs.set("rank_list", ranks);
  attrs.set("group", fmt::format("{}", fmt::join(ranks, "-")));
  return ir::call1(ir::Registry::global().get(op), {x}, attrs);
}

TEST(CommPrimitives, InferReadsOnlyAttributes) {
  // No group is registered on this thread: inference needs none.
  const ir::OpDef& gather = ir::Registry::global().get("AllGather");
  const ir::TensorMeta x{Shape({2, 3}), DType::kFloat32};
  const ir::Attrs on_four{{"rank_list", std::vector<int64_t>{0, 2, 4, 6}}, {"axis", int64_t{1}}};
  EXPECT_EQ(gather.infer({gather, on_four, {&x, 1}})[0].shape, Shape({2, 12}));
  const ir::OpDef& scatter = ir::Registry::global().get("ReduceScatter");
  const ir::Attrs sized{{"group_size", int64_t{3}}, {"axis", int64_t{-1}}};
  const ir::TensorMeta y{Shape({2, 6}), DType::kFloat32};
  EXPECT_EQ(scatter.infer({scatter, sized, {&y, 1}})[0].shape, Shape({2, 2}));
  const ir::TensorMeta z{Shape({2, 4}), DType::kFloat32};
  EXPECT_TRUE(testing::throws_error(
      [&] {
        scatter.infer({scatter, sized, {&z, 1}});
      },
      {"ReduceScatter: input 0 has shape (2, 4); dim 1 (4) must be divisible", "(3)"}));
  EXPECT_TRUE(testing::throws_error(
      [&] {
        gather.infer({gather, {}, {&x, 1}});
      },
      {"AllGather: attribute 'group_size' (or 'rank_list') is missing"}));
  const ir::Attrs unsorted{{"rank_list", std::vector<int64_t>{2, 1}}};
  EXPECT_TRUE(testing::throws_error(
      [&] {
        gather.infer({gather, unsorted, {&x, 1}});
      },
      {"rank_list (2, 1) must hold distinct world ranks"}));
}

TEST(CommPrimitives, GatherAndScatterOnAnyAxisOverRankLists) {
  // 6 ranks: groups {0, 2, 4} and {1, 3, 5} made from rank lists at the first use.
  run_thread_job(6, [](ProcessGroup& g) {
    const int r = g.rank();
    std::vector<int64_t> ranks;
    for (int64_t q = r % 2; q < 6; q += 2) ranks.push_back(q);
    const Tensor x = iota(Shape({2, 2, 3}), 100.0 * r);
    for (int64_t axis = 0; axis < 3; ++axis) {
      const Tensor y = call_on_ranks("AllGather", x, ranks, {{"axis", axis}});
      std::vector<Tensor> parts;
      for (int64_t q : ranks) parts.push_back(iota(Shape({2, 2, 3}), 100.0 * q));
      EXPECT_TRUE(all_close(y, ops::concat(parts, axis), 0, 0)) << "axis " << axis;
      // ReduceScatter on the axis gives this rank's block of the sum.
      const Tensor s = call_on_ranks("ReduceScatter", y, ranks, {{"axis", axis}});
      const int64_t index = r / 2;
      const Tensor sum = ops::mul(ops::concat(parts, axis), 3.0);
      std::vector<int64_t> begin(3, 0), size = sum.shape().dims();
      size[static_cast<size_t>(axis)] /= 3;
      begin[static_cast<size_t>(axis)] = index * size[static_cast<size_t>(axis)];
      EXPECT_TRUE(all_close(s, ops::slice(sum, begin, size), 0, 0)) << "axis " << axis;
    }
  });
}

TEST(CommPrimitives, ReduceLeavesTheSumOnTheRootOnly) {
  run_thread_job(3, [](ProcessGroup& g) {
    const Tensor y = call_on_ranks("Reduce", iota(Shape({2}), g.rank()), {0, 1, 2},
                                   {{"root_rank", int64_t{1}}, {"op", std::string("sum")}});
    const std::vector<double> expected =
        g.rank() == 1 ? std::vector<double>{3, 6} : std::vector<double>{0, 0};
    EXPECT_EQ(y.to_double_vector(), expected);
    check_world_grad(g, Shape({3}), [](const Tensor& x) {
      return call_on_ranks("Reduce", x, {0, 1, 2}, {{"root_rank", int64_t{2}}});
    });
    check_world_grad(g, Shape({2, 3}), [](const Tensor& x) {
      return call_on_ranks("AllGather", x, {0, 1, 2}, {{"axis", int64_t{1}}});
    });
  });
}

}  // namespace
}  // namespace cleave
