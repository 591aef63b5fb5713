// The Float32 convolution paths (kernels::cpu::ConvPath: what the ops run, the hand-written
// kernels forced, oneDNN forced) against the Float64 reference loops, forward and filter
// gradient, over geometries chosen to hit every branch of NOTE [Convolutions of few input
// channels] in src/kernels/cpu/conv.cc: 1 to 4 input channels, every kernel width the kernels
// take (1-7), output channels in whole tiles of 6 and with a remainder, odd and even counts of
// them (the filter gradient's pairs), rows narrower than a vector, a whole number of vectors and
// neither, and padding on each side. Results start as NaN: every element must be written.
#include <gtest/gtest.h>

#include <cmath>

#include "cleave/cleave.h"
#include "kernels/cpu/conv.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using kernels::cpu::Conv2DGeometry;
using kernels::cpu::ConvPath;
using testing::all_close;
using testing::random_f64;

struct Case {
  int64_t n, c, h, w, o, kh, kw;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

Conv2DGeometry geometry(const Case& c) {
  Conv2DGeometry g;
  g.n = c.n, g.c = c.c, g.h = c.h, g.w = c.w, g.o = c.o, g.kh = c.kh, g.kw = c.kw;
  g.pad_top = c.pad_top, g.pad_bottom = c.pad_bottom;
  g.pad_left = c.pad_left, g.pad_right = c.pad_right;
  g.oh = c.h + c.pad_top + c.pad_bottom - c.kh + 1;
  g.ow = c.w + c.pad_left + c.pad_right - c.kw + 1;
  return g;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int64_t kw = 1; kw <= 7; ++kw) {
    all.push_back({2, 1, 9, 20, 5, 3, kw});  // rows of 18 - kw outputs
  }
  all.push_back({32, 1, 32, 32, 6, 5, 5});              // LeNet's conv1: one tile of 6
  all.push_back({3, 1, 10, 12, 13, 5, 5, 2, 2, 2, 2});  // tiles of 6, 6 and 1; "same"
  all.push_back({2, 2, 7, 9, 4, 4, 4, 0, 3, 2, 1});     // asymmetric padding
  all.push_back({2, 2, 6, 6, 7, 5, 5, 0, 0, 0, 0});     // a row of 2 outputs
  all.push_back({2, 1, 11, 30, 7, 6, 7, 1, 2, 3, 0});   // odd pairs, 26-wide rows
  all.push_back({2, 1, 12, 23, 8, 5, 7, 0, 0, 3, 3});   // rows of exactly 3 vectors
  all.push_back({2, 3, 8, 10, 6, 3, 3, 1, 1, 1, 1});    // the kernels forced on 3 and 4
  all.push_back({2, 4, 8, 17, 9, 3, 5, 1, 1, 2, 2});    // input channels
  return all;
}

const char* path_name(ConvPath p) {
  return p == ConvPath::kAuto ? "auto" : p == ConvPath::kDirect ? "direct" : "oneDNN";
}

TEST(ConvPaths, ForwardAndFilterGradientMatchTheFloat64Reference) {
  for (const Case& c : cases()) {
    const Conv2DGeometry g = geometry(c);
    SCOPED_TRACE(g.key());
    const Shape x_shape{g.n, g.c, g.h, g.w}, w_shape{g.o, g.c, g.kh, g.kw};
    const Shape y_shape{g.n, g.o, g.oh, g.ow};
    const Tensor x64 = random_f64(x_shape, -1, 1, 21), w64 = random_f64(w_shape, -1, 1, 22);
    const Tensor dy64 = random_f64(y_shape, -1, 1, 23);
    Tensor y64 = Tensor::empty(y_shape, DType::kFloat64);
    Tensor dw64 = Tensor::empty(w_shape, DType::kFloat64);
    kernels::cpu::conv2d_forward(g, x64, w64, y64);
    kernels::cpu::conv2d_backward_filter(g, dy64, x64, dw64);
    const Tensor x32 = ops::cast(x64, DType::kFloat32), w32 = ops::cast(w64, DType::kFloat32);
    const Tensor dy32 = ops::cast(dy64, DType::kFloat32);
    for (ConvPath path : {ConvPath::kAuto, ConvPath::kDirect, ConvPath::kOneDnn}) {
      SCOPED_TRACE(path_name(path));
      Tensor y32 = Tensor::full(y_shape, std::nanf("")),
             dw32 = Tensor::full(w_shape, std::nanf(""));
      kernels::cpu::conv2d_forward(g, x32, w32, y32, path);
      kernels::cpu::conv2d_backward_filter(g, dy32, x32, dw32, path);
      EXPECT_TRUE(all_close(y32, y64, 1e-5, 1e-5)) << "forward";
      // The filter gradient sums n·oh·ow products (up to 25088 here) in float.
      EXPECT_TRUE(all_close(dw32, dw64, 1e-5, 1e-4)) << "filter gradient";
    }
  }
}

TEST(ConvPaths, TheHandWrittenKernelsForcedOnAConvolutionTheyDoNotTakeIsAnError) {
  Conv2DGeometry g = geometry({1, 1, 9, 9, 2, 3, 3});
  g.stride_h = g.stride_w = 2;
  g.oh = g.ow = 4;
  const Tensor x = Tensor::zeros({1, 1, 9, 9}, DType::kFloat32);
  const Tensor w = Tensor::zeros({2, 1, 3, 3}, DType::kFloat32);
  const Tensor y = Tensor::empty({1, 2, 4, 4}, DType::kFloat32);
  try {
    kernels::cpu::conv2d_forward(g, x, w, y, ConvPath::kDirect);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stride 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cleave
