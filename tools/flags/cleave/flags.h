// The command-line conventions of every cleave tool and example, on top of CLI11: flag errors in
// the cluster's words, unknown flags named with the closest valid one, and a --help that shows
// every default and the environment variables the program reads.
//
//   CLI::App app{"..."};
//   cleave::flags::setup(app, {cleave::flags::kDataPathVariable, ...});
//   app.add_option("--epochs", epochs, "epochs to train")->check(cleave::flags::positive());
//   if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
//
// NOTE [Flag errors]
// A bad value reads "--worker_num 0 is invalid; expected a positive integer" (no CLI11 range
// text with 300-digit bounds); an unknown flag reads "unknown flag --epoch; did you mean
// --epochs?"; every error ends with "(run 'PROGRAM --help' for every flag)" and exits with
// status 2, the usual status of a usage error. Header-only: tools and examples link no extra
// library for it.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cleave::flags {

// An environment variable a program reads, shown under "Environment:" by --help.
struct Variable {
  const char* name;
  const char* description;
};

// The variables of a job's processes (docs/cluster.md), for the programs that call init().
inline const std::vector<Variable>& cluster_variables() {
  static const std::vector<Variable> variables = {
      {"MS_ROLE", "MS_SCHED or MS_WORKER: this process's role in a job (unset: one process)"},
      {"MS_WORKER_NUM", "workers of the job (a positive integer)"},
      {"MS_SCHED_HOST", "the scheduler's host name or address (default 127.0.0.1)"},
      {"MS_SCHED_PORT", "the scheduler's port (default 8118)"},
      {"MS_NODE_ID", "a worker's node id; the scheduler gives ranks in node-id order"},
      {"MS_TOPO_TIMEOUT", "seconds to wait for every worker to register (default 600)"},
      {"CLEAVE_JOB_TOKEN", "a secret shared by every process of one job (cleave-run sets it)"},
      {"CLEAVE_COMM_TIMEOUT_MS", "the longest wait of one collective (default 300000)"},
      {"CLEAVE_STUCK_TIMEOUT_MS", "how long a rank may wait on others before it is reported"},
  };
  return variables;
}

namespace detail {

inline std::string quote_value(const std::string& value) {
  return value.empty() ? std::string("''") : value;
}

inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      const bool same = a[i - 1] == b[j - 1] || (a[i - 1] == '-' && b[j - 1] == '_') ||
                        (a[i - 1] == '_' && b[j - 1] == '-');
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// Every flag name of `app` and its subcommands ("--epochs", "-h", ...).
inline void flag_names(const CLI::App& app, std::vector<std::string>& out) {
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) out.push_back("--" + name);
    for (const std::string& name : option->get_snames()) out.push_back("-" + name);
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    flag_names(*sub, out);
  }
}

inline bool is_number(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

// The first argument before "--" that looks like a flag and is none of `app`'s, or "".
inline std::string first_unknown_flag(const CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> names;
  flag_names(app, names);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-' || is_number(arg)) continue;
    const size_t equals = arg.find('=');
    if (equals != std::string::npos) arg.resize(equals);
    if (std::find(names.begin(), names.end(), arg) == names.end()) return arg;
  }
  return "";
}

inline std::string closest_flag(const CLI::App& app, const std::string& flag) {
  std::vector<std::string> names;
  flag_names(app, names);
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& name : names) {
    const size_t d = edit_distance(flag, name);
    if (d < best_distance) best_distance = d, best = name;
  }
  return best_distance <= std::max<size_t>(2, flag.size() / 3) ? best : "";
}

// What a value of CLI11's type name should look like, in words.
inline std::string expected_of(const std::string& type_name) {
  if (type_name == "INT") return "an integer";
  if (type_name == "UINT") return "a non-negative integer";
  if (type_name == "FLOAT") return "a number";
  if (type_name == "BOOLEAN") return "true or false";
  return "a value of type " + type_name;
}

// "NAME: MESSAGE" of CLI11 as this program says it (NOTE [Flag errors]).
inline std::string reword(const CLI::App& app, const CLI::ParseError& error) {
  std::string message = error.what();
  const size_t colon = message.find(": ");
  if (dynamic_cast<const CLI::ValidationError*>(&error) != nullptr &&
      message.find(" is invalid; expected ") != std::string::npos && colon != std::string::npos) {
    return message.substr(0, colon) + " " + message.substr(colon + 2);
  }
  if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr) {
    const std::string prefix = "Could not convert: ";
    const size_t equals = message.find(" = ");
    if (message.rfind(prefix, 0) == 0 && equals != std::string::npos) {
      const std::string name = message.substr(prefix.size(), equals - prefix.size());
      const std::string value = message.substr(equals + 3);
      const CLI::Option* option = app.get_option_no_throw(name);
      const std::string expected =
          option != nullptr ? expected_of(option->get_type_name()) : "another value";
      return fmt::format("{} {} is invalid; expected {}", name, quote_value(value), expected);
    }
  }
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr && message.size() > 12 &&
      message.ends_with(" is required")) {
    return message + " but was not given";
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr &&
      message.find(" required ") != std::string::npos && message.ends_with(" missing") &&
      colon != std::string::npos) {
    return message.substr(0, colon) + " needs a value";
  }
  return message;
}

// A validator whose message names the value and what was expected; CLI11 puts the flag first.
inline CLI::Validator value_check(std::string description, std::string expected,
                                  std::function<bool(const std::string&)> accepts) {
  return CLI::Validator(
      [expected = std::move(expected), accepts = std::move(accepts)](std::string& value) {
        return accepts(value)
                   ? std::string()
                   : fmt::format("{} is invalid; expected {}", quote_value(value), expected);
      },
      std::move(description));
}

inline std::optional<long long> as_integer(const std::string& text) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

}  // namespace detail

// Integer >= 1.
inline CLI::Validator positive() {
  return detail::value_check("POSITIVE", "a positive integer", [](const std::string& v) {
    const auto n = detail::as_integer(v);
    return n && *n >= 1;
  });
}
// Integer >= 0.
inline CLI::Validator non_negative() {
  return detail::value_check("NON-NEGATIVE", "a non-negative integer", [](const std::string& v) {
    const auto n = detail::as_integer(v);
    return n && *n >= 0;
  });
}
// A number (not only an integer) >= 0.
inline CLI::Validator non_negative_number() {
  return detail::value_check("NON-NEGATIVE", "a number >= 0", [](const std::string& v) {
    double x = 0;
    const char* end = v.data() + v.size();
    auto [ptr, ec] = std::from_chars(v.data(), end, x);
    return ec == std::errc() && ptr == end && !v.empty() && x >= 0 && x <= 1e300;
  });
}
// Integer in [low, high].
inline CLI::Validator integer_in(long long low, long long high) {
  return detail::value_check(fmt::format("{}..{}", low, high),
                             fmt::format("an integer from {} to {}", low, high),
                             [low, high](const std::string& v) {
                               const auto n = detail::as_integer(v);
                               return n && *n >= low && *n <= high;
                             });
}

// One of `accepted`.
inline CLI::Validator one_of(std::vector<std::string> accepted) {
  std::string list;
  for (const std::string& a : accepted) list += (list.empty() ? "" : ", ") + a;
  return detail::value_check(
      "{" + list + "}", "one of " + list, [accepted = std::move(accepted)](const std::string& v) {
        return std::find(accepted.begin(), accepted.end(), v) != accepted.end();
      });
}

// Shows every option's default in --help and, after the options, `variables` under
// "Environment:". Call before adding options.
inline void setup(CLI::App& app, const std::vector<Variable>& variables = {}) {
  app.option_defaults()->always_capture_default();
  if (variables.empty()) return;
  std::string footer = "\nEnvironment:\n";
  for (const Variable& v : variables) footer += fmt::format("  {:<24} {}\n", v.name, v.description);
  app.footer(footer);
}

// Parses the command line. Returns nothing when the program should go on; otherwise the status
// to exit with: 0 after --help (printed), 2 after a flag error (printed to stderr as NOTE [Flag
// errors] says).
inline std::optional<int> parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    std::string program = app.get_name();
    if (program.empty() && argc > 0) program = argv[0];
    const size_t slash = program.rfind('/');
    if (slash != std::string::npos) program.erase(0, slash + 1);
    std::string message;
    const std::string unknown = detail::first_unknown_flag(app, argc, argv);
    if (!unknown.empty()) {
      const std::string closest = detail::closest_flag(app, unknown);
      message = closest.empty()
                    ? fmt::format("unknown flag {}", unknown)
                    : fmt::format("unknown flag {}; did you mean {}?", unknown, closest);
    } else {
      message = detail::reword(app, error);
    }
    std::fprintf(stderr, "%s: %s (run '%s --help' for every flag)\n", program.c_str(),
                 message.c_str(), program.c_str());
    std::fflush(stderr);
    return 2;
  }
}
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  return parse(app, argc, const_cast<const char* const*>(argv));
}

}  // namespace cleave::flags
