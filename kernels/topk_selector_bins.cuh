#pragma once
// The selector's own score bins (1024, best first), used when it counts a row itself (no histogram
// given, or a given one did not add up). Plain C++ on order-preserving keys (topk_common.cuh's
// TopkInput::key), shared by the device code and the host checks; no includes, so NVRTC compiles it.
//
// Unlike the contract's coarse bins (contract §3), a selector bin is a shift and a clamp of the key, and
// its key interval is closed-form, so the select pass needs no search for it:
//   FP32 and BF16 (a BF16 key is the top 16 bits of the FP32 key): bins 0..511 hold the scores >= +0,
//   from the largest; 512..1023 the negative ones, -inf last. The bin is the magnitude's exponent and its
//   top 3 mantissa bits (8 bins per octave) over 2^-32 .. 2^32; magnitudes outside share the end bins.
//   FP16: the magnitude's exponent and top 4 mantissa bits (16 bins per octave), the whole range.
//   -0 and +0 share a key, so a bin; NaN has no bin (callers skip it).

#if defined(__CUDACC__)
#define FLASH_INDEXER_SELECTOR_BINS_FN __host__ __device__ __forceinline__
#else
#define FLASH_INDEXER_SELECTOR_BINS_FN inline
#endif

namespace flash_indexer {
namespace kernels {

constexpr int kTopkSelectorBins = 1024;
constexpr unsigned int kSelectorShift32 = 20;     // a 32-bit magnitude's exponent and top 3 mantissa bits
constexpr unsigned int kSelectorLowest32 = 95u << 3;  // 2^-32: exponent 95
constexpr unsigned int kSelectorShift16 = 6;      // FP16: exponent and top 4 mantissa bits

// Bin of a 32-bit key (FP32, or a BF16 key shifted left by 16).
FLASH_INDEXER_SELECTOR_BINS_FN int selector_bin_of_key32(unsigned int key) {
  const bool non_negative = key >= 0x80000000u;
  const unsigned int magnitude = non_negative ? key & 0x7fffffffu : 0x7fffffffu - key;
  const unsigned int code = magnitude >> kSelectorShift32;
  const int m = code <= kSelectorLowest32          ? 0
                : code - kSelectorLowest32 >= 511u ? 511
                                                   : static_cast<int>(code - kSelectorLowest32);
  return non_negative ? 511 - m : 512 + m;
}

// The smallest 32-bit key in bin `bin` (0..1023); bin 1023's is 0, below every score's key.
FLASH_INDEXER_SELECTOR_BINS_FN unsigned int lowest_key32_of_selector_bin(int bin) {
  if (bin <= 511) {
    const unsigned int m = static_cast<unsigned int>(511 - bin);
    return 0x80000000u | (m == 0 ? 0u : (m + kSelectorLowest32) << kSelectorShift32);
  }
  // Negative scores: the magnitudes of bin 512 + m lie below `limit`; their keys are 0x7fffffff - magnitude.
  const unsigned int m = static_cast<unsigned int>(bin - 512);
  const unsigned int limit = m == 511 ? 0x80000000u : (m + kSelectorLowest32 + 1u) << kSelectorShift32;
  return 0x80000000u - limit;
}

// Bin of an FP16 key (16 bits).
FLASH_INDEXER_SELECTOR_BINS_FN int selector_bin_of_key16(unsigned int key) {
  const bool non_negative = key >= 0x8000u;
  const unsigned int magnitude = non_negative ? key & 0x7fffu : 0x7fffu - key;
  const int m = static_cast<int>(magnitude >> kSelectorShift16);
  return non_negative ? 511 - m : 512 + m;
}

FLASH_INDEXER_SELECTOR_BINS_FN unsigned int lowest_key16_of_selector_bin(int bin) {
  if (bin <= 511) return 0x8000u | (static_cast<unsigned int>(511 - bin) << kSelectorShift16);
  return 0x8000u - ((static_cast<unsigned int>(bin - 512) + 1u) << kSelectorShift16);
}

// The same bins straight from the stored bits of a non-NaN score (no key): what the counting pass uses.
// FP32 bits, or BF16 bits shifted left by 16; -0 goes with +0.
// Written as the bin of the magnitude counted from the top (511 - m, m the clamped code above the
// lowest), which (0x7fffffff - magnitude) >> shift gives directly, so that a negative score's bin is a
// flip of its low bits: six instructions where the plain form took eight (a count pass runs one per
// score). Equal to the plain form on every 32-bit pattern (checked exhaustively).
FLASH_INDEXER_SELECTOR_BINS_FN int selector_bin_of_bits32(unsigned int bits) {
  constexpr int kBias = static_cast<int>((0x7fffffffu >> kSelectorShift32) - kSelectorLowest32 - 511u);
  const int from_top = static_cast<int>((~bits & 0x7fffffffu) >> kSelectorShift32) - kBias;
  const int low = from_top < 0 ? 0 : from_top > 511 ? 511 : from_top;  // 511 - m
  return bits > 0x80000000u ? low ^ 0x3ff : low;                        // below zero (not -0): 512 + m
}

// FP16 bits.
FLASH_INDEXER_SELECTOR_BINS_FN int selector_bin_of_bits16(unsigned int bits) {
  const int low = static_cast<int>((~bits & 0x7fffu) >> kSelectorShift16);  // 511 - m
  return (bits & 0xffffu) > 0x8000u ? low ^ 0x3ff : low;
}

// Fine bins (4096): each selector bin cut in four by the next two bits of the magnitude, so a fine
// bin's selector bin is fine >> 2 (same range and clamping). The resident selector (topk_resident.cuh)
// counts these: a threshold bin a quarter as wide leaves a quarter of the candidates to rank.
constexpr int kTopkFineBins = 4 * kTopkSelectorBins;
constexpr unsigned int kFineShift32 = kSelectorShift32 - 2;
constexpr unsigned int kFineLowest32 = kSelectorLowest32 << 2;
constexpr unsigned int kFineShift16 = kSelectorShift16 - 2;

// From the stored bits of a non-NaN score: FP32 bits, or BF16 bits shifted left by 16.
// (The same form as selector_bin_of_bits32.)
FLASH_INDEXER_SELECTOR_BINS_FN int fine_bin_of_bits32(unsigned int bits) {
  constexpr int kBias = static_cast<int>((0x7fffffffu >> kFineShift32) - kFineLowest32 - 2047u);
  const int from_top = static_cast<int>((~bits & 0x7fffffffu) >> kFineShift32) - kBias;
  const int low = from_top < 0 ? 0 : from_top > 2047 ? 2047 : from_top;  // 2047 - m
  return bits > 0x80000000u ? low ^ 0xfff : low;                          // 2048 + m
}

// FP16 bits.
FLASH_INDEXER_SELECTOR_BINS_FN int fine_bin_of_bits16(unsigned int bits) {
  const int low = static_cast<int>((~bits & 0x7fffu) >> kFineShift16);  // 2047 - m
  return (bits & 0xffffu) > 0x8000u ? low ^ 0xfff : low;
}

// The smallest 32-bit key in fine bin `bin` (0..4095); bin 4095's is 0.
FLASH_INDEXER_SELECTOR_BINS_FN unsigned int lowest_key32_of_fine_bin(int bin) {
  if (bin <= 2047) {
    const unsigned int m = static_cast<unsigned int>(2047 - bin);
    return 0x80000000u | (m == 0 ? 0u : (m + kFineLowest32) << kFineShift32);
  }
  const unsigned int m = static_cast<unsigned int>(bin - 2048);
  const unsigned int limit = m == 2047 ? 0x80000000u : (m + kFineLowest32 + 1u) << kFineShift32;
  return 0x80000000u - limit;
}

FLASH_INDEXER_SELECTOR_BINS_FN unsigned int lowest_key16_of_fine_bin(int bin) {
  if (bin <= 2047) return 0x8000u | (static_cast<unsigned int>(2047 - bin) << kFineShift16);
  return 0x8000u - ((static_cast<unsigned int>(bin - 2048) + 1u) << kFineShift16);
}

// Whether a long streamed row is selected as if no histogram were given (row report histogram_use 3):
// the given histogram's threshold bin holds more than `buffer` columns (the selector's candidate
// buffer) over keys [candidate_key, above_key) of more than one key. Narrowing such a bin costs a digit
// pass over the row per 10 bits of its keys and a select pass after each, where the no-histogram path's
// sample costs a few loads and usually one pass (docs/design/topk-selectors.md, "An uninformative
// histogram"). A bin of one key is selected from as it is: its columns are ties, taken lowest first.
FLASH_INDEXER_SELECTOR_BINS_FN bool histogram_bin_too_coarse(int count, unsigned int candidate_key, unsigned int above_key,
                                                             int buffer) {
  return count > buffer && above_key - candidate_key > 1u;
}

}  // namespace kernels
}  // namespace flash_indexer
