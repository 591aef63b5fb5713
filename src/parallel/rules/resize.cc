// Resizing: ResizeBilinear, ResizeNearest and their backward primitives (ImageRule, rules.h).
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {

void register_resize() {
  const char* const resize_reason =
      "a spatial dimension (an output pixel reads the input at rescaled coordinates, which may "
      "lie in another rank's slice)";
  add({"ResizeBilinear", "ResizeNearest"}, std::make_shared<ImageRule>(resize_reason));
  add({"ResizeBilinearGrad", "ResizeNearestGrad"},
      std::make_shared<ImageRule>(resize_reason, "input_shape"));
}

}  // namespace cleave::parallel::rules
