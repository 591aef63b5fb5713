// The environment variables cleave reads (CLEAVE_*), in one table.
//
// NOTE [Environment variables]
// Every CLEAVE_* variable the libraries read is one row of the table in src/core/env.cc: its
// name, the values it accepts, its default and what it does. docs/environment.md lists the same
// rows (tests/core/env_test.cc keeps the two equal). Code reads a variable only through the
// functions below, once, where its layer takes its settings (a compiled step reads its load
// options before it is loaded, a group its shared-memory switch when it is made): a value
// outside the accepted ones is an Error naming the variable, the value, what is accepted and
// what the variable does. MindSpore's launch variables (MS_ROLE, MS_SCHED_HOST, RANK_TABLE_FILE,
// ...) and Open MPI's are read by the cluster layer (docs/cluster.md).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace cleave::env {

struct Variable {
  std::string_view name;      // "CLEAVE_RPC_SHM"
  std::string_view accepted;  // "0 or 1": what an error says is expected
  std::string_view fallback;  // the value when unset or empty; "" for none
  std::string_view meaning;   // one line: what it does
};

// The table, sorted by name.
std::span<const Variable> variables();
// The row of `name`; a broken invariant when the table has none (every reader is in the table).
const Variable& variable(std::string_view name);

// Whether `name` is set to a non-empty value.
bool is_set(std::string_view name);
// Its value, or its default when unset or empty.
std::string text(std::string_view name);
// 0 or 1.
bool flag(std::string_view name);
// A whole decimal number in [min, max].
int64_t integer(std::string_view name, int64_t min, int64_t max);
// One of `choices`; returns its index.
size_t choice(std::string_view name, std::initializer_list<std::string_view> choices);

}  // namespace cleave::env
