// The selector's own bins (kernels/topk_selector_bins.cuh): every key of each 16-bit dtype and a sweep
// of 32-bit keys land in the bin whose closed-form key interval holds them, bins never rise as keys
// rise, and a few scores land where the header says; and the rule that sets a too coarse histogram aside.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../kernels/topk_params.cuh"
#include "../kernels/topk_selector_bins.cuh"
#include "decode_step.hpp"
#include "flash_indexer/reference.hpp"
#include "kernel_key.hpp"
#include "test_support.hpp"

using namespace flash_indexer::kernels;

namespace {

std::uint32_t key32(float x) {
  std::uint32_t b = std::bit_cast<std::uint32_t>(x);
  if ((b << 1) == 0) b = 0;
  return b ^ ((b >> 31) ? 0xffffffffu : 0x80000000u);
}

// Key k is in bin b iff lowest(b) <= k < lowest(b - 1) (bin 0: no upper end).
template <class Bin, class Lowest>
void check_key(std::uint64_t k, Bin bin, Lowest lowest) {
  const int b = bin(k);
  REQUIRE(b >= 0);
  REQUIRE(b < kTopkSelectorBins);
  INFO("key " << k << " bin " << b);
  REQUIRE(lowest(b) <= k);
  if (b > 0) REQUIRE(k < lowest(b - 1));
}

}  // namespace

TEST_CASE("selector bins: every 16-bit key is inside its bin's interval, bins fall as keys rise", "[selector_bins]") {
  int previous16 = kTopkSelectorBins, previous_bf16 = kTopkSelectorBins;
  for (std::uint32_t k = 0; k <= 0xffffu; ++k) {
    check_key(
        k, [](std::uint64_t x) { return selector_bin_of_key16(static_cast<std::uint32_t>(x)); },
        [](int b) { return std::uint64_t{lowest_key16_of_selector_bin(b)}; });
    // BF16: the top half of the FP32 key, as the kernel forms it.
    check_key(
        k, [](std::uint64_t x) { return selector_bin_of_key32(static_cast<std::uint32_t>(x) << 16); },
        [](int b) { return std::uint64_t{lowest_key32_of_selector_bin(b) >> 16}; });
    REQUIRE(selector_bin_of_key16(k) <= previous16);
    REQUIRE(selector_bin_of_key32(k << 16) <= previous_bf16);
    previous16 = selector_bin_of_key16(k);
    previous_bf16 = selector_bin_of_key32(k << 16);
  }
  CHECK(previous16 == 0);
  CHECK(previous_bf16 == 0);
}

TEST_CASE("selector bins: 32-bit keys around every bin edge and at random", "[selector_bins]") {
  auto bin = [](std::uint64_t x) { return selector_bin_of_key32(static_cast<std::uint32_t>(x)); };
  auto lowest = [](int b) { return std::uint64_t{lowest_key32_of_selector_bin(b)}; };
  for (int b = 0; b < kTopkSelectorBins; ++b) {
    const std::uint64_t edge = lowest(b);
    for (std::int64_t d = -2; d <= 2; ++d) {
      const std::int64_t k = static_cast<std::int64_t>(edge) + d;
      if (k >= 0 && k <= 0xffffffffll) check_key(static_cast<std::uint64_t>(k), bin, lowest);
    }
    if (b > 0) REQUIRE(lowest(b) < lowest(b - 1));  // no empty bin
  }
  std::mt19937_64 rng(7);
  int previous = kTopkSelectorBins;
  std::uint64_t k = 0;
  while (k <= 0xffffffffull) {
    check_key(k, bin, lowest);
    REQUIRE(bin(k) <= previous);
    previous = bin(k);
    k += 1 + rng() % 4096;
  }
}

TEST_CASE("selector bins of chosen scores", "[selector_bins]") {
  CHECK(selector_bin_of_key32(key32(0.0f)) == 511);
  CHECK(selector_bin_of_key32(key32(-0.0f)) == 511);
  CHECK(selector_bin_of_key32(key32(std::ldexp(1.0f, -40))) == 511);   // below 2^-32: the zero bin
  CHECK(selector_bin_of_key32(key32(-std::ldexp(1.0f, -40))) == 512);
  CHECK(selector_bin_of_key32(key32(1.0f)) == 511 - (32 * 8));         // 2^0 is 32 octaves above 2^-32
  CHECK(selector_bin_of_key32(key32(1.124f)) == 511 - (32 * 8));       // 8 bins per octave
  CHECK(selector_bin_of_key32(key32(1.125f)) == 511 - (32 * 8) - 1);
  CHECK(selector_bin_of_key32(key32(-1.0f)) == 512 + 32 * 8);
  CHECK(selector_bin_of_key32(key32(std::ldexp(1.0f, 40))) == 0);     // beyond 2^32: the end bins
  CHECK(selector_bin_of_key32(key32(INFINITY)) == 0);
  CHECK(selector_bin_of_key32(key32(-INFINITY)) == 1023);
  // FP16: 1.0 is 0x3c00, exponent 15 -> 15 * 16 bins above the zero bin.
  CHECK(selector_bin_of_key16(0x3c00u ^ 0x8000u) == 511 - 15 * 16);
  CHECK(selector_bin_of_key16(0x7c00u ^ 0x8000u) == 511 - 31 * 16);  // +inf
}

TEST_CASE("selector bins from stored bits equal the bins of the keys", "[selector_bins]") {
  auto key16 = [](std::uint32_t b) {
    if ((b & 0x7fffu) == 0) b = 0;
    return b ^ ((b & 0x8000u) ? 0xffffu : 0x8000u);
  };
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    if ((b & 0x7fffu) <= 0x7c00u)  // FP16 non-NaN
      REQUIRE(selector_bin_of_bits16(b) == selector_bin_of_key16(key16(b)));
    if ((b & 0x7fffu) <= 0x7f80u)  // BF16 non-NaN
      REQUIRE(selector_bin_of_bits32(b << 16) == selector_bin_of_key32(key16(b) << 16));
  }
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    const auto b = static_cast<std::uint32_t>(rng());
    if ((b & 0x7fffffffu) > 0x7f800000u) continue;  // NaN
    REQUIRE(selector_bin_of_bits32(b) == selector_bin_of_key32(key32(std::bit_cast<float>(b))));
  }
  CHECK(selector_bin_of_bits32(0x80000000u) == 511);  // -0
  CHECK(selector_bin_of_bits16(0x8000u) == 511);
}

TEST_CASE("fine bins: four per selector bin, closed-form intervals, from stored bits", "[selector_bins]") {
  auto key16 = [](std::uint32_t b) {
    if ((b & 0x7fffu) == 0) b = 0;
    return b ^ ((b & 0x8000u) ? 0xffffu : 0x8000u);
  };
  auto bits32_of_key = [](std::uint32_t k) { return (k & 0x80000000u) ? (k ^ 0x80000000u) : ~k; };
  auto bits16_of_key = [](std::uint32_t k) { return ((k & 0x8000u) ? (k ^ 0x8000u) : ~k) & 0xffffu; };
  // A key k is in fine bin f iff lowest(f) <= k < lowest(f - 1); its selector bin is f >> 2.
  for (std::uint32_t k = 0; k <= 0xffffu; ++k) {
    const std::uint32_t b = bits16_of_key(k);
    if (b == 0x8000u) continue;  // -0 shares +0's key: key 0x7fff holds no score
    if ((b & 0x7fffu) <= 0x7c00u) {  // FP16 non-NaN
      const int f = fine_bin_of_bits16(b);
      INFO("fp16 key " << k << " fine " << f);
      REQUIRE(f >> 2 == selector_bin_of_key16(key16(b)));
      REQUIRE(lowest_key16_of_fine_bin(f) <= k);
      if (f > 0) REQUIRE(k < lowest_key16_of_fine_bin(f - 1));
    }
    if ((b & 0x7fffu) <= 0x7f80u) {  // BF16 non-NaN
      const int f = fine_bin_of_bits32(b << 16);
      INFO("bf16 key " << k << " fine " << f);
      REQUIRE(f >> 2 == selector_bin_of_key32(key16(b) << 16));
      REQUIRE((lowest_key32_of_fine_bin(f) >> 16) <= k);
      if (f > 0) REQUIRE(k < (lowest_key32_of_fine_bin(f - 1) >> 16));
    }
  }
  for (int f = 1; f < kTopkFineBins; ++f) {
    REQUIRE(lowest_key32_of_fine_bin(f) < lowest_key32_of_fine_bin(f - 1));  // no empty bin
    REQUIRE(lowest_key16_of_fine_bin(f) < lowest_key16_of_fine_bin(f - 1));
  }
  std::mt19937_64 rng(13);
  std::uint64_t k = 0;
  while (k <= 0xffffffffull) {
    const auto key = static_cast<std::uint32_t>(k);
    const std::uint32_t b = bits32_of_key(key);
    if ((b & 0x7fffffffu) <= 0x7f800000u && (b != 0x80000000u)) {  // non-NaN, and -0 shares +0's key
      const int f = fine_bin_of_bits32(b);
      INFO("fp32 key " << k << " fine " << f);
      REQUIRE(f >> 2 == selector_bin_of_key32(key));
      REQUIRE(lowest_key32_of_fine_bin(f) <= key);
      if (f > 0) REQUIRE(key < lowest_key32_of_fine_bin(f - 1));
    }
    k += 1 + rng() % 4096;
  }
  CHECK(fine_bin_of_bits32(0x80000000u) == 2047);  // -0
  CHECK(fine_bin_of_bits32(std::bit_cast<std::uint32_t>(1.0f)) == 2047 - 32 * 32);  // 32 fine bins per octave
  CHECK(fine_bin_of_bits32(std::bit_cast<std::uint32_t>(1.03125f)) == 2047 - 32 * 32 - 1);
  CHECK(fine_bin_of_bits32(std::bit_cast<std::uint32_t>(-INFINITY)) == 4095);
}

namespace {

namespace ref = flash_indexer::reference;

// The on-chip selectors classify a logit by two float compares against a fine bin's key bounds
// (bound_value in kernels/topk_common.cuh, mirrored here): at or above the bound of the bin above is
// "above", at or above its own lowest key's bound is "inside". A cluster of the resident selector
// places every CTA's candidates from its counts of the threshold fine bin before classifying, so the
// two must agree exactly: x is inside the bounds of fine bin f iff fine_bin_of(x) == f.
struct ValueBounds {
  std::uint32_t min_key, max_key;  // key(-inf), key(+inf)
  float (*value_of_key)(std::uint32_t);
  std::uint32_t (*lowest)(int);
  float bound(std::uint32_t b) const {
    if (b > max_key) return NAN;  // past +inf: nothing qualifies
    return b <= min_key ? -INFINITY : value_of_key(b);
  }
  bool inside(float x, int f) const {
    const std::uint32_t lo = lowest(f), hi = f == 0 ? max_key + 1 : lowest(f - 1);
    return x >= bound(lo) && !(x >= bound(hi));
  }
  // fine bin f holds x, and the neighbouring bins (the only ones it could be confused with: bins fall
  // as values rise) do not.
  void check(float x, int f) const {
    INFO("value " << x << " fine bin " << f);
    REQUIRE(inside(x, f));
    if (f > 0) REQUIRE_FALSE(inside(x, f - 1));
    if (f + 1 < kTopkFineBins) REQUIRE_FALSE(inside(x, f + 1));
  }
};

}  // namespace

TEST_CASE("fine bins: a bin's value bounds classify exactly the values of the bin", "[selector_bins]") {
  const ValueBounds f32{0x007fffffu, 0xff800000u,
                        [](std::uint32_t k) { return std::bit_cast<float>((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k); },
                        [](int f) { return lowest_key32_of_fine_bin(f); }};
  const ValueBounds f16{
      0x03ffu, 0xfc00u,
      [](std::uint32_t k) { return ref::f16_bits_to_float(static_cast<std::uint16_t>((k & 0x8000u) ? (k ^ 0x8000u) : ~k)); },
      [](int f) { return lowest_key16_of_fine_bin(f); }};
  const ValueBounds bf16{
      0x007fu, 0xff80u,
      [](std::uint32_t k) { return ref::bf16_bits_to_float(static_cast<std::uint16_t>((k & 0x8000u) ? (k ^ 0x8000u) : ~k)); },
      [](int f) { return lowest_key32_of_fine_bin(f) >> 16; }};
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {  // every 16-bit value
    const float h = ref::f16_bits_to_float(static_cast<std::uint16_t>(b)),
                g = ref::bf16_bits_to_float(static_cast<std::uint16_t>(b));
    if (h == h) f16.check(h, fine_bin_of_bits16(b));
    if (g == g) bf16.check(g, fine_bin_of_bits32(b << 16));
  }
  // FP32: a few values on each side of every bin edge (in stored bits, both signs), and at random.
  auto check32 = [&](std::uint32_t b) {
    const float x = std::bit_cast<float>(b);
    if (x == x) f32.check(x, fine_bin_of_bits32(b));
  };
  for (int f = 0; f < kTopkFineBins; ++f) {
    const std::uint32_t edge = std::bit_cast<std::uint32_t>(f32.value_of_key(lowest_key32_of_fine_bin(f)) + 0.0f);
    for (std::uint32_t d = 0; d <= 3; ++d) {
      check32(edge + d);
      check32(edge - d);
    }
  }
  std::mt19937_64 rng(29);
  for (int i = 0; i < 200000; ++i) check32(static_cast<std::uint32_t>(rng()));
  check32(0x80000000u);  // -0 is in +0's bin
}

// histogram_bin_too_coarse: a long row with scores past the contract's coarse range (|x| >= 223 share
// an end bin) has a threshold bin far past the candidate buffer, so the filter and split selectors take
// the no-histogram path; a row of normal scores keeps its histogram.
TEST_CASE("an uninformative histogram: a long row's end-bin threshold is too coarse, a normal row's is not", "[selector_bins]") {
  CHECK_FALSE(histogram_bin_too_coarse(4096, 10, 20, 4096));
  CHECK(histogram_bin_too_coarse(4097, 10, 20, 4096));
  CHECK_FALSE(histogram_bin_too_coarse(100000, 10, 11, 4096));  // one key: ties, no pass more
  CHECK(histogram_bin_too_coarse(100000, 0xfc00u, 0u, 4096));   // bin 0's end wraps past the largest key
  std::mt19937_64 rng(flash_indexer::test::fresh_seed());
  constexpr std::int64_t kWidth = 262144;
  constexpr int kK = 2048;
  for (flash_indexer::LogitsDType dtype : {flash_indexer::LogitsDType::f32, flash_indexer::LogitsDType::f16}) {
    const auto& lowest = flash_indexer::decode_step_coarse_lowest_keys(dtype);
    for (double scale : {1000.0, 1.0}) {
      std::normal_distribution<double> score(0.0, scale);
      std::vector<double> row(kWidth);
      for (double& x : row) x = score(rng);
      std::vector<std::int32_t> hist;
      flash_indexer::reference::add_coarse_histogram(row, kWidth, {kWidth}, dtype, hist);
      int bin = 0;
      std::int64_t above = 0;
      while (above + hist[bin] < kK) above += hist[bin++];
      // The bin's keys, as the device's coarse_key_bounds gives them (bin 0: one past the largest key).
      const unsigned int past_largest = dtype == flash_indexer::LogitsDType::f16 ? 0x10000u : 0u;
      const unsigned int upper = bin == 0 ? past_largest : lowest[bin - 1];
      INFO("dtype " << flash_indexer::logits_name(dtype) << " scale " << scale << " bin " << bin << " count " << hist[bin]);
      CHECK(histogram_bin_too_coarse(hist[bin], lowest[bin], upper, kTopkCandidates) == (scale > 223.0));
    }
  }
}
