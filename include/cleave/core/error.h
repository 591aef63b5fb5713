// Errors: the two kinds of STYLE.md, never mixed.
//
// 1. Bad input (user code, files, environment, a peer on the network): throw cleave::Error with a
//    message that says what was wrong, the value received, the value expected and where. Each
//    Error carries an ErrorKind, so a caller can tell a failed peer from a wrong argument without
//    reading the message:
//      kInvalidArgument  a value the caller chose is wrong (an argument, a file, an environment
//                        variable): CLEAVE_CHECK_ARG, CLEAVE_FAIL. Calling again fails again.
//      kUnavailable      a peer, the scheduler or the transport failed or did not answer in time
//                        (a timed-out collective or store key, a lost rank, a refused
//                        connection): CLEAVE_UNAVAILABLE. Nothing is wrong with the call itself.
//      kUnimplemented    the API exists but the feature is not in this build or not in cleave
//                        (a backend compiled out, hccl, CUDA in a CPU build): CLEAVE_UNIMPLEMENTED.
// 2. Broken invariant (a bug in cleave): CLEAVE_ASSERT aborts with file, line and condition. Never
//    used for anything a user can trigger.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace cleave {

// What kind of bad input an Error reports (see the top of this file).
enum class ErrorKind { kInvalidArgument, kUnavailable, kUnimplemented };

// "invalid argument", "unavailable", "unimplemented".
const char* error_kind_name(ErrorKind kind);

// Thrown for every bad input a user can give. The message is part of the API and is tested.
class Error : public std::runtime_error {
 public:
  // An ErrorKind::kInvalidArgument error.
  explicit Error(const std::string& message) : Error(ErrorKind::kInvalidArgument, message) {}
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}

  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Aborts the process: only for conditions that no user input can cause.
[[noreturn]] void assert_failed(const char* file, int line, const char* condition,
                                const std::string& detail);

}  // namespace cleave

// Throws a kInvalidArgument cleave::Error with a fmt-formatted message when `cond` is false.
#define CLEAVE_CHECK_ARG(cond, ...)                               \
  do {                                                            \
    if (!(cond)) throw ::cleave::Error(fmt::format(__VA_ARGS__)); \
  } while (0)

// Throws a kInvalidArgument cleave::Error unconditionally.
#define CLEAVE_FAIL(...) throw ::cleave::Error(fmt::format(__VA_ARGS__))

// Throws a kUnavailable cleave::Error: a peer, the scheduler or the transport failed or timed out.
#define CLEAVE_UNAVAILABLE(...) \
  throw ::cleave::Error(::cleave::ErrorKind::kUnavailable, fmt::format(__VA_ARGS__))

// Throws a kUnimplemented cleave::Error: the feature is not in this build or not in cleave.
#define CLEAVE_UNIMPLEMENTED(...) \
  throw ::cleave::Error(::cleave::ErrorKind::kUnimplemented, fmt::format(__VA_ARGS__))

// Aborts with file, line and the condition: an invariant of cleave itself is broken.
#define CLEAVE_ASSERT(cond, ...)                                                                  \
  do {                                                                                            \
    if (!(cond)) ::cleave::assert_failed(__FILE__, __LINE__, #cond, fmt::format("" __VA_ARGS__)); \
  } while (0)
