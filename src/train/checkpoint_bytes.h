// Checkpoint tensors as bytes in place (inside the train layer): what cleave-ckpt merge and
// transform copy from the mapped source files straight into the files they write, without
// decoding them into Tensors (NOTE [Merging without copies] in src/train/sharded_checkpoint.cc).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cleave/core/atomic_file.h"
#include "cleave/core/dtype.h"
#include "cleave/core/shape.h"

namespace cleave::train {

// A tensor's content as consecutive pieces (row-major order), each viewing memory its owner keeps
// alive (a mapped file, a Tensor).
struct TensorBytes {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<std::string_view> pieces;
};

// The tensors of the .ckpt file `path` whose bytes are `bytes` (mapped), viewing them: one piece
// each. Checks what load_checkpoint checks (the wire format, dtypes, sizes, Bool bytes, the
// checksum) and throws the same Errors.
std::map<std::string, TensorBytes> ckpt_tensor_bytes(const std::string& path,
                                                     std::string_view bytes);

// Writes `tensors` (in this order) to the .ckpt file `path` atomically, as save_checkpoint would
// write the same tensors; pieces inside the mapped `sources` are copied from those files by the
// kernel (write_file_atomically's regions).
void save_ckpt_bytes(const std::vector<std::pair<std::string, TensorBytes>>& tensors,
                     const std::string& path, const std::vector<FileRegion>& sources = {});
// The same, left to be committed (NOTE [Files committed together] in cleave/core/atomic_file.h).
PendingFile write_ckpt_bytes(const std::vector<std::pair<std::string, TensorBytes>>& tensors,
                             const std::string& path, const std::vector<FileRegion>& sources = {});

}  // namespace cleave::train
