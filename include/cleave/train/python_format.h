// Numbers printed the way MindSpore's Python front end prints them, so that logs read the same.
#pragma once

#include <string>

namespace cleave::train {

// repr(float) of Python: the shortest decimal text that reads back as the same double, in fixed
// notation with at least one fractional digit ("2.0", "0.9888822115384616") unless the decimal
// exponent is < -4 or >= 16, which gives scientific notation with a signed two-digit exponent
// ("1e-05", "1.5e+16"); "inf", "-inf", "nan" for the special values.
std::string python_float_repr(double value);

}  // namespace cleave::train
