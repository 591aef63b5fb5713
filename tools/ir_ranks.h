// cleave-ir --ranks: all ranks' subgraphs of a partitioned graph side by side.
//
// NOTE [Per-rank dumps and cut edges]
// The partition pass writes one dump per rank, DIR/<stage>_rank<R>.ir (e.g.
// 15_partition_rank0.ir), in the text form of cleave/ir/dump.h. Each cut edge of the original
// graph is one *send* on its producer's rank and one *recv* on its consumer's rank:
//   %20(out) = RpcSend(%19) {...} primitive_attrs: {dst_rank: 1, group: world, tag: 3}
//   %4(out) = RpcRecv() {...} primitive_attrs: {dtype: Float32, ..., src_rank: 0, tag: 3}
// (attributes in any order). The *tag* names the edge: exactly one send and one recv carry it,
// the send's dst_rank is the recv's rank and the recv's src_rank the send's rank. A tag that
// breaks this (a send or recv without its partner, a tag used twice, a partner on another rank)
// is a *mismatch*: reported as an error, since the ranks would wait on each other forever.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace cleave::tools {

// One value of a rank's graph: an input, parameter or constant ("%para1_data", "%const7") or an
// op ("%12").
struct IrValue {
  std::string name;  // as written, e.g. "%12", "%para3_fc1.weight"
  std::string kind;  // "input", "parameter", "constant" or "op"
  std::string op;    // the primitive, for ops
  std::string instance;
  std::vector<std::string> inputs;  // names of the values it reads ("%3[1]" becomes "%3")
  // Parsed from primitive_attrs for RpcSend / RpcRecv; -1 when absent.
  long long tag = -1, dst_rank = -1, src_rank = -1;
};

// One rank's dump.
struct RankGraph {
  int rank = -1;
  std::filesystem::path path;
  std::string entry;
  std::vector<IrValue> values;  // in file order
  std::vector<std::string> outputs;
  int ops = 0, sends = 0, recvs = 0;
};

// A matched send/recv pair: the cut edge from send (on from_rank) to recv (on to_rank).
struct CutEdge {
  long long tag = -1;
  int from_rank = -1, to_rank = -1;
  std::string send, recv;  // value names on their ranks
};

struct PartitionView {
  std::string stage;
  std::vector<RankGraph> ranks;  // by increasing rank
  std::vector<CutEdge> cut_edges;
  std::vector<std::string> errors;  // mismatched tags (NOTE [Per-rank dumps and cut edges])
};

// Parses one dump (the text form). Throws std::runtime_error for an unreadable file.
RankGraph parse_rank_dump(const std::filesystem::path& path, int rank);

// Reads DIR/<stage>_rank<R>.ir for every R present. An empty `stage` picks the only stage with
// per-rank dumps in DIR. Throws std::runtime_error when DIR holds no such dumps, or several
// stages and none was chosen (the message lists them).
PartitionView read_partition(const std::filesystem::path& dir, const std::string& stage);

// Pairs the sends and recvs by tag into cut_edges; each mismatch becomes one line of errors.
void match_cut_edges(PartitionView& view);

// One Graphviz digraph: one cluster per rank with its values and their edges, and the cut edges
// between clusters (dashed, labelled "tag T").
std::string partition_dot(const PartitionView& view);

}  // namespace cleave::tools
