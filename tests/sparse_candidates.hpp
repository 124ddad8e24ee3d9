#pragma once
// Test inputs of the second level of two-level indexing (sparse logits and the sparse decode step):
// candidate lists with every kind of entry, and the stored logits read back as floats.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "flash_indexer/reference.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"

namespace flash_indexer::test {

// Element `index` of stored logits of dtype t, as a float.
inline float stored_value(const std::vector<std::uint8_t>& raw, LogitsDType t, std::int64_t index) {
  if (t == LogitsDType::f32) {
    float x;
    std::memcpy(&x, raw.data() + index * 4, 4);
    return x;
  }
  std::uint16_t h;
  std::memcpy(&h, raw.data() + index * 2, 2);
  return t == LogitsDType::f16 ? reference::f16_bits_to_float(h) : reference::bf16_bits_to_float(h);
}

// Candidate lists of `rows` rows, C each: random blocks of the row (some past it), the row's last
// (partial) block, -1, a negative id, a duplicate; the last row all invalid.
inline std::vector<std::int32_t> make_candidates(const std::vector<std::int64_t>& lens, int num_candidates, int block,
                                                 std::mt19937_64& rng) {
  const std::size_t rows = lens.size();
  std::vector<std::int32_t> c(rows * num_candidates);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t blocks = static_cast<std::int32_t>((lens[r] + block - 1) / block);
    for (int i = 0; i < num_candidates; ++i) {
      std::int32_t v = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(blocks + 3));  // up to 2 past the row
      switch (i % 9) {
        case 1: v = blocks - 1; break;  // the last block (or -1 for an empty row)
        case 4: v = -1; break;
        case 6: v = -5; break;
        case 7: v = i > 0 ? c[r * num_candidates + i - 1] : v; break;  // a duplicate
        default: break;
      }
      c[r * num_candidates + i] = r + 1 == rows ? (i % 2 ? -1 : blocks + i) : v;
    }
  }
  return c;
}

}  // namespace flash_indexer::test
