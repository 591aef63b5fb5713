#include "cleave/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace cleave {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kUnimplemented:
      return "unimplemented";
  }
  return "?";
}

void assert_failed(const char* file, int line, const char* condition, const std::string& detail) {
  std::fprintf(stderr, "cleave internal error at %s:%d: check '%s' failed%s%s\n", file, line,
               condition, detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace cleave
