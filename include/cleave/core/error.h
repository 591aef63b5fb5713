// Errors: the two kinds of STYLE.md, never mixed.
//
// 1. Bad input (user code, files, environment): throw cleave::Error with a message that says what
//    was wrong, the value received, the value expected and where. Use CLEAVE_CHECK_ARG.
// 2. Broken invariant (a bug in cleave): CLEAVE_ASSERT aborts with file, line and condition. Never
//    used for anything a user can trigger.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace cleave {

// Thrown for every bad input a user can give. The message is part of the API and is tested.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Aborts the process: only for conditions that no user input can cause.
[[noreturn]] void assert_failed(const char* file, int line, const char* condition,
                                const std::string& detail);

}  // namespace cleave

// Throws cleave::Error with a fmt-formatted message when `cond` is false.
#define CLEAVE_CHECK_ARG(cond, ...)                               \
  do {                                                            \
    if (!(cond)) throw ::cleave::Error(fmt::format(__VA_ARGS__)); \
  } while (0)

// Throws cleave::Error unconditionally.
#define CLEAVE_FAIL(...) throw ::cleave::Error(fmt::format(__VA_ARGS__))

// Aborts with file, line and the condition: an invariant of cleave itself is broken.
#define CLEAVE_ASSERT(cond, ...)                                                                  \
  do {                                                                                            \
    if (!(cond)) ::cleave::assert_failed(__FILE__, __LINE__, #cond, fmt::format("" __VA_ARGS__)); \
  } while (0)
