// save_checkpoint / load_checkpoint in MindSpore's .ckpt layout and in safetensors.
#include <cmath>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "cleave/core/atomic_file.h"
#include "cleave/core/error.h"
#include "cleave/train/checkpoint.h"
#include "train/checkpoint_bytes.h"
#include "train/crc32c.h"

namespace cleave::train {
namespace {

constexpr const char* kWhat = "checkpoint";
// The "__metadata__" key of a safetensors file's checksum (NOTE [Checkpoint checksums]).
constexpr const char* kChecksumKey = "cleave.crc32c";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- dtype names ----

struct DTypeNames {
  DType dtype;
  const char* ckpt;         // MindSpore's tensor_type
  const char* safetensors;  // safetensors' dtype
};
constexpr DTypeNames kDTypes[] = {
    {DType::kFloat32, "Float32", "F32"}, {DType::kFloat64, "Float64", "F64"},
    {DType::kInt32, "Int32", "I32"},     {DType::kInt64, "Int64", "I64"},
    {DType::kBool, "Bool", "BOOL"},
};

const DTypeNames& names_of(DType dtype) {
  for (const DTypeNames& n : kDTypes) {
    if (n.dtype == dtype) return n;
  }
  CLEAVE_ASSERT(false, "dtype without checkpoint names");
}

std::string accepted(bool ckpt) {
  std::string out;
  for (const DTypeNames& n : kDTypes)
    out += (out.empty() ? "" : ", ") + std::string(ckpt ? n.ckpt : n.safetensors);
  return out;
}

DType parse_dtype(const std::string& path, const std::string& name, const std::string& text,
                  bool ckpt) {
  for (const DTypeNames& n : kDTypes) {
    if (text == (ckpt ? n.ckpt : n.safetensors)) return n.dtype;
  }
  CLEAVE_FAIL(
      "cannot load checkpoint '{}': tensor '{}' has dtype '{}', which cleave does not "
      "support; expected one of {}",
      path, name, text, accepted(ckpt));
}

// The shape `dims` of a tensor of `dtype` whose content is `content`, checked: a valid shape whose
// size is the content's, and Bool bytes of 0 or 1.
Shape checked_content(const std::string& path, const std::string& name, DType dtype,
                      const std::vector<int64_t>& dims, std::string_view content) {
  int64_t numel = 1;
  for (int64_t d : dims) {
    CLEAVE_CHECK_ARG(d >= 0 && (d == 0 || numel <= (int64_t{1} << 40) / d),
                     "cannot load checkpoint '{}': tensor '{}' has an invalid shape (dim {}); the "
                     "file is corrupt",
                     path, name, d);
    numel *= d;
  }
  const size_t expected = static_cast<size_t>(numel) * dtype_size(dtype);
  CLEAVE_CHECK_ARG(content.size() == expected,
                   "cannot load checkpoint '{}': tensor '{}' ({} {}) has {} bytes of data; "
                   "expected {}: the file is truncated or corrupt",
                   path, name, dtype_name(dtype), Shape(dims).to_string(), content.size(),
                   expected);
  if (dtype == DType::kBool) {
    for (char byte : content) {
      CLEAVE_CHECK_ARG(static_cast<unsigned char>(byte) <= 1,
                       "cannot load checkpoint '{}': Bool tensor '{}' holds byte {}; expected 0 "
                       "or 1",
                       path, name, static_cast<int>(static_cast<unsigned char>(byte)));
    }
  }
  return Shape(dims);
}

// A tensor of `dtype` and `dims` from raw bytes, checked as checked_content checks them.
Tensor tensor_from_bytes(const std::string& path, const std::string& name, DType dtype,
                         const std::vector<int64_t>& dims, const char* bytes, size_t size) {
  Tensor t = Tensor::empty(checked_content(path, name, dtype, dims, {bytes, size}), dtype);
  if (size > 0) std::memcpy(t.raw_data(), bytes, size);
  return t;
}

// ---- checksum (NOTE [Checkpoint checksums]) ----

// Crc32c: src/train/crc32c.h (NOTE [Three CRC streams]).

// One tensor's share of the checksum: its name, dtype and dims, then its content.
void checksum_header(Crc32c& crc, const std::string& name, DType dtype, const Shape& shape) {
  crc.update(name.c_str(), name.size() + 1);
  const char* type = names_of(dtype).ckpt;
  crc.update(type, std::strlen(type) + 1);
  for (int64_t d : shape.dims()) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i)
      le[i] = static_cast<unsigned char>(static_cast<uint64_t>(d) >> (8 * i));
    crc.update(le, sizeof le);
  }
}

// The checksum of tensors by name (name order, whatever the order in the file).
uint32_t content_checksum(const std::map<std::string, const Tensor*>& tensors) {
  Crc32c crc;
  for (const auto& [name, t] : tensors) {
    checksum_header(crc, name, t->dtype(), t->shape());
    crc.update(t->raw_data(), t->nbytes());
  }
  return crc.value();
}
uint32_t content_checksum(const std::map<std::string, const TensorBytes*>& tensors) {
  Crc32c crc;
  for (const auto& [name, t] : tensors) {
    checksum_header(crc, name, t->dtype, t->shape);
    for (std::string_view piece : t->pieces) crc.update(piece.data(), piece.size());
  }
  return crc.value();
}
uint32_t content_checksum(const NamedTensors& tensors) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : tensors) by_name.emplace(name, &t);
  return content_checksum(by_name);
}
uint32_t content_checksum(const ParamMap& tensors) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : tensors) by_name.emplace(name, &t);
  return content_checksum(by_name);
}

void check_checksum(const std::string& path, uint32_t computed, uint32_t stored, size_t count) {
  CLEAVE_CHECK_ARG(computed == stored,
                   "cannot load checkpoint '{}': its content does not match its checksum (CRC32C "
                   "stored {:08x}, computed {:08x} over {} tensor(s)); the file is corrupt (a "
                   "changed byte or a lost tensor): use another copy or save it again",
                   path, stored, computed, count);
}
void verify_checksum(const std::string& path, const ParamMap& tensors, uint32_t stored) {
  check_checksum(path, content_checksum(tensors), stored, tensors.size());
}

// NonFinite::kRefuse: throws at the first NaN or infinity of a floating-point tensor.
template <typename T>
void refuse_non_finite(const std::string& path, const std::string& name, const Tensor& t) {
  const T* data = static_cast<const T*>(t.raw_data());
  const int64_t n = t.numel();
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(data[i])) {
      if (first < 0) first = i;
      ++count;
    }
  }
  CLEAVE_CHECK_ARG(count == 0,
                   "cannot load checkpoint '{}': tensor '{}' ({} {}) holds {} non-finite value(s), "
                   "the first {} at flat index {}; non-finite values are refused "
                   "(LoadCheckpointOptions.non_finite is NonFinite::kRefuse)",
                   path, name, dtype_name(t.dtype()), t.shape().to_string(), count,
                   first < 0 ? 0.0 : static_cast<double>(data[first]), first);
}

void check_finite(const std::string& path, const ParamMap& tensors) {
  for (const auto& [name, t] : tensors) {
    if (t.dtype() == DType::kFloat32) refuse_non_finite<float>(path, name, t);
    if (t.dtype() == DType::kFloat64) refuse_non_finite<double>(path, name, t);
  }
}

void check_tensors(const NamedTensors& tensors, const std::string& path) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    CLEAVE_CHECK_ARG(!name.empty(), "cannot save checkpoint '{}': a tensor has an empty name",
                     path);
    CLEAVE_CHECK_ARG(t.defined(), "cannot save checkpoint '{}': tensor '{}' is undefined", path,
                     name);
    CLEAVE_CHECK_ARG(t.device().is_cpu(),
                     "cannot save checkpoint '{}': tensor '{}' is on {}; copy it to the CPU first",
                     path, name, t.device().to_string());
    CLEAVE_CHECK_ARG(seen.insert(name).second,
                     "cannot save checkpoint '{}': the name '{}' is given twice; names must be "
                     "unique",
                     path, name);
  }
}

// ---- .ckpt ----

// NOTE [Encoding .ckpt by hand]
// A .ckpt is one protobuf message (src/train/checkpoint.proto). cleave writes and reads its few
// fields itself rather than through the generated classes: those copy every tensor's bytes into
// a std::string and the message into another (three copies of the model, and as many page
// faults, before the write), which made saving a 1 GB model CPU-bound at a tenth of the disk's
// speed (bench/run.sh ckpt). The writer emits the fields' keys and lengths into small buffers and
// hands the file the tensors' own memory; the reader walks the bytes once and copies each tensor's
// content straight into its Tensor. The wire format: a key is varint(field << 3 | wire type);
// wire type 2 (length-delimited) is followed by varint(length) and the bytes, 0 by a varint, 5 by
// 4 little-endian bytes. Fields come in any order; unknown fields are skipped (MindSpore's readers
// skip cleave's 100 and 101 the same way). The generated classes stay the reference: the tests
// decode the writer's files with them (and with protoc --decode).

void append_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Key and length of a length-delimited field.
void append_len(std::string& out, uint32_t field, uint64_t length) {
  append_varint(out, (uint64_t{field} << 3) | 2);
  append_varint(out, length);
}

// The file's bytes as consecutive parts: keys and lengths in `owned`, the tensors' bytes in place.
struct CkptParts {
  std::deque<std::string> owned;
  std::vector<std::string_view> parts;
  void add(std::string s) { parts.emplace_back(owned.emplace_back(std::move(s))); }
};

// `tensors` in this order; the checksum covers them in name order.
CkptParts encode_ckpt(const std::vector<std::pair<std::string, TensorBytes>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  CkptParts out;
  // The checksum first (NOTE [Checkpoint checksums]): field 100, wire type 5, its key the varint
  // 805 (0xa5 0x06), then 4 little-endian bytes.
  std::map<std::string, const TensorBytes*> by_name;
  for (const auto& [name, t] : tensors) by_name.emplace(name, &t);
  const uint32_t crc = content_checksum(by_name);
  std::string head("\xa5\x06", 2);
  for (size_t i = 0; i < 4; ++i) head.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  for (const auto& [name, t] : tensors) {
    // TensorProto: dims (field 1, varints), tensor_type (2), tensor_content (3).
    std::string tensor;
    for (int64_t d : t.shape.dims()) {
      tensor.push_back('\x08');
      append_varint(tensor, static_cast<uint64_t>(d));
    }
    const char* type = names_of(t.dtype).ckpt;
    append_len(tensor, 2, std::strlen(type));
    tensor += type;
    size_t content = 0;
    for (std::string_view piece : t.pieces) content += piece.size();
    append_len(tensor, 3, content);
    const size_t tensor_size = tensor.size() + content;
    // Value: tag (1), tensor (2); Checkpoint.value is field 1.
    std::string value;
    append_len(value, 1, name.size());
    value += name;
    append_len(value, 2, tensor_size);
    append_len(head, 1, value.size() + tensor_size);
    head += value;
    head += tensor;
    out.add(std::move(head));
    head.clear();
    for (std::string_view piece : t.pieces) {
      if (!piece.empty()) out.parts.push_back(piece);
    }
  }
  for (const auto& [key, v] : metadata) {
    std::string entry;
    append_len(entry, 1, key.size());
    entry += key;
    append_len(entry, 2, v.size());
    entry += v;
    append_len(head, 101, entry.size());
    head += entry;
  }
  if (!head.empty()) out.add(std::move(head));
  return out;
}

// Tensors as byte views of their own memory.
std::vector<std::pair<std::string, TensorBytes>> bytes_of(const NamedTensors& tensors) {
  std::vector<std::pair<std::string, TensorBytes>> out;
  for (const auto& [name, t] : tensors) {
    out.emplace_back(name, TensorBytes{.dtype = t.dtype(),
                                       .shape = t.shape(),
                                       .pieces = {std::string_view(
                                           static_cast<const char*>(t.raw_data()), t.nbytes())}});
  }
  return out;
}

// Reads a protobuf message's fields from [p, end); every malformed or truncated field is an
// Error naming the file.
class WireReader {
 public:
  WireReader(const std::string& path, const char* begin, const char* end)
      : path_(path), p_(begin), end_(end) {}
  bool done() const { return p_ == end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) corrupt("a number runs past the end");
      const auto byte = static_cast<unsigned char>(*p_++);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    corrupt("a number is longer than 10 bytes");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) corrupt("a field's length runs past the end");
    const std::string_view out(p_, static_cast<size_t>(n));
    p_ += n;
    return out;
  }
  uint32_t fixed32() {
    if (end_ - p_ < 4) corrupt("a fixed32 field runs past the end");
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p_[i]);
    p_ += 4;
    return v;
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        return;
      case 1:
        if (end_ - p_ < 8) corrupt("a fixed64 field runs past the end");
        p_ += 8;
        return;
      case 2:
        bytes();
        return;
      case 5:
        fixed32();
        return;
      default:
        corrupt(fmt::format("wire type {} is not one a checkpoint uses", wire_type));
    }
  }
  // The length-delimited fields 1 and 2 of the message this reader holds (Value's tag and
  // tensor, Metadata's key and value), the last of each if repeated; other fields skipped.
  std::pair<std::optional<std::string_view>, std::optional<std::string_view>> fields_1_and_2() {
    std::optional<std::string_view> first, second;
    while (!done()) {
      const uint64_t key = varint();
      if (key == ((1 << 3) | 2)) {
        first = bytes();
      } else if (key == ((2 << 3) | 2)) {
        second = bytes();
      } else {
        skip(static_cast<uint32_t>(key & 7));
      }
    }
    return {first, second};
  }
  WireReader sub(std::string_view bytes) const {
    return WireReader(path_, bytes.data(), bytes.data() + bytes.size());
  }
  [[noreturn]] void corrupt(const std::string& what) const {
    CLEAVE_FAIL(
        "cannot load checkpoint '{}': it is not a valid .ckpt file (the protobuf message does not "
        "parse: {}; the file is truncated or corrupt, or not a checkpoint)",
        path_, what);
  }

 private:
  const std::string& path_;
  const char* p_;
  const char* end_;
};

struct DecodedCkpt {
  ParamMap tensors;
  std::map<std::string, TensorBytes> views;  // Decode::kViews
  std::map<std::string, std::string> metadata;
  std::optional<uint32_t> crc32c;
};

enum class Decode {
  kMetadata,  // the metadata and checksum only (the tensors' bytes are skipped, not copied)
  kTensors,   // and the tensors, copied into Tensors
  kViews      // and the tensors, viewed in place
};

DecodedCkpt decode_ckpt(const std::string& path, std::string_view bytes, Decode mode) {
  DecodedCkpt out;
  WireReader file(path, bytes.data(), bytes.data() + bytes.size());
  while (!file.done()) {
    const uint64_t key = file.varint();
    const uint64_t field = key >> 3;
    const auto wire = static_cast<uint32_t>(key & 7);
    if (field == 100 && wire == 5) {
      out.crc32c = file.fixed32();
    } else if (field == 101 && wire == 2) {
      const auto [k, v] = file.sub(file.bytes()).fields_1_and_2();
      if (!k || !v) file.corrupt("a metadata entry lacks its key or value");
      out.metadata[std::string(*k)] = std::string(*v);
    } else if (field == 1 && wire == 2) {
      const auto [tag, tensor] = file.sub(file.bytes()).fields_1_and_2();
      if (!tag || !tensor) file.corrupt("a value lacks its tag or tensor");
      const std::string name(*tag);
      WireReader tp = file.sub(*tensor);
      std::vector<int64_t> dims;
      std::optional<std::string_view> type, content;
      while (!tp.done()) {
        const uint64_t tk = tp.varint();
        if (tk == ((1 << 3) | 0)) {
          dims.push_back(static_cast<int64_t>(tp.varint()));
        } else if (tk == ((1 << 3) | 2)) {  // packed dims
          WireReader packed = tp.sub(tp.bytes());
          while (!packed.done()) dims.push_back(static_cast<int64_t>(packed.varint()));
        } else if (tk == ((2 << 3) | 2)) {
          type = tp.bytes();
        } else if (tk == ((3 << 3) | 2)) {
          content = tp.bytes();
        } else {
          tp.skip(static_cast<uint32_t>(tk & 7));
        }
      }
      if (!type || !content)
        file.corrupt(fmt::format("tensor '{}' lacks its type or content", name));
      if (mode == Decode::kMetadata) continue;
      const DType dtype = parse_dtype(path, name, std::string(*type), /*ckpt=*/true);
      bool added = false;
      if (mode == Decode::kViews) {
        const Shape shape = checked_content(path, name, dtype, dims, *content);
        added = out.views.emplace(name, TensorBytes{dtype, shape, {*content}}).second;
      } else {
        added = out.tensors
                    .emplace(name, tensor_from_bytes(path, name, dtype, dims, content->data(),
                                                     content->size()))
                    .second;
      }
      CLEAVE_CHECK_ARG(
          added, "cannot load checkpoint '{}': the name '{}' appears twice; the file is corrupt",
          path, name);
    } else {
      file.skip(wire);
    }
  }
  if (mode == Decode::kTensors && out.crc32c) verify_checksum(path, out.tensors, *out.crc32c);
  if (mode == Decode::kViews && out.crc32c) {
    std::map<std::string, const TensorBytes*> by_name;
    for (const auto& [name, t] : out.views) by_name.emplace(name, &t);
    check_checksum(path, content_checksum(by_name), *out.crc32c, out.views.size());
  }
  return out;
}

// ---- safetensors ----

std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::map<std::string, std::string> meta = metadata;
  meta[kChecksumKey] = fmt::format("{:08x}", content_checksum(tensors));
  header["__metadata__"] = meta;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const size_t end = offset + t.nbytes();
    header[name] = {{"dtype", names_of(t.dtype()).safetensors},
                    {"shape", t.shape().dims()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : tensors) {
    out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  return out;
}

// The header of a safetensors file, checked; `data_begin` receives the offset of the data.
nlohmann::json parse_safetensors_header(const std::string& path, std::string_view bytes,
                                        size_t& data_begin) {
  CLEAVE_CHECK_ARG(bytes.size() >= 8,
                   "cannot load checkpoint '{}': the file has {} bytes, fewer than the 8 of the "
                   "safetensors header length; it is truncated or not a safetensors file",
                   path, bytes.size());
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  }
  CLEAVE_CHECK_ARG(header_len <= bytes.size() - 8,
                   "cannot load checkpoint '{}': the safetensors header length is {} bytes but "
                   "only {} bytes follow it; the file is truncated or not a safetensors file",
                   path, header_len, bytes.size() - 8);
  nlohmann::json header =
      nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(header_len),
                            nullptr, /*allow_exceptions=*/false);
  CLEAVE_CHECK_ARG(header.is_object(),
                   "cannot load checkpoint '{}': the safetensors header is not a JSON object; the "
                   "file is corrupt",
                   path);
  data_begin = 8 + header_len;
  return header;
}

ParamMap decode_safetensors(const std::string& path, std::string_view bytes) {
  size_t data_begin = 0;
  const nlohmann::json header = parse_safetensors_header(path, bytes, data_begin);
  const size_t data_size = bytes.size() - data_begin;
  ParamMap out;
  for (const auto& item : header.items()) {
    // Named copies, not a structured binding: `bad` captures them (clang before 16 cannot
    // capture a structured binding in a lambda).
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& what) {
      CLEAVE_FAIL(
          "cannot load checkpoint '{}': the safetensors entry of '{}' {}; the file is "
          "corrupt",
          path, name, what);
    };
    if (!entry.is_object()) bad("is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) bad("has no string \"dtype\"");
    if (!entry.contains("shape") || !entry["shape"].is_array()) bad("has no array \"shape\"");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      bad("has no \"data_offsets\" [begin, end]");
    }
    std::vector<int64_t> dims;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer()) bad("has a shape entry that is not an integer");
      dims.push_back(d.get<int64_t>());
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      bad("has data_offsets that are not non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    CLEAVE_CHECK_ARG(begin <= end && end <= data_size,
                     "cannot load checkpoint '{}': tensor '{}' has data_offsets [{}, {}] but the "
                     "data section has {} bytes; the file is truncated or corrupt",
                     path, name, begin, end, data_size);
    const DType dtype = parse_dtype(path, name, entry["dtype"].get<std::string>(), false);
    out.emplace(name, tensor_from_bytes(path, name, dtype, dims, bytes.data() + data_begin + begin,
                                        end - begin));
  }
  if (header.contains("__metadata__") && header["__metadata__"].is_object() &&
      header["__metadata__"].contains(kChecksumKey)) {
    const nlohmann::json& stored = header["__metadata__"][kChecksumKey];
    uint32_t crc = 0;
    bool valid = stored.is_string() && stored.get<std::string>().size() == 8;
    if (valid) {
      for (char c : stored.get<std::string>()) {
        const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        valid = valid && digit >= 0;
        crc = (crc << 4) | static_cast<uint32_t>(digit < 0 ? 0 : digit);
      }
    }
    CLEAVE_CHECK_ARG(valid,
                     "cannot load checkpoint '{}': metadata \"{}\" is {}; expected 8 lowercase hex "
                     "digits (a CRC32C); the file is corrupt",
                     path, kChecksumKey, stored.dump());
    verify_checksum(path, out, crc);
  }
  return out;
}

}  // namespace

CheckpointFormat checkpoint_format(const std::string& path) {
  if (ends_with(path, ".ckpt")) return CheckpointFormat::kCkpt;
  if (ends_with(path, ".safetensors")) return CheckpointFormat::kSafetensors;
  CLEAVE_FAIL(
      "checkpoint '{}': unknown format; expected a file name ending in .ckpt "
      "(MindSpore's layout) or .safetensors",
      path);
}

void save_checkpoint(const nn::Cell& cell, const std::string& path) {
  save_checkpoint(cell.parameters_and_names(), path);
}

void save_checkpoint(const NamedTensors& tensors, const std::string& path,
                     const std::map<std::string, std::string>& metadata) {
  const CheckpointFormat format = checkpoint_format(path);
  check_tensors(tensors, path);
  CLEAVE_CHECK_ARG(metadata.count(kChecksumKey) == 0,
                   "cannot save checkpoint '{}': metadata key \"{}\" is reserved for cleave's "
                   "checksum; use another key",
                   path, kChecksumKey);
  if (format == CheckpointFormat::kCkpt) {
    const CkptParts parts = encode_ckpt(bytes_of(tensors), metadata);
    write_file_atomically(path, parts.parts, kWhat);
  } else {
    write_file_atomically(path, encode_safetensors(tensors, metadata), kWhat);
  }
}

ParamMap load_checkpoint(const std::string& path, const LoadCheckpointOptions& options) {
  const CheckpointFormat format = checkpoint_format(path);
  const MappedFile file(path, kWhat);
  const std::string_view bytes = file.bytes();
  // An empty protobuf message would parse as a checkpoint of no tensors.
  CLEAVE_CHECK_ARG(!bytes.empty(),
                   "cannot load checkpoint '{}': the file is empty (0 bytes); a save that never "
                   "completed or a copy that failed left it: use another copy",
                   path);
  ParamMap out = format == CheckpointFormat::kCkpt
                     ? decode_ckpt(path, bytes, Decode::kTensors).tensors
                     : decode_safetensors(path, bytes);
  if (options.non_finite == NonFinite::kRefuse) check_finite(path, out);
  return out;
}

std::map<std::string, std::string> load_checkpoint_metadata(const std::string& path) {
  if (checkpoint_format(path) == CheckpointFormat::kCkpt) {
    return decode_ckpt(path, MappedFile(path, kWhat).bytes(), Decode::kMetadata).metadata;
  }
  size_t data_begin = 0;
  const nlohmann::json header =
      parse_safetensors_header(path, MappedFile(path, kWhat).bytes(), data_begin);
  std::map<std::string, std::string> out;
  if (!header.contains("__metadata__")) return out;
  const nlohmann::json& meta = header["__metadata__"];
  CLEAVE_CHECK_ARG(meta.is_object(),
                   "cannot load checkpoint '{}': \"__metadata__\" is not an object", path);
  for (const auto& [key, value] : meta.items()) {
    if (key == kChecksumKey) continue;
    CLEAVE_CHECK_ARG(value.is_string(),
                     "cannot load checkpoint '{}': metadata '{}' is not a string", path, key);
    out[key] = value.get<std::string>();
  }
  return out;
}

std::map<std::string, TensorBytes> ckpt_tensor_bytes(const std::string& path,
                                                     std::string_view bytes) {
  CLEAVE_CHECK_ARG(!bytes.empty(),
                   "cannot load checkpoint '{}': the file is empty (0 bytes); a save that never "
                   "completed or a copy that failed left it: use another copy",
                   path);
  return decode_ckpt(path, bytes, Decode::kViews).views;
}

void save_ckpt_bytes(const std::vector<std::pair<std::string, TensorBytes>>& tensors,
                     const std::string& path, const std::vector<FileRegion>& sources) {
  write_ckpt_bytes(tensors, path, sources).commit();
}

PendingFile write_ckpt_bytes(const std::vector<std::pair<std::string, TensorBytes>>& tensors,
                             const std::string& path, const std::vector<FileRegion>& sources) {
  const CkptParts parts = encode_ckpt(tensors, {});
  return PendingFile(path, parts.parts, kWhat, sources);
}

}  // namespace cleave::train
