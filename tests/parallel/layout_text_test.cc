// A layout's canonical text form reads back to the same layout (Layout::to_string and
// Layout::parse, NOTE [Layouts] in cleave/parallel/layout.h), and text that is not a layout is an
// error saying where and what was expected.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cleave/core/error.h"
#include "cleave/parallel/layout.h"

namespace cleave::parallel {
namespace {

// Every layout of a tensor of rank `rank` on `dev`: each device axis unused, partial, or on one
// dimension (axes of a dimension ascending), with each partial op when some axis is partial.
void each_layout(const DeviceMatrix& dev, int rank, const std::function<void(const Layout&)>& fn) {
  const int axes = static_cast<int>(dev.size());
  std::vector<int> where(static_cast<size_t>(axes), -1);  // -1 unused, -2 partial, d: dim d
  std::function<void(int)> walk = [&](int a) {
    if (a == axes) {
      std::vector<Layout::DimAxes> map(static_cast<size_t>(rank));
      std::vector<int> partial;
      for (int k = 0; k < axes; ++k) {
        if (where[static_cast<size_t>(k)] >= 0) {
          map[static_cast<size_t>(where[static_cast<size_t>(k)])].push_back(k);
        }
        if (where[static_cast<size_t>(k)] == -2) partial.push_back(k);
      }
      for (PartialOp op : {PartialOp::kSum, PartialOp::kMax, PartialOp::kMin}) {
        fn(Layout(dev, map, partial, op));
        if (partial.empty()) break;
      }
      return;
    }
    for (int w = -2; w < rank; ++w) {
      where[static_cast<size_t>(a)] = w;
      walk(a + 1);
    }
  };
  walk(0);
}

TEST(LayoutText, EveryLayoutReadsBackFromItsText) {
  int count = 0;
  for (const DeviceMatrix& dev :
       {DeviceMatrix{1}, DeviceMatrix{8}, DeviceMatrix{2, 4}, DeviceMatrix{2, 4, 1},
        DeviceMatrix{2, 2, 2}, DeviceMatrix{3, 1, 5}}) {
    for (int rank = 0; rank <= 3; ++rank) {
      each_layout(dev, rank, [&](const Layout& l) {
        const std::string text = l.to_string();
        EXPECT_EQ(Layout::parse(text), l) << text;
        EXPECT_EQ(Layout::parse(text).to_string(), text);
        ++count;
      });
    }
  }
  EXPECT_GT(count, 1000);
  // Spaces between tokens are free.
  EXPECT_EQ(Layout::parse("layout( dev=[2,4,2] , map=((0,1), -1), partial_max=(2,) )").to_string(),
            "layout(dev=[2, 4, 2], map=((0, 1), -1), partial_max=(2))");
}

TEST(LayoutText, TextThatIsNotALayoutSaysWhereAndWhatWasExpected) {
  auto error = [](std::string_view text) {
    try {
      Layout::parse(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error("layout(dev=[2, 4], map=(0, 2))"),
            "layout 'layout(dev=[2, 4], map=(0, 2))': at column 28: expected a device axis in "
            "[0, 1], got '2))'");
  EXPECT_EQ(error("layout(dev=[2, 4], map=(0, 0))"),
            "layout 'layout(dev=[2, 4], map=(0, 0))': at column 28: expected an axis other than "
            "0 (used twice), got '0))'");
  EXPECT_EQ(error("layout(dev=[2, 0], map=(0,))"),
            "layout 'layout(dev=[2, 0], map=(0,))': at column 16: expected a device axis size "
            ">= 1, got '0], map=(0,)'");
  EXPECT_EQ(Layout::parse("layout(dev=[2, 4], map=((1, 0), -1))"), Layout({2, 4}, {{1, 0}, {}}));
  EXPECT_NE(error("layout(dev=[2, 4], map=(0, -1)) extra").find("expected the end of the layout"),
            std::string::npos);
  EXPECT_NE(error("layout(dev=[2, 4], map=(0, -1), parital=(1))").find("expected 'partial'"),
            std::string::npos);
  EXPECT_NE(error("").find("expected 'layout', got the end"), std::string::npos);
}

}  // namespace
}  // namespace cleave::parallel
