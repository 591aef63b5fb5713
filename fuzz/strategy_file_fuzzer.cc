// Strategy files (load_strategy_file, load_parameter_layouts): any bytes give strategies set on the
// network's operators or a cleave::Error. A file that loads is then planned, so that a strategy
// the file sets is checked as one given with shard() would be.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cleave/core/error.h"
#include "cleave/ir/parse.h"
#include "cleave/parallel/strategy_file.h"
#include "fuzz_util.h"

namespace {

// The network of tests/ir/golden/01_trace.ir: MatMul, ReLU, MSE, ReduceMean.
constexpr std::string_view kNetwork = R"(# IR entry: @train_step
# Total inputs: 2
# Total params: 1
# Total ops: 4
%para1_data: <Tensor[Float32], (8, 16)> : input
%para2_label: <Tensor[Float32], (8, 8)> : input
%para3__backbone.w: <Tensor[Float32], (16, 8)> : parameter

subgraph @train_step(%para1_data, %para2_label, %para3__backbone.w) {
  %3(out) = MatMul(%para1_data, %para3__backbone.w) {instance name: _backbone.matmul} primitive_attrs: {transpose_a: false, transpose_b: false}
      : (<Tensor[Float32], (8, 16)>, <Tensor[Float32], (16, 8)>) -> (<Tensor[Float32], (8, 8)>)
      # scope: (Default/network-WithLossCell/_backbone-TinyNet)
  %4(out) = ReLU(%3) {instance name: _backbone.relu}
      : (<Tensor[Float32], (8, 8)>) -> (<Tensor[Float32], (8, 8)>)
      # scope: (Default/network-WithLossCell/_backbone-TinyNet)
  %5(out) = MSE(%4, %para2_label) {instance name: _loss_fn.mse}
      : (<Tensor[Float32], (8, 8)>, <Tensor[Float32], (8, 8)>) -> (<Tensor[Float32], (8, 8)>)
      # scope: (Default/network-WithLossCell/_loss_fn-MSELoss)
  %6(out) = ReduceMean(%5) {instance name: _loss_fn.reducemean} primitive_attrs: {axis: (), keep_dims: false}
      : (<Tensor[Float32], (8, 8)>) -> (<Tensor[Float32], ()>)
      # scope: (Default/network-WithLossCell/_loss_fn-MSELoss)
  return(%6)
}
)";

constexpr int64_t kDeviceNum = 8;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const cleave::ir::Graph network = cleave::ir::parse_text(kNetwork, "network").graph;
  const std::string path = cleave::fuzz::write_file(
      "strategy.json", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    cleave::ir::Graph g = network;
    if (cleave::parallel::load_strategy_file(path, g, kDeviceNum) > 0) {
      cleave::parallel::plan_step_parallel(g, {.device_num = kDeviceNum});
    }
  } catch (const cleave::Error&) {
  }
  try {
    cleave::parallel::load_parameter_layouts(path);
  } catch (const cleave::Error&) {
  }
  return 0;
}
