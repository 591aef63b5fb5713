#include "cleave/train/python_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace cleave::train {
namespace {

TEST(PythonFloatRepr, MatchesPythonRepr) {
  // Expected strings are Python 3's repr() of the same doubles.
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(2.0), "2.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(0.9888822115384616), "0.9888822115384616");
  EXPECT_EQ(python_float_repr(static_cast<double>(2.241283893585205f)), "2.241283893585205");
  EXPECT_EQ(python_float_repr(1e-4), "0.0001");
  EXPECT_EQ(python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_repr(123456.75), "123456.75");
  EXPECT_EQ(python_float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1.2345678901234568e+17), "1.2345678901234568e+17");
  EXPECT_EQ(python_float_repr(-3.5), "-3.5");
  EXPECT_EQ(python_float_repr(1e300), "1e+300");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(python_float_repr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
}

}  // namespace
}  // namespace cleave::train
