// Convolution: Conv2D and its backward primitives Conv2DBackpropInput and Conv2DBackpropFilter.
#include "kernels/cpu/conv.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// NOTE [Convolution sharding]
// Conv2D(x (N, C, H, W), w (O, C/group, kH, kW)) -> y (N, O, H', W') iterates over seven loops,
// in this order (the device matrix's, MindSpore's [n, c, h, w, o] for Conv2D): n the batch,
// parallel; c the input channels, a reduction (each rank convolves its channels, y is a pending
// sum); h, w the spatial dimensions (of x, y and dy alike), fixed, since a window straddling two
// slices would need its neighbour's rows (a halo exchange cleave does not insert); o the output
// channels, parallel; kh, kw the kernel window, fixed. With group > 1 (input group g feeds output
// group g only), loop c is the *channel groups*: it splits x's C and w's and y's O together, into
// whole groups (the split must divide group), and the local op is the same convolution with
// group / split groups; loop o, the channels within one group (w's dim 1), is fixed, since a split
// of the output channels alone would hand a rank outputs whose inputs it does not hold. The
// backward primitives are the same loops with other operands, their shape attributes (input_shape,
// filter_shape) becoming the local shapes:
//   Conv2DBackpropInput(dy (N, O, H', W'), w) -> dx (N, C, H, W): o is the reduction, c parallel;
//   Conv2DBackpropFilter(dy, x (N, C, H, W)) -> dw (O, C/group, kH, kW): n is the reduction
//   (the filter gradient sums over the batch), c and o parallel.
enum class ConvKind { kForward, kBackpropInput, kBackpropFilter };

constexpr int kN = 0, kC = 1, kH = 2, kW = 3, kO = 4, kKh = 5, kKw = 6;

class ConvRule : public ShardingRule {
 public:
  explicit ConvRule(ConvKind kind) : kind_(kind) {}
  ComputeClass compute_class() const override { return ComputeClass::kConvolution; }

  std::string summary() const override {
    switch (kind_) {
      case ConvKind::kForward:
        return "batch and output channels split; input channels split as a reduction (the "
               "output a pending sum) with group 1, as whole groups (with the output channels) "
               "with group > 1; spatial and kernel dimensions not split";
      case ConvKind::kBackpropInput:
        return "batch and input channels split; output channels split as a reduction (dx a "
               "pending sum) with group 1, as whole groups with group > 1; spatial and kernel "
               "dimensions not split";
      case ConvKind::kBackpropFilter:
        return "input and output channels split (as whole groups with group > 1); the batch "
               "split as a reduction (dw a pending sum); spatial and kernel dimensions not split";
    }
    return "";
  }

  IterationSpace space(const RuleContext& ctx) const override {
    const Geometry g = geometry(ctx);
    const bool grouped = g.group > 1;
    IterationSpace space;
    space.loops.resize(7);
    space.loops[kN] = {.size = g.n, .name = "the batch dimension"};
    space.loops[kH] = {.size = g.h, .kind = LoopDim::Kind::kFixed, .name = kHaloReason};
    space.loops[kW] = {.size = g.w, .kind = LoopDim::Kind::kFixed, .name = kHaloReason};
    space.loops[kKh] = {.size = g.kh,
                        .kind = LoopDim::Kind::kFixed,
                        .name = "a kernel dimension (every rank applies the whole kernel)"};
    space.loops[kKw] = space.loops[kKh];
    space.loops[kKw].size = g.kw;
    if (grouped) {
      // The groups loop is sized by the first input dimension that indexes it (x's C, else
      // dy's O), so that the generic divisibility message quotes that dimension's size.
      space.loops[kC] = {.size = kind_ == ConvKind::kForward ? g.c : g.o,
                         .name =
                             "the channel groups (with group > 1 the input and output "
                             "channels are split together, as whole groups)"};
      space.loops[kO] = {.size = g.c / g.group,
                         .kind = LoopDim::Kind::kFixed,
                         .name =
                             "the channels of one group (with group > 1 only whole groups "
                             "are split)"};
    } else {
      space.loops[kC] = {.size = g.c, .name = "the input channels"};
      space.loops[kO] = {.size = g.o, .name = "the output channels"};
    }
    const int c = kC;
    const int o = grouped ? kC : kO;          // the loop of the O dimensions
    const int per_group = grouped ? kO : kC;  // the loop of the weight's dim 1
    const std::vector<int> x = {kN, c, kH, kW};
    const std::vector<int> y = {kN, o, kH, kW};
    const std::vector<int> w = {o, per_group, kKh, kKw};
    switch (kind_) {
      case ConvKind::kForward:
        if (!grouped) reduce(space.loops[kC], "the input channels (a reduction)");
        space.inputs = {x, w};
        space.outputs = {y};
        break;
      case ConvKind::kBackpropInput:
        if (!grouped) reduce(space.loops[kO], "the output channels (a reduction)");
        space.inputs = {y, w};
        space.outputs = {x};
        break;
      case ConvKind::kBackpropFilter:
        reduce(space.loops[kN], "the batch dimension (a reduction: dw sums over it)");
        space.inputs = {y, x};
        space.outputs = {w};
        space.batch_loop = kN;
        break;
    }
    return space;
  }

  OpSharding infer(const RuleContext& ctx, const ir::Strategy& strategy) const override {
    OpSharding s = ShardingRule::infer(ctx, strategy);
    const Geometry g = geometry(ctx);
    const int64_t split = s.split(kC);
    if (g.group > 1 && g.group % split != 0) {
      std::vector<int64_t> valid;
      for (int64_t v = 1; v <= g.group; ++v) {
        if (g.group % v == 0) valid.push_back(v);
      }
      // The first input dimension indexing the groups loop: x's C, else dy's O.
      const int64_t size = kind_ == ConvKind::kForward ? g.c : g.o;
      invalid_strategy(ctx, strategy,
                       fmt::format("input 0 dim 1 (size {}) is split {} ways, but with group {} "
                                   "each rank must hold whole groups of channels; a split of "
                                   "it must divide the group count: one of {}",
                                   size, split, g.group, fmt::join(valid, ", ")));
    }
    return s;
  }

  ir::Attrs local_attrs(const LowerContext& ctx) const override {
    ir::Attrs attrs = ctx.rule.attrs;
    const int64_t group = attrs.get_or<int64_t>("group", 1);
    const int64_t split = ctx.sharding.split(kC);
    if (group > 1 && split > 1) attrs.set("group", group / split);
    const Shape local = ctx.sharding.outputs[0].slice_shape(ctx.rule.outputs[0].shape);
    if (kind_ == ConvKind::kBackpropInput) attrs.set("input_shape", local.dims());
    if (kind_ == ConvKind::kBackpropFilter) attrs.set("filter_shape", local.dims());
    return attrs;
  }

  // 2 · N · O · H' · W' · C/group · kH · kW, whichever of the three primitives.
  double flops(const RuleContext& ctx) const override {
    const Geometry g = geometry(ctx);
    return 2.0 * static_cast<double>(g.n * g.o) * static_cast<double>(g.oh * g.ow) *
           static_cast<double>(g.c / g.group) * static_cast<double>(g.kh * g.kw);
  }

  // NOTE [Padded channels]
  // oneDNN computes a convolution in blocked layouts whose channel blocks are a SIMD vector of
  // floats (8 with AVX2): output channels short of a whole block are computed as zeros all the
  // same. A forward convolution whose slice keeps o output channels therefore costs
  // ceil(o / 8) * 8 / o times its flops: 4x for the 2 channels per rank of LeNet's conv2 split 8
  // ways, which measured 2.6x slower a step than data parallelism while costed 1.2x
  // (bench/README.md, "search", run H). A convolution of one or two input channels that the
  // hand-written kernel runs (kernels::cpu::conv2d_forward_runs_by_hand: LeNet's conv1) computes
  // each channel alone and keeps its flops. Block 8 is AVX2's; an AVX-512 host blocks by 16, which
  // this does not model. Grouped convolutions and the backward primitives keep flops / devices.
  double slice_flops(const RuleContext& ctx, const std::vector<int64_t>& splits) const override {
    const double plain = ShardingRule::slice_flops(ctx, splits);
    const Geometry g = geometry(ctx);
    if (kind_ != ConvKind::kForward || g.group != 1 || splits.size() <= kO) return plain;
    const int64_t o = g.o / std::max<int64_t>(splits[kO], 1);
    const int64_t c = g.c / std::max<int64_t>(splits[kC], 1);
    if (o <= 0 || by_hand(ctx, g, c)) return plain;
    constexpr int64_t kBlock = 8;
    const int64_t padded = (o + kBlock - 1) / kBlock * kBlock;
    return plain * static_cast<double>(padded) / static_cast<double>(o);
  }

 private:
  // The sizes of the convolution, read from whichever operands carry them.
  struct Geometry {
    int64_t n, c, h, w, o, oh, ow, kh, kw, group;
  };

  Geometry geometry(const RuleContext& ctx) const {
    const Shape& x = kind_ == ConvKind::kForward         ? ctx.inputs[0].shape
                     : kind_ == ConvKind::kBackpropInput ? ctx.outputs[0].shape
                                                         : ctx.inputs[1].shape;
    const Shape& w =
        kind_ == ConvKind::kBackpropFilter ? ctx.outputs[0].shape : ctx.inputs[1].shape;
    const Shape& y = kind_ == ConvKind::kForward ? ctx.outputs[0].shape : ctx.inputs[0].shape;
    return {.n = x[0],
            .c = x[1],
            .h = x[2],
            .w = x[3],
            .o = w[0],
            .oh = y[2],
            .ow = y[3],
            .kh = w[2],
            .kw = w[3],
            .group = ctx.attrs.get_or<int64_t>("group", 1)};
  }

  // Whether the forward kernel of a slice with c input channels is the hand-written one (it
  // depends on the input channels, the kernel and the window's steps).
  static bool by_hand(const RuleContext& ctx, const Geometry& g, int64_t c) {
    kernels::cpu::Conv2DGeometry k;
    k.c = c, k.kh = g.kh, k.kw = g.kw, k.group = g.group;
    const auto pair = [&](const char* name) {
      return ctx.attrs.get_or<std::vector<int64_t>>(name, {1, 1});
    };
    const std::vector<int64_t> stride = pair("stride"), dilation = pair("dilation");
    if (stride.size() != 2 || dilation.size() != 2) return false;
    k.stride_h = stride[0], k.stride_w = stride[1];
    k.dilation_h = dilation[0], k.dilation_w = dilation[1];
    return kernels::cpu::conv2d_forward_runs_by_hand(k);
  }

  static void reduce(LoopDim& loop, const char* name) {
    loop.kind = LoopDim::Kind::kReduce;
    loop.name = name;
  }

  ConvKind kind_;
};

}  // namespace

void register_conv() {
  add({"Conv2D"}, std::make_shared<ConvRule>(ConvKind::kForward));
  add({"Conv2DBackpropInput"}, std::make_shared<ConvRule>(ConvKind::kBackpropInput));
  add({"Conv2DBackpropFilter"}, std::make_shared<ConvRule>(ConvKind::kBackpropFilter));
}

}  // namespace cleave::parallel::rules
