// Environment variables set for one scope of a test: the one guard of the tests.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace cleave::testing {

// Sets or unsets (std::nullopt) environment variables while alive, and gives each variable it
// touched back the value it had before (or unsets it) when it ends, also when a test fails early.
// cleave reads most variables when a group, a step or a job starts: set them before that.
class ScopedEnv {
 public:
  ScopedEnv(const std::string& name, std::optional<std::string> value) { set(name, value); }
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [name, value] : vars) set(name, value);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) apply(name, value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  // Sets (or, with std::nullopt, unsets) `name` until the end of the scope.
  void set(const std::string& name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
    }
    apply(name, value);
  }

 private:
  static void apply(const std::string& name, const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  std::map<std::string, std::optional<std::string>> saved_;  // the values before this scope
};

}  // namespace cleave::testing
