// Python's float repr from the shortest round-trip digits of std::to_chars.
#include "cleave/train/python_format.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace cleave::train {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";

  // Shortest round-trip digits in scientific form: "-d.ddde+XX".
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }

  // value = 0.<digits> * 10^decpt, as in CPython's float_repr_style 'short'.
  const int decpt = exponent + 1;
  if (decpt <= -4 || decpt > 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) mantissa += "." + digits.substr(1);
    const int e = decpt - 1;
    std::string exp_digits = std::to_string(std::abs(e));
    if (exp_digits.size() < 2) exp_digits = "0" + exp_digits;
    return sign + mantissa + (e < 0 ? "e-" : "e+") + exp_digits;
  }
  std::string out;
  if (decpt <= 0) {
    out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(decpt)) + "." +
          digits.substr(static_cast<size_t>(decpt));
  }
  return sign + out;
}

}  // namespace cleave::train
