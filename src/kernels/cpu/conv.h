// 2-D convolution kernels (NCHW activations, OIHW weights): forward, backward to the input and
// backward to the filter. Float32 runs on oneDNN or, for convolutions of few input channels, on
// hand-written kernels; Float64 on reference loops.
#pragma once

#include <cstdint>
#include <string>

#include "cleave/core/tensor.h"

namespace cleave::kernels::cpu {

// Everything that fixes one convolution: the sizes of its three tensors and how the window
// moves. The caller (the Conv2D primitive) resolves pad modes into explicit paddings, so the
// kernels see only the arithmetic:
//   x (n, c, h, w), weight (o, c / group, kh, kw), y (n, o, oh, ow),
//   y[n, o, i, j] = sum over the group's input channels ci and (ki, kj) of
//       x[n, ci, i·stride_h − pad_top + ki·dilation_h, j·stride_w − pad_left + kj·dilation_w]
//       · weight[o, ci − group_start, ki, kj],
// with x read as 0 outside its bounds. Dilation 1 means a dense kernel.
struct Conv2DGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0;
  int64_t group = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t oh = 0, ow = 0;

  // A text key naming every field, for the oneDNN primitive cache.
  std::string key() const;
};

// Which implementation runs a Float32 pass. kAuto: the hand-written kernels for the convolutions
// they serve (NOTE [Convolutions of few input channels] in conv.cc), oneDNN for the others;
// kOneDnn forces oneDNN and kDirect the hand-written kernels (an Error for a convolution they do
// not take), so that tests and bench/conv_bench can compare the paths on the same problem.
// conv2d_backward_input has no hand-written kernel. Float64 ignores the path.
enum class ConvPath { kAuto, kOneDnn, kDirect };

// Whether conv2d_forward with ConvPath::kAuto runs a Float32 convolution of g on the hand-written
// kernel (NOTE [Convolutions of few input channels] in conv.cc), which computes each output
// channel on its own, rather than on oneDNN's blocked layouts, which pad the output channels to a
// whole block. For the cost model (NOTE [Padded channels] in src/parallel/rules/conv.cc); only
// the fields that choose the path are read (c, kh, kw, group, strides, dilations).
bool conv2d_forward_runs_by_hand(const Conv2DGeometry& g);

// y = conv(x, weight). x, weight, y: contiguous, one floating dtype, shapes as in the geometry.
void conv2d_forward(const Conv2DGeometry& g, const Tensor& x, const Tensor& weight, const Tensor& y,
                    ConvPath path = ConvPath::kAuto);
// dx = gradient of sum(conv(x, weight) · dy) with respect to x (overwrites dx).
void conv2d_backward_input(const Conv2DGeometry& g, const Tensor& dy, const Tensor& weight,
                           const Tensor& dx);
// dweight = gradient of sum(conv(x, weight) · dy) with respect to weight (overwrites dweight).
void conv2d_backward_filter(const Conv2DGeometry& g, const Tensor& dy, const Tensor& x,
                            const Tensor& dweight, ConvPath path = ConvPath::kAuto);

}  // namespace cleave::kernels::cpu
