// Bilinear and nearest-neighbour resizing of NCHW images: forward and backward. Float32 runs on
// vectorised loops, Float64 on reference loops. Sizes come from the tensors: x (n, c, h, w) and
// y (n, c, oh, ow).
//
// NOTE [Resize coordinate mapping]
// Output pixel i (along a dim of input size in, output size out) reads input coordinate
//   align_corners = false (half-pixel centres, PyTorch align_corners=False, MindSpore/TF
//   half_pixel_centers=True):
//     bilinear: s = (i + 0.5)·in/out − 0.5, clamped below at 0;
//     nearest:  s = floor((i + 0.5)·in/out), clamped to in − 1 (PyTorch "nearest-exact");
//   align_corners = true (corner pixels of input and output coincide):
//     scale = (in − 1)/(out − 1), or 0 when out = 1;
//     bilinear: s = i·scale;
//     nearest:  s = round(i·scale), halves away from zero (TF/MindSpore align_corners).
// Bilinear interpolates between input indices i0 = floor(s) and i1 = min(i0 + 1, in − 1) with
// weight s − i0 on i1; the two dims are interpolated independently.
#pragma once

#include "cleave/core/tensor.h"

namespace cleave::kernels::cpu {

enum class ResizeCorners { kHalfPixel, kAlignCorners };

void resize_bilinear_forward(const Tensor& x, ResizeCorners corners, const Tensor& y);
// dx = gradient of sum(resize_bilinear(x) · dy) with respect to x (overwrites dx).
void resize_bilinear_backward(const Tensor& dy, ResizeCorners corners, const Tensor& dx);
void resize_nearest_forward(const Tensor& x, ResizeCorners corners, const Tensor& y);
// dx = gradient of sum(resize_nearest(x) · dy): each dy element is added to the input pixel it
// was read from (overwrites dx).
void resize_nearest_backward(const Tensor& dy, ResizeCorners corners, const Tensor& dx);

}  // namespace cleave::kernels::cpu
