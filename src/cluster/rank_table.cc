#include "cluster/rank_table.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cleave/core/error.h"

namespace cleave::cluster {
namespace {

using nlohmann::json;

// Rank tables write numbers as strings ("rank_id": "0"); plain numbers are accepted too.
int int_field(const json& object, const char* field, const std::string& path) {
  CLEAVE_CHECK_ARG(object.is_object() && object.contains(field),
                   "RANK_TABLE_FILE '{}': an entry has no \"{}\": {}", path, field, object.dump());
  const json& value = object.at(field);
  // Range-checked before the conversion: 4294967296 must not become rank 0, nor -1 a device.
  if (value.is_number_unsigned() && value.get<uint64_t>() <= INT_MAX) return value.get<int>();
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    try {
      size_t used = 0;
      int parsed = std::stoi(text, &used);
      if (used == text.size() && parsed >= 0) return parsed;
    } catch (const std::exception&) {
    }
  }
  CLEAVE_FAIL("RANK_TABLE_FILE '{}': \"{}\" is {}; expected a non-negative integer", path, field,
              value.dump());
}

std::string string_field(const json& object, const char* field, const std::string& path) {
  CLEAVE_CHECK_ARG(object.contains(field) && object.at(field).is_string(),
                   "RANK_TABLE_FILE '{}': an entry has no string \"{}\": {}", path, field,
                   object.dump());
  return object.at(field).get<std::string>();
}

}  // namespace

std::vector<RankTableEntry> read_rank_table(const std::string& path) {
  std::ifstream file(path);
  CLEAVE_CHECK_ARG(file.good(), "RANK_TABLE_FILE '{}' cannot be opened", path);
  json table = json::parse(file, nullptr, /*allow_exceptions=*/false);
  CLEAVE_CHECK_ARG(!table.is_discarded() && table.is_object(),
                   "RANK_TABLE_FILE '{}' is not a JSON object", path);
  std::vector<RankTableEntry> entries;
  if (table.contains("group_list")) {
    for (const json& group : table.at("group_list")) {
      CLEAVE_CHECK_ARG(group.contains("instance_list"),
                       "RANK_TABLE_FILE '{}': a group_list entry has no \"instance_list\"", path);
      for (const json& instance : group.at("instance_list")) {
        RankTableEntry entry;
        entry.rank = int_field(instance, "rank_id", path);
        entry.host = string_field(instance, "server_id", path);
        if (instance.contains("devices")) {
          const json& devices = instance.at("devices");
          CLEAVE_CHECK_ARG(devices.is_array(),
                           "RANK_TABLE_FILE '{}': rank {}'s \"devices\" is {}; expected an array "
                           "of {{\"device_id\": ...}} objects",
                           path, entry.rank, devices.dump());
          if (!devices.empty()) entry.device_id = int_field(devices.at(0), "device_id", path);
        }
        entries.push_back(entry);
      }
    }
  } else if (table.contains("server_list")) {
    for (const json& server : table.at("server_list")) {
      std::string host = string_field(server, "server_id", path);
      CLEAVE_CHECK_ARG(server.contains("device"),
                       "RANK_TABLE_FILE '{}': server '{}' has no \"device\" list", path, host);
      for (const json& device : server.at("device")) {
        entries.push_back(
            {int_field(device, "rank_id", path), host, int_field(device, "device_id", path)});
      }
    }
  } else {
    CLEAVE_FAIL(
        "RANK_TABLE_FILE '{}' has neither \"group_list\" nor \"server_list\"; expected a rank "
        "table as MindSpore writes it",
        path);
  }
  CLEAVE_CHECK_ARG(!entries.empty(), "RANK_TABLE_FILE '{}' lists no ranks", path);
  std::sort(entries.begin(), entries.end(),
            [](const RankTableEntry& a, const RankTableEntry& b) { return a.rank < b.rank; });
  for (size_t i = 0; i < entries.size(); ++i) {
    CLEAVE_CHECK_ARG(entries[i].rank == static_cast<int>(i),
                     "RANK_TABLE_FILE '{}': its ranks must be 0..{} each once; rank {} is {}", path,
                     entries.size() - 1, i,
                     entries[i].rank < static_cast<int>(i) ? "repeated" : "missing");
  }
  return entries;
}

}  // namespace cleave::cluster
