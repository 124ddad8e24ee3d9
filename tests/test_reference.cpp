// The CPU reference on small hand-checked cases; the number-format helpers against the compiler.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "flash_indexer/reference.hpp"

using namespace flash_indexer;
namespace ref = flash_indexer::reference;

TEST_CASE("FP8 E4M3 decoding", "[reference]") {
  CHECK(ref::fp8_e4m3_to_float(0x00) == 0.0f);
  CHECK(ref::fp8_e4m3_to_float(0x38) == 1.0f);
  CHECK(ref::fp8_e4m3_to_float(0x3c) == 1.5f);
  CHECK(ref::fp8_e4m3_to_float(0xb8) == -1.0f);
  CHECK(ref::fp8_e4m3_to_float(0x7e) == 448.0f);
  CHECK(ref::fp8_e4m3_to_float(0x01) == std::ldexp(1.0f, -9));
  CHECK(ref::fp8_e4m3_to_float(0x07) == 7 * std::ldexp(1.0f, -9));
  CHECK(ref::fp8_e4m3_to_float(0x08) == std::ldexp(1.0f, -6));
  CHECK(std::isnan(ref::fp8_e4m3_to_float(0x7f)));
  CHECK(std::isnan(ref::fp8_e4m3_to_float(0xff)));
}

TEST_CASE("FP16 rounding is round-to-nearest-even as the hardware does", "[reference]") {
  CHECK(ref::float_to_f16_bits(1.0f) == 0x3c00);
  CHECK(ref::float_to_f16_bits(65504.0f) == 0x7bff);
  CHECK(ref::float_to_f16_bits(65519.996f) == 0x7bff);
  CHECK(ref::float_to_f16_bits(65520.0f) == 0x7c00);  // tie: rounds to even, which is infinity
  CHECK(ref::float_to_f16_bits(-1e9f) == 0xfc00);
  CHECK(ref::float_to_f16_bits(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(ref::float_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000);      // tie to even: 0
  CHECK(ref::float_to_f16_bits(3 * std::ldexp(1.0f, -25)) == 0x0002);  // tie to even: 2
  CHECK(ref::float_to_f16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(ref::float_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(ref::float_to_f16_bits(-0.0f) == 0x8000);
  CHECK(std::isnan(ref::f16_bits_to_float(ref::float_to_f16_bits(std::numeric_limits<float>::quiet_NaN()))));

  // Every FP16 value decodes and re-encodes to itself; random floats round as the compiler's _Float16.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = ref::f16_bits_to_float(static_cast<std::uint16_t>(h));
    if (!std::isnan(f)) REQUIRE(ref::float_to_f16_bits(f) == h);
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 2000000; ++i) {
    std::uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x80000000u) | (0x33000000u + bits % 0x14800000u);  // around the FP16 range
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    REQUIRE(ref::float_to_f16_bits(f) == std::bit_cast<std::uint16_t>(h));
  }
}

TEST_CASE("BF16 rounding is round-to-nearest-even", "[reference]") {
  CHECK(ref::float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(ref::float_to_bf16_bits(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie, even stays
  CHECK(ref::float_to_bf16_bits(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
  CHECK(ref::float_to_bf16_bits(std::bit_cast<float>(0x3f808001u)) == 0x3f81);
  CHECK(ref::float_to_bf16_bits(std::bit_cast<float>(0x7f7fffffu)) == 0x7f80);  // FLT_MAX rounds to inf
  CHECK(ref::bf16_bits_to_float(0xc000) == -2.0f);
  CHECK(std::isnan(ref::bf16_bits_to_float(ref::float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
}

namespace {

// One request, head_dim 64, 16 heads, one 64-key block at id 1 of 2; block stride padded to 4352.
struct SmallProblem {
  static constexpr int kHeads = 16, kDim = 64, kBlock = 64;
  std::vector<std::uint8_t> q, kv;
  std::vector<float> w;
  std::vector<std::int32_t> lens, table;
  ref::PagedMqaLogitsInputs in;

  SmallProblem(int next_n, std::vector<std::int32_t> lengths, bool lens_2d) : lens(std::move(lengths)) {
    const std::int64_t stride = kBlock * (kDim + 4) + 16;
    q.assign(next_n * kHeads * kDim, 0x00);
    kv.assign(2 * stride, 0x00);
    w.assign(next_n * kHeads, 0.0f);
    table = {1, 7};  // slot 1 holds an id outside the 2-block cache
    std::uint8_t* block = kv.data() + stride;
    for (int t = 0; t < kBlock; ++t) {
      for (int d = 0; d < kDim; ++d) block[t * kDim + d] = 0x38;  // every key element 1.0
      const float scale = 0.5f;
      std::memcpy(block + kBlock * kDim + 4 * t, &scale, 4);
    }
    in.batch = 1;
    in.next_n = next_n;
    in.heads = kHeads;
    in.head_dim = kDim;
    in.block_size = kBlock;
    in.num_blocks = 2;
    in.kv_block_stride = stride;
    in.q = q.data();
    in.kv_cache = kv.data();
    in.weights = w.data();
    in.context_lens = lens.data();
    in.lens_2d = lens_2d;
    in.block_table = table.data();
    in.block_table_stride = 2;
    in.max_blocks = 2;
    in.width = 160;
  }
};

}  // namespace

TEST_CASE("reference logits on a hand-checked case", "[reference]") {
  SmallProblem p(1, {70}, true);
  // Head 0: q = 1.0 everywhere, dot = 64. Head 1: q = -1.0, dot = -64, ReLU gives 0. Head 2: q = 0.5 on
  // 8 dims, dot = 4.
  for (int d = 0; d < 64; ++d) p.q[0 * 64 + d] = 0x38, p.q[1 * 64 + d] = 0xb8;
  for (int d = 0; d < 8; ++d) p.q[2 * 64 + d] = 0x30;
  p.w[0] = 1.0f;
  p.w[1] = 100.0f;
  p.w[2] = -0.5f;
  const auto out = ref::paged_mqa_logits(p.in);
  // (64 * 1 + 0 * 100 + 4 * -0.5) * 0.5 = 31
  for (int s = 0; s < 64; ++s) REQUIRE(out[s] == 31.0);
  for (int s = 64; s < 70; ++s) REQUIRE(std::isnan(out[s]));  // block id 7 is outside the cache
  for (int s = 70; s < 160; ++s) REQUIRE(out[s] == -std::numeric_limits<double>::infinity());

  p.w[3] = std::numeric_limits<float>::quiet_NaN();  // a NaN weight makes the row NaN even with ReLU 0
  CHECK(std::isnan(ref::paged_mqa_logits(p.in)[0]));
}

TEST_CASE("1-D context lengths follow the MTP rule and lengths clamp to 0..width", "[reference]") {
  SmallProblem p(3, {5}, false);
  for (auto& b : p.q) b = 0x38;
  for (auto& w : p.w) w = 1.0f;
  const auto out = ref::paged_mqa_logits(p.in);
  // Row j sees L - next_n + j + 1 = 3, 4, 5 keys; each logit = 16 heads * 64 * 0.5 = 512.
  for (int j = 0; j < 3; ++j) {
    CHECK(ref::row_length(p.in, 0, j) == 3 + j);
    CHECK(out[j * 160 + 2 + j] == 512.0);
    CHECK(std::isinf(out[j * 160 + 3 + j]));
  }
  p.lens = {1};  // 1 - 3 + 0 + 1 < 0: the first row sees nothing
  CHECK(ref::row_length(p.in, 0, 0) == 0);
  CHECK(ref::row_length(p.in, 0, 2) == 1);
  p.lens = {100000};
  CHECK(ref::row_length(p.in, 0, 2) == 160);
}

TEST_CASE("reference top-k: larger first, ties to the lower column, NaN never, -0 = +0, -1 padding", "[reference]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Row 0: ties and signed zeros; row 1: NaN and infinities, length 4 of width 6; row 2: length 0.
  const std::vector<float> logits = {1.0f, -0.0f, 3.0f, 0.0f, 3.0f, 1.0f,  //
                                     nan,  -inf,  inf,  nan,  9.0f, 9.0f,  //
                                     5.0f, 5.0f,  5.0f, 5.0f, 5.0f, 5.0f};
  const auto r = reference::topk(logits, 6, 6, {6, 4, 0}, 4, false);
  CHECK(r.indices == std::vector<std::int32_t>{2, 4, 0, 5, /**/ 2, 1, -1, -1, /**/ -1, -1, -1, -1});
  CHECK(r.values[4] == inf);
  CHECK(r.values[5] == -inf);
  CHECK(r.values[6] == -inf);  // padding
  const auto z = reference::topk(logits, 6, 6, {6, 4, 0}, 5, false);
  CHECK(z.indices[4] == 1);  // -0 (column 1) ties +0 (column 3): the lower column wins
  const auto s = reference::topk(logits, 6, 6, {6, 4, 0}, 4, true);
  CHECK(s.indices == std::vector<std::int32_t>{0, 2, 4, 5, /**/ 1, 2, -1, -1, /**/ -1, -1, -1, -1});
  const auto clamped = reference::topk(logits, 6, 5, {100, -3, 7}, 2, true);  // lengths clamp to [0, width]
  CHECK(clamped.indices == std::vector<std::int32_t>{2, 4, /**/ -1, -1, /**/ 0, 1});
}
