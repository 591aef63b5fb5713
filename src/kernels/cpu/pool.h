// 2-D max and average pooling kernels (NCHW): forward and backward. Float32 runs on hand-written
// vector loops, faster than oneDNN 2.6 on every shape tried (NOTE [Pooling paths] in pool.cc);
// Float64 runs on reference loops.
#pragma once

#include <cstdint>
#include <string>

#include "cleave/core/tensor.h"

namespace cleave::kernels::cpu {

// One pooling: x (n, c, h, w) -> y (n, c, oh, ow). Output (i, j) covers the window of rows
// [i·stride_h − pad_top, … + kh) and columns [j·stride_w − pad_left, … + kw); the padded cells
// are never part of the result: max ignores them and average divides by the number of real
// cells in the window (MindSpore's and TensorFlow's "same" average pooling). Every window holds
// at least one real cell.
struct Pool2DGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t oh = 0, ow = 0;

  std::string key() const;
};

// NOTE [Max pooling ties]
// Where several cells of a window hold the maximum, the whole gradient of that output goes to
// the first of them in row-major window order (smallest row, then smallest column), as in
// oneDNN, PyTorch and MindSpore. The reference loops implement the same rule and the tests check
// that all kernels agree on inputs with ties.

// Which implementation runs a Float32 pooling (NOTE [Pooling paths] in pool.cc). The ops use
// kAuto: the hand-written kernels, with specialised ones for 2x2 windows of stride 2 and for
// global pooling. kGeneral forces the hand-written general kernels and kOneDnn oneDNN, so that
// tests and bench/pool_bench can compare the paths on the same problem. Float64 ignores it.
enum class PoolPath { kAuto, kGeneral, kOneDnn };

void max_pool2d_forward(const Pool2DGeometry& g, const Tensor& x, const Tensor& y,
                        PoolPath path = PoolPath::kAuto);
// dx = gradient of sum(max_pool(x) · dy) with respect to x (overwrites dx). Needs x itself to
// find the maxima (see NOTE [Max pooling backward recomputes] in pool.cc).
void max_pool2d_backward(const Pool2DGeometry& g, const Tensor& x, const Tensor& dy,
                         const Tensor& dx, PoolPath path = PoolPath::kAuto);
void avg_pool2d_forward(const Pool2DGeometry& g, const Tensor& x, const Tensor& y,
                        PoolPath path = PoolPath::kAuto);
// dx = gradient of sum(avg_pool(x) · dy) with respect to x (overwrites dx).
void avg_pool2d_backward(const Pool2DGeometry& g, const Tensor& dy, const Tensor& dx,
                         PoolPath path = PoolPath::kAuto);

}  // namespace cleave::kernels::cpu
