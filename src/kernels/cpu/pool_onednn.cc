// Float32 pooling through oneDNN, for comparison only (PoolPath::kOneDnn; NOTE [Pooling paths]).
// Pools nChw8c memory with reorders, except max pooling backward when C is not a multiple of 8,
// which is slower blocked than on plain nchw. Its max backward reruns forward_training for the
// workspace (NOTE [Max pooling backward recomputes]).
#include <fmt/format.h>

#include "kernels/cpu/onednn_layout.h"
#include "kernels/cpu/pool_paths.h"

namespace cleave::kernels::cpu::pool_paths {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr int64_t kChannelBlock = 8;  // nChw8c

struct PoolDescs {
  memory::desc src, dst;                // plain nchw: cleave's tensors
  memory::desc src_layout, dst_layout;  // what the primitives work on
  memory::dims strides, kernel, pad_l, pad_r;
};

PoolDescs pool_descs(const Pool2DGeometry& g, bool blocked) {
  const tag layout = blocked ? tag::nChw8c : tag::nchw;
  return {memory::desc({g.n, g.c, g.h, g.w}, dt::f32, tag::nchw),
          memory::desc({g.n, g.c, g.oh, g.ow}, dt::f32, tag::nchw),
          memory::desc({g.n, g.c, g.h, g.w}, dt::f32, layout),
          memory::desc({g.n, g.c, g.oh, g.ow}, dt::f32, layout),
          {g.stride_h, g.stride_w},
          {g.kh, g.kw},
          {g.pad_top, g.pad_left},
          {g.pad_bottom, g.pad_right}};
}

dnnl::pooling_forward::primitive_desc forward_pd(const PoolDescs& d, dnnl::algorithm alg,
                                                 dnnl::prop_kind prop) {
  dnnl::pooling_forward::desc desc(prop, alg, d.src_layout, d.dst_layout, d.strides, d.kernel,
                                   d.pad_l, d.pad_r);
  return {desc, onednn_engine()};
}

const char* alg_name(dnnl::algorithm alg) {
  return alg == dnnl::algorithm::pooling_max ? "max" : "avg";
}

struct PoolForward {
  dnnl::pooling_forward primitive;
  LayoutBridge src, dst;
};

struct MaxPoolBackward {
  dnnl::pooling_forward forward;  // forward_training, for the workspace
  memory::desc forward_dst, workspace;
  dnnl::pooling_backward backward;
  LayoutBridge src, diff_dst, diff_src;
};

struct AvgPoolBackward {
  dnnl::pooling_backward primitive;
  LayoutBridge diff_dst, diff_src;
};

}  // namespace

void onednn_forward(const Pool2DGeometry& g, dnnl::algorithm alg, const Tensor& x,
                    const Tensor& y) {
  const PoolForward& p = cached_primitive<PoolForward>(
      fmt::format("Pool2D {} inference f32 {}", alg_name(alg), g.key()), [&] {
        const PoolDescs d = pool_descs(g, /*blocked=*/true);
        return PoolForward{
            dnnl::pooling_forward(forward_pd(d, alg, dnnl::prop_kind::forward_inference)),
            LayoutBridge::input(d.src, d.src_layout), LayoutBridge::output(d.dst, d.dst_layout)};
      });
  auto& stream = onednn_stream();
  Tensor src_copy, dst_copy;  // NOTE [Bridge buffers from the allocation cache]
  memory dst = p.dst.place_out(y.raw_data(), dst_copy);
  p.primitive.execute(stream, {{DNNL_ARG_SRC, p.src.bring_in(x.raw_data(), stream, src_copy)},
                               {DNNL_ARG_DST, dst}});
  p.dst.take_out(dst, y.raw_data(), stream);
  stream.wait();
}

void onednn_max_backward(const Pool2DGeometry& g, const Tensor& x, const Tensor& dy,
                         const Tensor& dx) {
  const MaxPoolBackward& p = cached_primitive<MaxPoolBackward>("MaxPoolGrad f32 " + g.key(), [&] {
    const PoolDescs d = pool_descs(g, /*blocked=*/g.c % kChannelBlock == 0);
    const auto alg = dnnl::algorithm::pooling_max;
    auto fwd = forward_pd(d, alg, dnnl::prop_kind::forward_training);
    dnnl::pooling_backward::desc desc(alg, d.src_layout, d.dst_layout, d.strides, d.kernel, d.pad_l,
                                      d.pad_r);
    dnnl::pooling_backward::primitive_desc bwd(desc, onednn_engine(), fwd);
    return MaxPoolBackward{dnnl::pooling_forward(fwd),
                           fwd.dst_desc(),
                           fwd.workspace_desc(),
                           dnnl::pooling_backward(bwd),
                           LayoutBridge::input(d.src, d.src_layout),
                           LayoutBridge::input(d.dst, d.dst_layout),
                           LayoutBridge::output(d.src, d.src_layout)};
  });
  auto& engine = onednn_engine();
  auto& stream = onednn_stream();
  memory recomputed_dst(p.forward_dst, engine);  // discarded
  memory workspace(p.workspace, engine);
  Tensor src_copy, diff_dst_copy, diff_src_copy;  // NOTE [Bridge buffers from the allocation cache]
  p.forward.execute(stream, {{DNNL_ARG_SRC, p.src.bring_in(x.raw_data(), stream, src_copy)},
                             {DNNL_ARG_DST, recomputed_dst},
                             {DNNL_ARG_WORKSPACE, workspace}});
  memory diff_src = p.diff_src.place_out(dx.raw_data(), diff_src_copy);
  p.backward.execute(
      stream, {{DNNL_ARG_DIFF_DST, p.diff_dst.bring_in(dy.raw_data(), stream, diff_dst_copy)},
               {DNNL_ARG_DIFF_SRC, diff_src},
               {DNNL_ARG_WORKSPACE, workspace}});
  p.diff_src.take_out(diff_src, dx.raw_data(), stream);
  stream.wait();
}

void onednn_avg_backward(const Pool2DGeometry& g, const Tensor& dy, const Tensor& dx) {
  const AvgPoolBackward& p = cached_primitive<AvgPoolBackward>("AvgPoolGrad f32 " + g.key(), [&] {
    const PoolDescs d = pool_descs(g, /*blocked=*/true);
    constexpr auto alg = dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_backward::desc desc(alg, d.src_layout, d.dst_layout, d.strides, d.kernel, d.pad_l,
                                      d.pad_r);
    return AvgPoolBackward{
        dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
            desc, onednn_engine(), forward_pd(d, alg, dnnl::prop_kind::forward_training))),
        LayoutBridge::input(d.dst, d.dst_layout), LayoutBridge::output(d.src, d.src_layout)};
  });
  auto& stream = onednn_stream();
  Tensor diff_dst_copy, diff_src_copy;  // NOTE [Bridge buffers from the allocation cache]
  memory diff_src = p.diff_src.place_out(dx.raw_data(), diff_src_copy);
  p.primitive.execute(
      stream, {{DNNL_ARG_DIFF_DST, p.diff_dst.bring_in(dy.raw_data(), stream, diff_dst_copy)},
               {DNNL_ARG_DIFF_SRC, diff_src}});
  p.diff_src.take_out(diff_src, dx.raw_data(), stream);
  stream.wait();
}

}  // namespace cleave::kernels::cpu::pool_paths
