// The precision of the sm90 kernel's FP8 dot products. First a probe of what the Hopper FP8 tensor
// core does with a sum (how many bits of the largest addend it keeps, how it rounds, whether the
// running accumulator takes part), through the op itself with hand-made keys; then the worst error of
// every sm90 configuration on adversarial inputs (the whole FP8 range, large weights of both signs)
// against the double-precision reference, which must stay inside the bound that model implies.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "driver.hpp"
#include "flash_indexer/reference.hpp"
#include "logits_check.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

// The E4M3 byte of a value it represents exactly.
std::uint8_t e4m3(float x) {
  for (int b = 0; b < 256; ++b)
    if (reference::fp8_e4m3_to_float(static_cast<std::uint8_t>(b)) == x && (x != 0 || b == 0))
      return static_cast<std::uint8_t>(b);
  throw std::runtime_error(fmt::format("{} is not an E4M3 value", x));
}

constexpr int kDim = 64;      // two k = 32 slices
constexpr int kHeads = 16;
constexpr float kBig = 65536;  // the big product: q 256 * k 256

// One probe key: k[d] values (q is 256 at d = 0 and 1 elsewhere, so the products are 256*k[0], k[d]).
struct ProbeKey {
  std::vector<float> k = std::vector<float>(kDim, 0.0f);
  double exact = 0;  // the exact dot product
};

// Runs the sm90 kernel (FP32 logits, head 0 weighted 1, scale 1) over the keys; returns the logits.
std::vector<float> run_probe(const std::vector<ProbeKey>& keys) {
  const int len = static_cast<int>(keys.size());
  const int blocks = (len + 63) / 64;
  const int token_bytes = kDim + 4;
  std::vector<std::uint8_t> q(kHeads * kDim, 0), kv(static_cast<std::size_t>(blocks) * 64 * token_bytes, 0);
  q[0] = e4m3(256);
  for (int d = 1; d < kDim; ++d) q[d] = e4m3(1);
  for (int s = 0; s < len; ++s) {
    std::uint8_t* block = kv.data() + static_cast<std::size_t>(s / 64) * 64 * token_bytes;
    for (int d = 0; d < kDim; ++d) block[(s % 64) * kDim + d] = e4m3(keys[s].k[d]);
  }
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < 64; ++t) {
      const float one = 1.0f;
      std::memcpy(kv.data() + static_cast<std::size_t>(b) * 64 * token_bytes + 64 * kDim + 4 * t, &one, 4);
    }
  std::vector<float> w(kHeads, 0.0f);
  w[0] = 1.0f;
  std::vector<std::int32_t> lens = {len}, table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = b;
  ck::DeviceBuffer dq = ck::DeviceBuffer::from(q), dkv = ck::DeviceBuffer::from(kv), dw = ck::DeviceBuffer::from(w),
                   dl = ck::DeviceBuffer::from(lens), dt = ck::DeviceBuffer::from(table),
                   out(static_cast<std::size_t>(blocks) * 64 * 4);
  PagedMqaLogitsOptions o;
  o.variant = PagedMqaLogitsVariant::sm90;
  paged_mqa_logits(TensorView::contiguous(dq.data(), DType::fp8_e4m3, {1, 1, kHeads, kDim}),
                   TensorView::contiguous(dkv.data(), DType::u8, {blocks, 64, 1, token_bytes}),
                   TensorView::contiguous(dw.data(), DType::f32, {1, kHeads}), TensorView::contiguous(dl.data(), DType::i32, {1}),
                   TensorView::contiguous(dt.data(), DType::i32, {1, blocks}),
                   TensorView::contiguous(out.data(), DType::f32, {1, blocks * 64}), test::gpu_session().stream(), o);
  test::gpu_session().synchronize();
  std::vector<float> logits = out.to_host<float>(static_cast<std::size_t>(blocks) * 64);
  logits.resize(len);
  return logits;
}

// Keys whose dot product is kBig plus `count` addends of `small` each, at dims first..first+count-1.
ProbeKey key_with(float small, int first, int count = 1) {
  ProbeKey p;
  p.k[0] = 256;
  for (int d = first; d < first + count; ++d) p.k[d] = small;
  p.exact = kBig + static_cast<double>(small) * count;
  return p;
}

}  // namespace

TEST_CASE("gpu: the FP8 tensor core keeps 13 bits below the largest addend's leading bit and truncates toward zero",
          "[gpu][logits][precision]") {
  test::require_gpu();
  if (test::gpu_session().arch().name() != "sm_90a") {
    SUCCEED("the sm90 kernel needs sm_90a");
    return;
  }
  // For gaps g = 8..25 between the big product (2^16) and one small addend of 2^(16-g): the small one
  // in the same k-slice (+ and -), in the next slice (+ and -), 1.5 * 2^(16-g) (rounding), and 31 of them.
  struct Probe {
    const char* what;
    std::vector<int> gaps;
    std::vector<ProbeKey> keys;
  };
  std::vector<Probe> probes = {{"same slice, +2^(16-g)", {}, {}},     {"same slice, -2^(16-g)", {}, {}},
                               {"next slice, +2^(16-g)", {}, {}},     {"next slice, -2^(16-g)", {}, {}},
                               {"same slice, +1.5*2^(16-g)", {}, {}}, {"same slice, 31 x +2^(16-g)", {}, {}}};
  for (int g = 8; g <= 25; ++g) {
    const float small = std::ldexp(1.0f, 16 - g);
    probes[0].keys.push_back(key_with(small, 1));
    probes[1].keys.push_back(key_with(-small, 1));
    probes[2].keys.push_back(key_with(small, 32));
    probes[3].keys.push_back(key_with(-small, 32));
    for (int i = 0; i < 4; ++i) probes[i].gaps.push_back(g);
    if (g >= 9 && g <= 22) {
      probes[4].keys.push_back(key_with(1.5f * small, 1));
      probes[4].gaps.push_back(g);
    }
    if (g >= 10 && g <= 22) {
      probes[5].keys.push_back(key_with(small, 1, 31));
      probes[5].gaps.push_back(g);
    }
  }
  std::vector<ProbeKey> all;
  for (const Probe& p : probes) all.insert(all.end(), p.keys.begin(), p.keys.end());
  const std::vector<float> got = run_probe(all);
  std::size_t at = 0;
  std::string table = "FP8 tensor-core probe (sm90 kernel, k-slices of 32): got - 2^16 in units of the addend\n";
  std::vector<std::vector<double>> kept(probes.size());  // (got - 2^16) / (exact - 2^16) per gap
  for (std::size_t i = 0; i < probes.size(); ++i) {
    table += fmt::format("  {:<28}", probes[i].what);
    for (std::size_t j = 0; j < probes[i].keys.size(); ++j, ++at) {
      const double fraction = (got[at] - kBig) / (probes[i].keys[j].exact - kBig);
      kept[i].push_back(fraction);
      table += fmt::format(" g{}:{:.3g}", probes[i].gaps[j], fraction);
    }
    table += "\n";
  }
  std::printf("%s", table.c_str());
  INFO(table);
  // The model (docs/design/precision.md; measured on the H200 by this test): per k-slice,
  // every addend, the incoming accumulator included, is aligned to the largest one and its magnitude
  // cut (toward zero) to 13 bits below the largest one's leading bit, then the addends are summed.
  for (std::size_t j = 0; j < probes[0].gaps.size(); ++j) {
    const int g = probes[0].gaps[j];
    INFO("gap " << g);
    CHECK(kept[0][j] == (g <= 13 ? 1.0 : 0.0));
    CHECK(kept[2][j] == (g <= 13 ? 1.0 : 0.0));
    // Negative addends are cut toward zero too (sign and magnitude, not two's complement).
    CHECK(kept[1][j] == (g <= 13 ? 1.0 : 0.0));
    CHECK(kept[3][j] == (g <= 13 ? 1.0 : 0.0));
  }
  for (std::size_t j = 0; j < probes[4].gaps.size(); ++j) {
    const int g = probes[4].gaps[j];
    INFO("gap " << g << " (1.5 units)");
    // 1.5 * 2^(16-g) cut to the grid 2^(16-13): truncation, never rounding up.
    const double units = std::floor(1.5 * std::ldexp(1.0, 13 - g)) / (1.5 * std::ldexp(1.0, 13 - g));
    CHECK(kept[4][j] == units);
  }
  for (std::size_t j = 0; j < probes[5].gaps.size(); ++j) {
    const int g = probes[5].gaps[j];
    INFO("gap " << g << " (31 addends)");
    CHECK(kept[5][j] == (g <= 13 ? 1.0 : 0.0));  // each addend is cut on its own, not their sum
  }
}

TEST_CASE("gpu: sm90 FP32 logits stay within the tensor-core bound on adversarial inputs, every configuration",
          "[gpu][logits][precision]") {
  test::require_gpu();
  if (test::gpu_session().arch().name() != "sm_90a") {
    SUCCEED("the sm90 kernel needs sm_90a");
    return;
  }
  std::mt19937_64 rng(test::fresh_seed());
  double worst = 0;
  std::string report = "worst |error| / magnitude, wide FP8 values and weights of +-[2^-4, 2^7):\n";
  for (int next_n = 1; next_n <= 4; ++next_n)
    for (int heads : {16, 32, 64})
      for (int dim : {64, 128}) {
        ck::LogitsCase c;
        c.config = {next_n, heads, dim, 64, false, LogitsDType::f32, {}, PagedMqaLogitsVariant::sm90};
        c.lengths = {static_cast<int>(rng() % 3000) + 1000, static_cast<int>(rng() % 3000) + 1000};
        c.lens_2d = false;
        c.wide_values = true;
        c.wide_weights = true;
        c.seed = rng();
        const ck::Comparison cmp = ck::run_logits_case(test::gpu_session(), c);
        INFO(ck::describe(c) << ": " << cmp.failure);
        CHECK(cmp.passed);
        worst = std::max(worst, cmp.worst_error);
        report += fmt::format("  n{} h{} d{}: {:.3g} (2^{:.2f}); largest error / model bound {:.3g}\n", next_n, heads, dim,
                              cmp.worst_error, std::log2(cmp.worst_error), cmp.worst_bound_fraction);
      }
  std::printf("%s  overall %.3g (2^%.2f)\n", report.c_str(), worst, std::log2(worst));
}
