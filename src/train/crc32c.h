// CRC32C, the checksum of cleave's checkpoint files (NOTE [Checkpoint checksums] in
// cleave/train/checkpoint.h). Internal to the train layer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace cleave::train {

namespace crc32c_detail {

inline constexpr uint32_t kPoly = 0x82F63B78u;
using Map = std::array<uint32_t, 32>;                    // column i: the image of bit i
using Shift = std::array<std::array<uint32_t, 256>, 4>;  // the map, one table per byte

constexpr uint32_t image(const Map& m, uint32_t v) {
  uint32_t out = 0;
  for (int i = 0; i < 32; ++i, v >>= 1) {
    if ((v & 1) != 0) out ^= m[static_cast<size_t>(i)];
  }
  return out;
}

// The register's map over `bytes` zero bytes (a power of two).
constexpr Shift zeros(size_t bytes) {
  Map m{};  // one zero bit
  m[0] = kPoly;
  for (size_t i = 1; i < 32; ++i) m[i] = uint32_t{1} << (i - 1);
  for (size_t bits = 1; bits < 8 * bytes; bits *= 2) {  // square it up to 8 * bytes bits
    Map sq{};
    for (size_t i = 0; i < 32; ++i) sq[i] = image(m, m[i]);
    m = sq;
  }
  Shift out{};
  for (size_t k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) out[k][b] = image(m, b << (8 * k));
  }
  return out;
}

// One byte's step.
inline constexpr std::array<uint32_t, 256> kTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? kPoly ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}();

}  // namespace crc32c_detail

// NOTE [Three CRC streams]
// CRC32C: the Castagnoli polynomial, reflected (0x82F63B78). With SSE4.2 (the Release build's
// x86-64-v3) the processor's crc32 instruction computes it 8 bytes at a time; otherwise one table
// lookup per byte. Both give the same value.
//
// One crc32 instruction needs the result of the one before it: a chain of them runs at one
// instruction per 3 cycles, a third of what the processor can issue. So the instruction path
// splits each stretch of 3n bytes into three blocks of n, runs the three chains side by side (each
// from a register of 0), and joins them: the register after block A then block B is the register
// after A advanced over |B| zero bytes, XOR the register after B alone (a CRC is linear over
// GF(2)). Advancing over n zero bytes is a fixed linear map of the 32-bit register, built at
// compile time as the n-th power of the one-zero-bit map and applied as four table lookups (one per
// byte of the register). Blocks are 8 KiB, then 256 bytes for what is left (a transform's column
// pieces are rows of a few KiB), then single words. cleave-ckpt's checksums of a 1 GiB
// checkpoint took 22% of a transform's time with one chain (bench/README.md, "ckpt").
class Crc32c {
 public:
  void update(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
#if defined(__SSE4_2__)
    uint64_t crc = crc_;
    crc = three_streams<kLong>(crc, p, size, kShiftLong);
    crc = three_streams<kShort>(crc, p, size, kShiftShort);
    for (; size >= 8; p += 8, size -= 8) crc = _mm_crc32_u64(crc, word(p));
    crc_ = static_cast<uint32_t>(crc);
    for (; size > 0; ++p, --size) crc_ = _mm_crc32_u8(crc_, *p);
#else
    update_bytewise(p, size);
#endif
  }
  // One table lookup per byte, whatever the processor (tests compare the two).
  void update_bytewise(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i)
      crc_ = crc32c_detail::kTable[(crc_ ^ p[i]) & 0xff] ^ (crc_ >> 8);
  }
  uint32_t value() const { return ~crc_; }

 private:
  using Shift = crc32c_detail::Shift;
  static constexpr size_t kLong = 8192, kShort = 256;
#if defined(__SSE4_2__)
  static constexpr Shift kShiftLong = crc32c_detail::zeros(kLong);
  static constexpr Shift kShiftShort = crc32c_detail::zeros(kShort);

  static uint64_t word(const unsigned char* p) {
    uint64_t w = 0;
    std::memcpy(&w, p, 8);
    return w;
  }
  static uint64_t shift(const Shift& s, uint64_t crc) {
    return s[0][crc & 0xff] ^ s[1][(crc >> 8) & 0xff] ^ s[2][(crc >> 16) & 0xff] ^
           s[3][(crc >> 24) & 0xff];
  }
  template <size_t kBlock>
  static uint64_t three_streams(uint64_t crc, const unsigned char*& p, size_t& size,
                                const Shift& over_block) {
    for (; size >= 3 * kBlock; p += 3 * kBlock, size -= 3 * kBlock) {
      uint64_t b = 0, c = 0;
      for (size_t i = 0; i < kBlock; i += 8) {
        crc = _mm_crc32_u64(crc, word(p + i));
        b = _mm_crc32_u64(b, word(p + kBlock + i));
        c = _mm_crc32_u64(c, word(p + 2 * kBlock + i));
      }
      crc = shift(over_block, crc) ^ b;
      crc = shift(over_block, crc) ^ c;
    }
    return crc;
  }
#endif

  uint32_t crc_ = 0xffffffffu;
};

}  // namespace cleave::train
