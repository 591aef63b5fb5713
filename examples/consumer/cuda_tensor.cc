// The smallest use of cleave: a tensor on the first GPU, or the reason there is none. It calls
// nothing of the kernels layer, whose static initializer installs the CUDA allocator, so it also
// checks that the package links that initializer into every program (NOTE [The CUDA allocator in
// every program] in cleave's top CMakeLists.txt): a CUDA build of cleave must never answer "no
// CUDA support" here.
#include "cleave/core/error.h"
#include "cleave/core/tensor.h"

int main() {
  using namespace cleave;
  try {
    const Tensor t = Tensor::empty({4}, DType::kFloat32, Device::cuda(0));
    fmt::print("a tensor on {}\n", t.device().to_string());
  } catch (const Error& e) {
    fmt::print("no tensor on CUDA:0: {}\n", e.what());
  }
  return 0;
}
