#include "cleave/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace cleave {

void assert_failed(const char* file, int line, const char* condition, const std::string& detail) {
  std::fprintf(stderr, "cleave internal error at %s:%d: check '%s' failed%s%s\n", file, line,
               condition, detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace cleave
