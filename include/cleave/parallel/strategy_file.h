// Strategy files (set_auto_parallel_context's strategy_ckpt_save_file / strategy_ckpt_load_file):
// every operator's strategy and every parameter's layout, as JSON.
//
// NOTE [Strategy file]
// The JSON form of MindSpore's strategy checkpoint, with cleave's layouts: "format"
// ("cleave-strategy"), "version", "device_num", "current_stage", "parallel_strategy_item" (per
// operator: "stage", "parallel_strategy", "derived") and "parallel_layout_item" (per parameter:
// "dev_matrix", "tensor_map", "tensor_shape", "layout"); docs/design/sharding.md, section 5, has
// an example. An operator's key is "<scope>/<primitive>-<instance name>" (instance names are
// unique within a network, the scope says where it sits); "derived" says whether propagation or
// the default chose it rather than shard(). A tensor map has, per dimension, the device axes
// splitting it (none: not split). Loading sets the strategy of every operator the file names
// (over one given with shard(): the file is what the user asked to reuse); operators it does not
// name are left as they are (propagated or data parallel). A file for another device count, a
// strategy another network's operator would need, or a file naming none of this network's
// operators is an error naming the file.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "cleave/ir/graph.h"
#include "cleave/parallel/step_parallel.h"

namespace cleave::parallel {

// Writes the strategies and parameter layouts of `plan` (of `global`, as planned) to `path`
// atomically; a parameter named in `parameter_layouts` is written with that layout instead (the
// parallel optimizer's, NOTE [Parallel optimizer] in cleave/parallel/parallel_optimizer.h). A
// plan without operators (a DATA_PARALLEL step's) writes parameter layouts only. Throws Error
// naming the path when it cannot be written.
void save_strategy_file(const std::string& path, const ir::Graph& global, const ParallelPlan& plan,
                        const std::map<std::string, Layout>& parameter_layouts = {});

// Sets Node::strategy (and strategy_derived) of the operators of `global` named in the file at
// `path` (NOTE [Strategy file]); returns how many. Throws Error naming the path and what is
// wrong.
int load_strategy_file(const std::string& path, ir::Graph& global, int64_t device_num);

// The parameters' layouts a strategy file records ("parallel_layout_item"), by parameter name,
// with each one's global shape, and the device count they were planned for.
struct ParameterLayouts {
  int64_t device_num = 1;
  std::map<std::string, std::pair<Layout, Shape>> layouts;
};
// Reads them from the file at `path`. Throws Error naming the path and the parameter for a file
// that is not a strategy file, or a layout that is invalid or does not fit its shape.
ParameterLayouts load_parameter_layouts(const std::string& path);

// The key of operator `n` in a strategy file: "<scope>/<primitive>-<instance name>".
std::string strategy_key(const ir::Node& n);

}  // namespace cleave::parallel
