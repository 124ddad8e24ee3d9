// The coarse bin mapping of contract §3 on every boundary, its monotonicity, and the CPU
// reference histogram.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <set>

#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/reference.hpp"
#include "nvrtc_compiler.hpp"

using namespace flash_indexer;

namespace {

float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }
float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("coarse bins on the boundaries of contract section 3", "[coarse_bins]") {
  // Zero and tiny values: -0 counts as +0; FP16 subnormals and values that round to 0.
  CHECK(coarse_bin(0.0f) == 511);
  CHECK(coarse_bin(-0.0f) == 511);
  CHECK(coarse_bin(std::ldexp(1.0f, -25)) == 511);  // rounds to FP16 +0
  CHECK(coarse_bin(std::ldexp(1.0f, -24)) == 511);  // smallest FP16 subnormal: code 0
  CHECK(coarse_bin(std::ldexp(1.0f, -18)) == 511 - ((0x0040 & 0x7fff) >> 6));
  CHECK(coarse_bin(std::numeric_limits<float>::denorm_min()) == 511);
  CHECK(coarse_bin(-std::ldexp(1.0f, -24)) == 512);
  CHECK(coarse_bin(-std::numeric_limits<float>::denorm_min()) == 512);
  // Below 16: FP16 exponent and top 4 mantissa bits.
  CHECK(coarse_bin(1.0f) == 511 - (0x3c00 >> 6));
  CHECK(coarse_bin(15.99f) == 511 - 303);
  CHECK(coarse_bin(-15.99f) == 512 + 303);
  CHECK(coarse_bin(15.999f) == 511 - 304);  // rounds to FP16 16.0: unit bin [16, 17)
  // Unit bins.
  CHECK(coarse_bin(16.0f) == 511 - 304);
  CHECK(coarse_bin(next_down(17.0f)) == 511 - 304);
  CHECK(coarse_bin(17.0f) == 511 - 305);
  CHECK(coarse_bin(222.9f) == 1);
  CHECK(coarse_bin(next_down(223.0f)) == 1);
  CHECK(coarse_bin(223.0f) == 0);
  CHECK(coarse_bin(1e30f) == 0);
  CHECK(coarse_bin(65504.0f) == 0);
  CHECK(coarse_bin(65520.0f) == 0);  // FP16 overflow: code 496, then unit bins
  CHECK(coarse_bin(kInf) == 0);
  // Negative unit bins include their lower end: [-17, -16] -> 304, [-18, -17) -> 305.
  CHECK(coarse_bin(-16.0f) == 512 + 304);
  CHECK(coarse_bin(-17.0f) == 512 + 304);
  CHECK(coarse_bin(next_down(-17.0f)) == 512 + 305);
  CHECK(coarse_bin(-18.0f) == 512 + 305);
  CHECK(coarse_bin(-222.5f) == 512 + 510);
  CHECK(coarse_bin(-223.0f) == 512 + 510);
  CHECK(coarse_bin(next_down(-223.0f)) == 1023);
  CHECK(coarse_bin(-65520.0f) == 1023);
  CHECK(coarse_bin(-kInf) == 1023);
}

TEST_CASE("coarse bins are monotone over a dense sweep of FP32 and reach all 1024 bins", "[coarse_bins]") {
  std::set<int> seen;
  // Ascending over every 61st FP32 value from -inf to +inf (NaN excluded), with every exact boundary
  // value's neighbours added: the bin never increases as the score grows.
  int previous = 1023;
  float previous_x = -kInf;
  auto visit = [&](float x) {
    const int bin = coarse_bin(x);
    if (bin < 0 || bin >= kCoarseBins) FAIL("coarse_bin(" << x << ") = " << bin << " is not a bin");
    if (!(bin <= previous)) FAIL("coarse_bin(" << x << ") = " << bin << " > coarse_bin(" << previous_x << ") = " << previous);
    previous = bin;
    previous_x = x;
    seen.insert(bin);
  };
  for (std::uint32_t bits = 0xff800000u; bits > 0x80000000u; bits -= 61) visit(std::bit_cast<float>(bits));
  visit(-0.0f);
  visit(0.0f);
  for (std::uint32_t bits = 0; bits <= 0x7f800000u - 61; bits += 61) visit(std::bit_cast<float>(bits));
  visit(kInf);
  CHECK(seen.size() == kCoarseBins);

  for (float edge = 16.0f; edge <= 224.0f; edge += 1.0f) {
    CHECK(coarse_bin(next_down(edge)) >= coarse_bin(edge));
    CHECK(coarse_bin(edge) >= coarse_bin(next_up(edge)));
    CHECK(coarse_bin(-edge) >= coarse_bin(next_up(-edge)));
    CHECK(coarse_bin(next_down(-edge)) >= coarse_bin(-edge));
  }
}

TEST_CASE("the reference histogram counts live non-NaN scores as stored", "[coarse_bins]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Two rows of width 6; row 0 has 5 live columns (one NaN), row 1 has 2.
  const std::vector<double> logits = {1.0, 1.0,  nan, -20.5, 16.0004, 99.0,  //
                                      0.0, -0.0, 5.0, 5.0,   5.0,     5.0};
  std::vector<std::int32_t> hist;
  reference::add_coarse_histogram(logits, 6, {5, 2}, LogitsDType::f32, hist);
  REQUIRE(hist.size() == 2 * kCoarseBins);
  CHECK(hist[coarse_bin(1.0f)] == 2);
  CHECK(hist[coarse_bin(-20.5f)] == 1);
  CHECK(hist[coarse_bin(16.0004f)] == 1);
  CHECK(hist[coarse_bin(99.0f)] == 0);  // column 5 is past the length
  CHECK(hist[kCoarseBins + 511] == 2);  // +0 and -0 share bin 511
  int total = 0;
  for (int v : hist) total += v;
  CHECK(total == 6);  // NaN not counted

  // Counts accumulate across calls.
  reference::add_coarse_histogram(logits, 6, {5, 2}, LogitsDType::f32, hist);
  CHECK(hist[coarse_bin(1.0f)] == 4);

  // Binned after rounding to the stored dtype: 15.999 is FP16 16.0, so it lands in the [16, 17) bin.
  std::vector<std::int32_t> f16_hist, f32_hist;
  reference::add_coarse_histogram({15.999}, 1, {1}, LogitsDType::f16, f16_hist);
  reference::add_coarse_histogram({15.999}, 1, {1}, LogitsDType::f32, f32_hist);
  CHECK(f16_hist[coarse_bin(16.0f)] == 1);
  CHECK(f32_hist[coarse_bin(16.0f)] == 1);  // FP32 15.999 also rounds to FP16 16.0 inside the mapping
  std::vector<std::int32_t> bf16_hist;
  reference::add_coarse_histogram({16.9}, 1, {1}, LogitsDType::bf16, bf16_hist);  // BF16(16.9) = 16.875
  CHECK(bf16_hist[coarse_bin(16.875f)] == 1);
}

TEST_CASE("coarse_bins.hpp compiles as device code under NVRTC with no include directory", "[coarse_bins][compile]") {
  KernelSpec spec;
  spec.key = "test.coarse_bins.sm_90a";
  spec.entry = "bins";
  spec.arch = Arch{9, 0, true};
  spec.source =
      "#include \"coarse_bins.hpp\"\n"
      "extern \"C\" __global__ void bins(const float* x, int* out, int n) {\n"
      "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) out[i] = flash_indexer::coarse_bin(x[i]);\n"
      "}\n";
  const CompiledKernel k = compile_kernel(spec);
  CHECK(k.cubin.size() > 0);
  CHECK(k.report.spill_store_bytes == 0);
}
