// Static rank tables (RANK_TABLE_FILE): the JSON files of seed 001 that list each host
// ("server_id") and the ranks on it. Two layouts are read:
//   {"group_list": [{"instance_list": [{"rank_id": "0", "server_id": "10.0.0.1",
//                                       "devices": [{"device_id": "0", ...}]}, ...]}]}
//   {"server_list": [{"server_id": "10.0.0.1",
//                     "device": [{"device_id": "0", "rank_id": "0", ...}, ...]}, ...]}
#pragma once

#include <string>
#include <vector>

namespace cleave::cluster {

struct RankTableEntry {
  int rank = 0;
  std::string host;  // server_id
  int device_id = 0;
};

// Every rank of the table at `path`, sorted by rank. Throws cleave::Error naming the file and the
// problem when it cannot be read, is not JSON of either layout, or its ranks are not 0..n-1.
std::vector<RankTableEntry> read_rank_table(const std::string& path);

}  // namespace cleave::cluster
