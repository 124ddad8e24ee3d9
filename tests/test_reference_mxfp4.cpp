// The MXFP4 cache (contract §2.2) in the CPU reference: the number formats, the packing, a
// hand-checked logit, and agreement with the FP8 path on keys and queries that both formats hold exactly.
#include "catch_compat.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "flash_indexer/reference.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ref = flash_indexer::reference;

TEST_CASE("FP4 E2M1 and UE8M0 decoding", "[reference][mxfp4]") {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int n = 0; n < 8; ++n) {
    CHECK(ref::fp4_e2m1_to_float(static_cast<std::uint8_t>(n)) == magnitudes[n]);
    CHECK(ref::fp4_e2m1_to_float(static_cast<std::uint8_t>(n | 8)) == -magnitudes[n]);
    CHECK(ref::fp4_e2m1_to_float(static_cast<std::uint8_t>(0xF0 | n)) == magnitudes[n]);  // the high nibble is ignored
  }
  CHECK(std::signbit(ref::fp4_e2m1_to_float(0x8)));
  CHECK(ref::ue8m0_to_double(127) == 1.0);
  CHECK(ref::ue8m0_to_double(128) == 2.0);
  CHECK(ref::ue8m0_to_double(120) == 1.0 / 128);
  CHECK(ref::ue8m0_to_double(0) == std::ldexp(1.0, -127));
  CHECK(ref::ue8m0_to_double(254) == std::ldexp(1.0, 127));
  CHECK(std::isnan(ref::ue8m0_to_double(255)));
}

TEST_CASE("MXFP4 packing: low nibble first, one exponent byte per 32 elements", "[reference][mxfp4]") {
  std::uint8_t packed[64] = {};
  packed[0] = 0x52;   // element 0: 0x2 (1.0), element 1: 0x5 (3.0)
  packed[16] = 0xC7;  // element 32: 0x7 (6.0), element 33: 0xC (-2.0)
  packed[63] = 0x10;  // element 126: 0x0, element 127: 0x1 (0.5)
  const std::int32_t scales = static_cast<std::int32_t>(127u | 129u << 8 | 0u << 16 | 126u << 24);
  CHECK(ref::mxfp4_value(packed, scales, 0) == 1.0);
  CHECK(ref::mxfp4_value(packed, scales, 1) == 3.0);
  CHECK(ref::mxfp4_value(packed, scales, 32) == 24.0);  // 6 * 2^2
  CHECK(ref::mxfp4_value(packed, scales, 33) == -8.0);
  CHECK(ref::mxfp4_value(packed, scales, 64) == 0.0);   // exponent byte 2: 2^-127, value 0
  CHECK(ref::mxfp4_value(packed, scales, 127) == 0.25);  // 0.5 * 2^-1
}

namespace {

// B requests of one 64-token block each, H heads, D 128; the MXFP4 cache and, for the same values,
// an FP8 cache (scale 1) where every value is exact in E4M3.
struct TwinProblem {
  static constexpr int kBlock = 64, kDim = 128;
  int batch, heads;
  std::vector<std::uint8_t> q4, kv4, q8, kv8;
  std::vector<std::int32_t> q_scales, lens, table;
  std::vector<float> w;

  // E4M3 bytes of +-{0.5, 1, 1.5, 2, 3, 4, 6} * 2^k for k in -2..2: every E2M1 value times such a scale.
  static std::uint8_t to_fp8(double v) {
    for (int b = 0; b < 256; ++b)
      if (b != 0x80 && ref::fp8_e4m3_to_float(static_cast<std::uint8_t>(b)) == v) return static_cast<std::uint8_t>(b);
    FAIL("not exact in E4M3: " << v);
    return 0;
  }

  TwinProblem(int b, int h, std::mt19937_64& rng) : batch(b), heads(h) {
    std::uniform_int_distribution<int> nibble(0, 15), exponent(125, 129);
    std::normal_distribution<float> weight(0.0f, 1.0f);
    const std::int64_t block4 = kBlock * (kDim / 2 + 4), block8 = kBlock * (kDim + 4);
    auto draw = [&](std::uint8_t* packed, std::int32_t& scales, std::uint8_t* fp8) {
      scales = 0;
      for (int g = 0; g < kDim / 32; ++g)
        scales |= static_cast<std::int32_t>(static_cast<std::uint32_t>(exponent(rng)) << (8 * g));
      for (int d = 0; d < kDim; d += 2) packed[d / 2] = static_cast<std::uint8_t>(nibble(rng) | nibble(rng) << 4);
      for (int d = 0; d < kDim; ++d) fp8[d] = to_fp8(ref::mxfp4_value(packed, scales, d));
    };
    q4.resize(static_cast<std::size_t>(b) * h * kDim / 2);
    q8.resize(static_cast<std::size_t>(b) * h * kDim);
    q_scales.resize(static_cast<std::size_t>(b) * h);
    for (int r = 0; r < b * h; ++r) draw(&q4[r * kDim / 2], q_scales[r], &q8[r * kDim]);
    kv4.assign(static_cast<std::size_t>(b * block4), 0);
    kv8.assign(static_cast<std::size_t>(b * block8), 0);
    for (int blk = 0; blk < b; ++blk)
      for (int t = 0; t < kBlock; ++t) {
        std::uint8_t* tail4 = &kv4[blk * block4 + kBlock * kDim / 2 + 4 * t];
        std::int32_t exponents;
        draw(&kv4[blk * block4 + t * kDim / 2], exponents, &kv8[blk * block8 + t * kDim]);
        std::memcpy(tail4, &exponents, 4);
        const float one = 1.0f;
        std::memcpy(&kv8[blk * block8 + kBlock * kDim + 4 * t], &one, 4);
      }
    for (int i = 0; i < b * h; ++i) w.push_back(weight(rng));
    for (int i = 0; i < b; ++i) {
      lens.push_back(1 + i * 63 / std::max(b - 1, 1));  // 1 .. 64
      table.push_back(b - 1 - i);                       // blocks in reverse
    }
  }

  ref::PagedMqaLogitsInputs inputs(ref::KvFormat kv) const {
    ref::PagedMqaLogitsInputs in;
    const bool four = kv == ref::KvFormat::mxfp4;
    in.kv = kv;
    in.batch = batch;
    in.next_n = 1;
    in.heads = heads;
    in.head_dim = kDim;
    in.block_size = kBlock;
    in.num_blocks = batch;
    in.kv_block_stride = four ? kBlock * (kDim / 2 + 4) : kBlock * (kDim + 4);
    in.q = four ? q4.data() : q8.data();
    in.q_scales = four ? q_scales.data() : nullptr;
    in.kv_cache = four ? kv4.data() : kv8.data();
    in.weights = w.data();
    in.context_lens = lens.data();
    in.lens_2d = false;
    in.block_table = table.data();
    in.block_table_stride = 1;
    in.max_blocks = 1;
    in.width = 80;
    return in;
  }
};

}  // namespace

TEST_CASE("MXFP4 reference logits equal the FP8 ones where both formats hold the values", "[reference][mxfp4]") {
  std::mt19937_64 rng(20261201);
  for (int heads : {16, 64}) {
    const TwinProblem p(5, heads, rng);
    std::vector<double> m4, m8;
    const auto four = ref::paged_mqa_logits(p.inputs(ref::KvFormat::mxfp4), &m4);
    const auto eight = ref::paged_mqa_logits(p.inputs(ref::KvFormat::fp8), &m8);
    REQUIRE(four.size() == eight.size());
    int live = 0;
    for (std::size_t i = 0; i < four.size(); ++i) {
      INFO("heads " << heads << " logit " << i);
      REQUIRE(std::bit_cast<std::uint64_t>(four[i]) == std::bit_cast<std::uint64_t>(eight[i]));
      REQUIRE(m4[i] == m8[i]);
      live += std::isfinite(four[i]) ? 1 : 0;
    }
    CHECK(live == 1 + 16 + 32 + 48 + 64);  // the lengths 1, 16, 32, 48, 64
  }
}

TEST_CASE("MXFP4 reference on a hand-checked logit, where an 0xFF exponent zeroes a head", "[reference][mxfp4]") {
  constexpr int kDim = 64, kBlock = 64, kHeads = 8;
  std::vector<std::uint8_t> q(kHeads * kDim / 2, 0), kv(kBlock * (kDim / 2 + 4), 0);
  std::vector<std::int32_t> q_scales(kHeads, 127 | 127 << 8), lens = {2}, table = {0};
  std::vector<float> w(kHeads, 0.0f);
  // Head 0: q = 1.0 (0x2) on its first 32 elements at scale 2^0, 0.5 (0x1) on the next 32 at 2^1 (= 1.0).
  for (int i = 0; i < 16; ++i) q[i] = 0x22;
  for (int i = 16; i < 32; ++i) q[i] = 0x11;
  q_scales[0] = 127 | 128 << 8;
  w[0] = 0.25f;
  // Head 1: the same q, but its second exponent byte is 0xFF: that head's dot is NaN and counts as 0.
  for (int i = 0; i < 32; ++i) q[kDim / 2 + i] = q[i];
  q_scales[1] = 127 | 255 << 8;
  w[1] = 1000.0f;
  // Key 0: 1.5 (0x3) everywhere at scale 2^0 and 2^-1; key 1: -1.0 (0xA) everywhere.
  for (int i = 0; i < kDim / 2; ++i) kv[i] = 0x33, kv[kDim / 2 + i] = 0xAA;
  const std::int32_t e0 = 127 | 126 << 8, e1 = 127 | 127 << 8;
  std::memcpy(&kv[kBlock * kDim / 2], &e0, 4);
  std::memcpy(&kv[kBlock * kDim / 2 + 4], &e1, 4);
  ref::PagedMqaLogitsInputs in;
  in.kv = ref::KvFormat::mxfp4;
  in.batch = 1;
  in.heads = kHeads;
  in.head_dim = kDim;
  in.num_blocks = 1;
  in.kv_block_stride = static_cast<std::int64_t>(kv.size());
  in.q = q.data();
  in.q_scales = q_scales.data();
  in.kv_cache = kv.data();
  in.weights = w.data();
  in.context_lens = lens.data();
  in.block_table = table.data();
  in.block_table_stride = 1;
  in.max_blocks = 1;
  in.width = 4;
  const auto out = ref::paged_mqa_logits(in);
  // Key 0, head 0: 32 * 1.0 * 1.5 + 32 * 1.0 * 0.75 = 72; times w 0.25 = 18. Key 1: dot -64, ReLU 0.
  CHECK(out[0] == 18.0);
  CHECK(out[1] == 0.0);
  CHECK(out[2] == -std::numeric_limits<double>::infinity());
}

TEST_CASE("MXFP4 quantization: nearest E2M1, ties to the even code, an exponent that fits the group's largest",
          "[reference][mxfp4]") {
  using reference::e2m1_nibble_of;
  for (std::uint8_t code = 0; code < 16; ++code) {
    if (code == 8) continue;  // -0 encodes as +0
    CHECK(e2m1_nibble_of(reference::fp4_e2m1_to_float(code)) == code);
  }
  CHECK(e2m1_nibble_of(0.25f) == 0);   // between 0 and 0.5: the even code 0
  CHECK(e2m1_nibble_of(0.75f) == 2);   // between 0.5 (code 1) and 1 (code 2)
  CHECK(e2m1_nibble_of(2.5f) == 4);    // between 2 (code 4) and 3 (code 5)
  CHECK(e2m1_nibble_of(5.0f) == 6);    // between 4 (code 6) and 6 (code 7)
  CHECK(e2m1_nibble_of(-0.7f) == 0x9);  // nearest -0.5
  CHECK(e2m1_nibble_of(100.0f) == 7);  // saturates
  CHECK(e2m1_nibble_of(-0.1f) == 0);   // rounds to zero, no negative zero

  std::mt19937_64 rng(test::fresh_seed());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(128);
  for (auto& v : x) v = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 21) - 10);
  x[40] = 0.0f;
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;  // an all-zero group
  std::vector<std::uint8_t> packed(64);
  const std::int32_t scales = reference::mxfp4_quantize(x.data(), 128, packed.data());
  for (int g = 0; g < 4; ++g) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[g * 32 + i]));
    const int e = static_cast<int>((static_cast<std::uint32_t>(scales) >> (8 * g)) & 0xffu) - 127;
    INFO("group " << g << " amax " << amax << " exponent " << e);
    if (amax == 0.0f) {
      CHECK(e == -127);
    } else {
      CHECK(amax <= std::ldexp(6.0, e));      // the largest fits
      CHECK(amax > std::ldexp(6.0, e - 1));   // and the next smaller exponent would not
    }
    for (int i = 0; i < 32; ++i) {
      const double got = reference::mxfp4_value(packed.data(), scales, g * 32 + i);
      const double want =
          reference::fp4_e2m1_to_float(reference::e2m1_nibble_of(static_cast<float>(std::ldexp(x[g * 32 + i], -e))));
      CHECK(got == std::ldexp(want, e));
      // No E2M1 value times 2^e is nearer to x than the one chosen.
      for (std::uint8_t code = 0; code < 16; ++code)
        CHECK(std::fabs(std::ldexp(reference::fp4_e2m1_to_float(code), e) - x[g * 32 + i]) >= std::fabs(got - x[g * 32 + i]));
    }
  }
}
