// The kernels of NeighborExchangeV2, MindSpore's 2-D halo exchange on NCHW tensors, and of its
// backward-only primitive NeighborExchangeV2Grad (cleave/ir/comm_ops.h defines both).
//
// NOTE [NeighborExchangeV2 regions]
// Directions are numbered clockwise from the top, as in MindSpore:
//   0 top, 1 top_right, 2 right, 3 bottom_right, 4 bottom, 5 bottom_left, 6 left, 7 top_left.
// send_rank_ids[d] / recv_rank_ids[d] name the rank for direction d (-1: none). send_lens and
// recv_lens are [top, bottom, left, right] widths (st, sb, sl, sr and rt, rb, rl, rr). The input
// x is (N, C, H, W); the output y is (N, C, rt + H + rb, rl + W + rr) with x in the centre, each
// received halo in its direction's region, and zeros where nothing was received. Sent regions of
// x (rows x cols) are its edge strips: top [0,st) x [0,W), right [0,H) x [W-sr,W), bottom
// [H-sb,H) x [0,W), left [0,H) x [0,sl), and each corner the crossing of its two sides' strips
// (top_right [0,st) x [W-sr,W), ...). Received regions of y are the same pattern around the
// centre (top: [0,rt) x [rl,rl+W), ...). A message sent towards direction d is received by the
// peer as coming from the opposite direction (d + 4) % 8; the tag is kTagBase + d, so two
// messages between the same pair of ranks (a periodic world of two) never mix. The gradient
// (NeighborExchangeV2Grad) runs the messages backwards: each received region of dy goes back to
// the rank it came from, and what comes back is added into the sent regions of dx, on top of dy's
// centre.
#include <fmt/ranges.h>

#include <array>
#include <cstring>

#include "cleave/core/error.h"
#include "cleave/ir/comm_ops.h"
#include "cleave/runtime/collectives.h"
#include "runtime/collective_attrs.h"

namespace cleave::runtime {
namespace {

constexpr int kForwardTagBase = 1000;
constexpr int kBackwardTagBase = 1100;

struct Region {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  int64_t numel_per_plane() const { return rows * cols; }
};

using HaloAttrs = ir::HaloSpec;

// Region of direction d in a plane of `rows` x `cols` whose centre block starts at (r0, c0)
// and has size H x W, with halo widths (top, bottom, left, right). For the sent regions the
// "halo" lies inside the centre, for the received ones outside it.
Region send_region(int d, int64_t H, int64_t W, const HaloAttrs& h) {
  const Region top{0, h.st, 0, W}, bottom{H - h.sb, h.sb, 0, W};
  switch (d) {
    case 0:
      return top;
    case 1:
      return {0, h.st, W - h.sr, h.sr};
    case 2:
      return {0, H, W - h.sr, h.sr};
    case 3:
      return {H - h.sb, h.sb, W - h.sr, h.sr};
    case 4:
      return bottom;
    case 5:
      return {H - h.sb, h.sb, 0, h.sl};
    case 6:
      return {0, H, 0, h.sl};
    default:
      return {0, h.st, 0, h.sl};
  }
}

Region recv_region(int d, int64_t H, int64_t W, const HaloAttrs& h) {
  const int64_t right0 = h.rl + W, bottom0 = h.rt + H;
  switch (d) {
    case 0:
      return {0, h.rt, h.rl, W};
    case 1:
      return {0, h.rt, right0, h.rr};
    case 2:
      return {h.rt, H, right0, h.rr};
    case 3:
      return {bottom0, h.rb, right0, h.rr};
    case 4:
      return {bottom0, h.rb, h.rl, W};
    case 5:
      return {bottom0, h.rb, 0, h.rl};
    case 6:
      return {h.rt, H, 0, h.rl};
    default:
      return {0, h.rt, 0, h.rl};
  }
}

// Copies `region` of every (n, c) plane of t (planes of rows x cols) to or from a packed buffer
// of planes x region.rows x region.cols; with `add`, adds the packed values into t.
template <typename T>
void region_copy(T* t, int64_t planes, int64_t rows, int64_t cols, const Region& region, T* packed,
                 bool to_packed, bool add = false) {
  (void)rows;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < region.rows; ++i) {
      T* row = t + (p * rows + region.row0 + i) * cols + region.col0;
      T* buf = packed + (p * region.rows + i) * region.cols;
      if (to_packed) {
        std::memcpy(buf, row, static_cast<size_t>(region.cols) * sizeof(T));
      } else if (add) {
        for (int64_t j = 0; j < region.cols; ++j) row[j] += buf[j];
      } else {
        std::memcpy(row, buf, static_cast<size_t>(region.cols) * sizeof(T));
      }
    }
  }
}

// Forward: x (N, C, H, W) -> y. Backward (NeighborExchangeV2Grad): dy -> dx (N, C, H, W); the
// attributes are the forward's, and the input's shape gives H and W through the recv_lens.
void kernel_v2(const ir::KernelContext& ctx, bool backward) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const HaloAttrs h = ir::halo_spec(ctx.attrs, ctx.op.name);
  const Tensor& in = ctx.inputs[0];
  const Tensor& out = ctx.outputs[0];
  const Tensor& x_like = backward ? out : in;  // (N, C, H, W)
  const Tensor& y_like = backward ? in : out;
  const int64_t planes = x_like.dim(0) * x_like.dim(1);
  const int64_t H = x_like.dim(2), W = x_like.dim(3);
  const int64_t Ho = y_like.dim(2), Wo = y_like.dim(3);
  CLEAVE_DISPATCH_ALL(in.dtype(), [&] {
    T* x = x_like.data<T>();
    T* y = y_like.data<T>();
    // Centre: y[rt:rt+H, rl:rl+W] <-> x.
    const Region centre{h.rt, H, h.rl, W};
    if (backward) {
      region_copy(y, planes, Ho, Wo, centre, x, /*to_packed=*/true);
    } else {
      std::memset(y, 0, out.nbytes());
      region_copy(y, planes, Ho, Wo, centre, x, /*to_packed=*/false);
    }
    // Forward sends x regions to send_ids and receives y regions from recv_ids; backward sends
    // the y regions back to recv_ids and receives x-region gradients from send_ids.
    std::vector<Tensor> outgoing(8), incoming(8);
    std::vector<comm::PeerBuffer> sends, recvs;
    for (int d = 0; d < 8; ++d) {
      const auto du = static_cast<size_t>(d);
      const Region sr = send_region(d, H, W, h), rr = recv_region(d, H, W, h);
      const int64_t send_peer = backward ? h.recv_ids[du] : h.send_ids[du];
      const int64_t recv_peer = backward ? h.send_ids[du] : h.recv_ids[du];
      const Region& out_region = backward ? rr : sr;
      const Region& in_region = backward ? sr : rr;
      if (send_peer >= 0) {
        outgoing[du] = Tensor::empty(Shape({planes * out_region.numel_per_plane()}), in.dtype());
        if (backward) {
          region_copy(y, planes, Ho, Wo, out_region, outgoing[du].data<T>(), true);
        } else {
          region_copy(x, planes, H, W, out_region, outgoing[du].data<T>(), true);
        }
        // Forward: sent towards d, the peer receives it from (d + 4) % 8. Backward: the
        // gradient of what we received from direction d returns to the sender's direction.
        const int tag = backward ? kBackwardTagBase + (d + 4) % 8 : kForwardTagBase + d;
        sends.push_back({outgoing[du], static_cast<int>(send_peer), tag});
      }
      if (recv_peer >= 0) {
        incoming[du] = Tensor::empty(Shape({planes * in_region.numel_per_plane()}), in.dtype());
        const int tag = backward ? kBackwardTagBase + d : kForwardTagBase + (d + 4) % 8;
        recvs.push_back({incoming[du], static_cast<int>(recv_peer), tag});
      }
    }
    cluster::ActivityScope activity(collective_activity(ctx.op.name, g));
    g.group->exchange(sends, recvs);
    for (int d = 0; d < 8; ++d) {
      const auto du = static_cast<size_t>(d);
      if (!incoming[du].defined()) continue;
      if (backward) {
        region_copy(x, planes, H, W, send_region(d, H, W, h), incoming[du].data<T>(), false,
                    /*add=*/true);
      } else {
        region_copy(y, planes, Ho, Wo, recv_region(d, H, W, h), incoming[du].data<T>(), false);
      }
    }
  });
}

}  // namespace

void register_neighbor_exchange_v2_kernels(ir::Registry& r) {
  r.attach_cpu_kernel("NeighborExchangeV2",
                      [](const ir::KernelContext& ctx) { kernel_v2(ctx, false); });
  r.attach_cpu_kernel("NeighborExchangeV2Grad",
                      [](const ir::KernelContext& ctx) { kernel_v2(ctx, true); });
}

}  // namespace cleave::runtime
