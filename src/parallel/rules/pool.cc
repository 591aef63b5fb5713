// Pooling: MaxPool2D, AvgPool2D and their backward primitives MaxPoolGrad and AvgPoolGrad
// (ImageRule, rules.h).
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {

void register_pool() {
  add({"MaxPool2D", "AvgPool2D", "MaxPoolGrad"}, std::make_shared<ImageRule>(kHaloReason));
  add({"AvgPoolGrad"}, std::make_shared<ImageRule>(kHaloReason, "input_shape"));
}

}  // namespace cleave::parallel::rules
