// The CPU reference of the prefill path: ragged MQA logits over key windows equal the paged
// reference on the same keys inside each window and are -inf outside it; windows clamp; NaN follows the
// paged rules; the windowed top-k equals the decode top-k of a row masked to its window.
#include "catch_compat.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "flash_indexer/reference.hpp"

using namespace flash_indexer;
namespace ref = flash_indexer::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Prefill {
  int tokens = 0, heads = 0, head_dim = 0;
  std::int64_t keys = 0;
  std::vector<std::uint8_t> q, kv;
  std::vector<float> scales, weights;
  std::vector<std::int32_t> ks, ke;

  ref::MqaLogitsInputs inputs() const {
    ref::MqaLogitsInputs in;
    in.tokens = tokens;
    in.heads = heads;
    in.head_dim = head_dim;
    in.keys = keys;
    in.q = q.data();
    in.kv = kv.data();
    in.kv_scales = scales.data();
    in.weights = weights.data();
    in.ks = ks.data();
    in.ke = ke.data();
    return in;
  }
};

// Random FP8 bytes that are never NaN (0x7f / 0xff), positive scales, weights of both signs.
Prefill random_prefill(int tokens, int heads, int head_dim, std::int64_t keys, std::mt19937_64& rng) {
  Prefill p;
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = head_dim;
  p.keys = keys;
  std::uniform_int_distribution<int> byte(0, 255);
  auto fp8 = [&] {
    int b = byte(rng);
    if ((b & 0x7f) == 0x7f) b ^= 1;
    return static_cast<std::uint8_t>(b);
  };
  p.q.resize(static_cast<std::size_t>(tokens) * heads * head_dim);
  for (auto& b : p.q) b = fp8();
  p.kv.resize(static_cast<std::size_t>(keys) * head_dim);
  for (auto& b : p.kv) b = fp8();
  std::uniform_real_distribution<float> scale(0.01f, 2.0f), weight(-1.0f, 1.0f);
  p.scales.resize(static_cast<std::size_t>(keys));
  for (auto& s : p.scales) s = scale(rng);
  p.weights.resize(static_cast<std::size_t>(tokens) * heads);
  for (auto& w : p.weights) w = weight(rng);
  p.ks.assign(static_cast<std::size_t>(tokens), 0);
  p.ke.assign(static_cast<std::size_t>(tokens), static_cast<std::int32_t>(keys));
  return p;
}

// The same keys as a paged cache (contract §2: 64 keys per block, then their 64 FP32 scales), every
// token its own request of next_n = 1 seeing the first ke[t] keys through an identity block table.
std::vector<double> paged_logits_of(const Prefill& p) {
  constexpr int kBlock = 64;
  const int blocks = static_cast<int>((p.keys + kBlock - 1) / kBlock);
  const std::int64_t block_bytes = kBlock * (p.head_dim + 4);
  std::vector<std::uint8_t> cache(static_cast<std::size_t>(blocks * block_bytes), 0);
  for (std::int64_t s = 0; s < p.keys; ++s) {
    std::uint8_t* block = cache.data() + (s / kBlock) * block_bytes;
    std::memcpy(block + (s % kBlock) * p.head_dim, p.kv.data() + s * p.head_dim, static_cast<std::size_t>(p.head_dim));
    std::memcpy(block + kBlock * p.head_dim + (s % kBlock) * 4, &p.scales[static_cast<std::size_t>(s)], 4);
  }
  std::vector<std::int32_t> table(static_cast<std::size_t>(p.tokens) * blocks);
  for (int t = 0; t < p.tokens; ++t)
    for (int b = 0; b < blocks; ++b) table[static_cast<std::size_t>(t) * blocks + b] = b;
  std::vector<std::int32_t> lens(static_cast<std::size_t>(p.tokens));
  for (int t = 0; t < p.tokens; ++t) lens[t] = std::clamp<std::int32_t>(p.ke[t], 0, static_cast<std::int32_t>(p.keys));
  ref::PagedMqaLogitsInputs in;
  in.batch = p.tokens;
  in.next_n = 1;
  in.heads = p.heads;
  in.head_dim = p.head_dim;
  in.block_size = kBlock;
  in.num_blocks = blocks;
  in.kv_block_stride = block_bytes;
  in.q = p.q.data();
  in.kv_cache = cache.data();
  in.weights = p.weights.data();
  in.context_lens = lens.data();
  in.lens_2d = true;
  in.block_table = table.data();
  in.block_table_stride = blocks;
  in.max_blocks = blocks;
  in.width = p.keys;
  return ref::paged_mqa_logits(in);
}

}  // namespace

TEST_CASE("prefill logits equal the paged reference inside each window, -inf outside", "[reference][prefill]") {
  std::mt19937_64 rng(21);
  for (auto [heads, head_dim] : {std::pair{16, 64}, std::pair{4, 128}}) {
    Prefill p = random_prefill(9, heads, head_dim, 200, rng);
    // Causal, prefix, arbitrary, overlapping, empty (ke <= ks), and clamped (ks < 0, ke > N) windows.
    p.ks = {0, 0, 37, 37, 150, 120, -5, 180, 199};
    p.ke = {1, 200, 64, 130, 150, 100, 70, 300, 200};
    std::vector<double> magnitude;
    const std::vector<double> got = ref::mqa_logits(p.inputs(), &magnitude);
    const std::vector<double> paged = paged_logits_of(p);
    REQUIRE(got.size() == static_cast<std::size_t>(p.tokens * p.keys));
    for (int t = 0; t < p.tokens; ++t) {
      const ref::KeyWindow w = ref::key_window(p.inputs(), t);
      CHECK(w.start == std::clamp<std::int64_t>(p.ks[t], 0, p.keys));
      CHECK(w.end >= w.start);
      for (std::int64_t s = 0; s < p.keys; ++s) {
        const std::size_t i = static_cast<std::size_t>(t * p.keys + s);
        INFO("token " << t << " key " << s);
        if (s >= w.start && s < w.end) {
          REQUIRE(got[i] == paged[i]);  // the same double-precision sum, in the same order
          REQUIRE(magnitude[i] >= std::fabs(got[i]));
        } else {
          REQUIRE(got[i] == -kInf);
          REQUIRE(magnitude[i] == 0.0);
        }
      }
    }
    // Token 4 (ks = ke) and token 5 (ke < ks) see nothing; token 7's window is cut at N.
    CHECK(ref::key_window(p.inputs(), 4).end == ref::key_window(p.inputs(), 4).start);
    CHECK(ref::key_window(p.inputs(), 5).end == ref::key_window(p.inputs(), 5).start);
    CHECK(ref::key_window(p.inputs(), 7).end == p.keys);
  }
}

TEST_CASE("prefill logits: a hand-checked score and the NaN rules of the paged op", "[reference][prefill]") {
  Prefill p;
  p.tokens = 1;
  p.heads = 2;
  p.head_dim = 2;
  p.keys = 3;
  // q head 0 = (1, 1), head 1 = (1, -1); keys (1, 1), (1.5, 1), (NaN, 1); scales 2, 1, 1.
  p.q = {0x38, 0x38, 0x38, 0xb8};
  p.kv = {0x38, 0x38, 0x3c, 0x38, 0x7f, 0x38};
  p.scales = {2.0f, 1.0f, 1.0f};
  p.weights = {0.5f, -1.0f};
  p.ks = {0};
  p.ke = {3};
  const std::vector<double> got = ref::mqa_logits(p.inputs());
  // key 0: head 0 dot 2, head 1 dot 0 -> (0.5 * 2 - 1 * 0) * 2 = 2.
  CHECK(got[0] == 2.0);
  // key 1: head 0 dot 2.5, head 1 dot 0.5 -> 0.5 * 2.5 - 1 * 0.5 = 0.75.
  CHECK(got[1] == 0.75);
  // key 2: a NaN key makes every dot NaN, which counts as 0: the score is 0, as fmaxf gives.
  CHECK(got[2] == 0.0);
  // A NaN scale makes the score NaN.
  p.scales[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(ref::mqa_logits(p.inputs())[1]));
}

TEST_CASE("windowed top-k equals the decode top-k of each row masked to its window", "[reference][prefill]") {
  std::mt19937_64 rng(5);
  const std::int64_t width = 300;
  const int rows = 40;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> edge(-20, width + 20);
  std::vector<float> logits(static_cast<std::size_t>(rows * width));
  for (auto& x : logits) x = std::round(normal(rng) * 4.0f) / 4.0f;  // many ties
  logits[5] = std::numeric_limits<float>::quiet_NaN();
  logits[width + 7] = -0.0f;
  std::vector<std::int64_t> starts(rows), ends(rows);
  for (int r = 0; r < rows; ++r) {
    starts[r] = edge(rng);
    ends[r] = edge(rng);
  }
  starts[0] = 0, ends[0] = width;   // the whole row
  starts[1] = 10, ends[1] = 10;     // empty
  starts[2] = 200, ends[2] = 100;   // ends before it starts: empty
  for (int k : {1, 7, 64}) {
    for (bool sorted : {false, true}) {
      const ref::TopkResult abs = ref::topk_windows(logits, width, width, starts, ends, k, false, sorted);
      const ref::TopkResult rel = ref::topk_windows(logits, width, width, starts, ends, k, true, sorted);
      // The decode top-k of a copy whose columns outside the window are NaN, with lengths = window end.
      std::vector<float> masked = logits;
      std::vector<std::int64_t> lengths(rows);
      for (int r = 0; r < rows; ++r) {
        const std::int64_t start = std::clamp<std::int64_t>(starts[r], 0, width);
        const std::int64_t end = std::max(start, std::clamp<std::int64_t>(ends[r], 0, width));
        for (std::int64_t s = 0; s < start; ++s)
          masked[static_cast<std::size_t>(r * width + s)] = std::numeric_limits<float>::quiet_NaN();
        lengths[r] = end;
        for (int i = 0; i < k; ++i) {
          const std::size_t slot = static_cast<std::size_t>(r) * k + i;
          INFO("row " << r << " slot " << i << " k " << k);
          const std::int32_t absolute = abs.indices[slot];
          REQUIRE(rel.indices[slot] == (absolute < 0 ? -1 : absolute - static_cast<std::int32_t>(start)));
        }
      }
      const ref::TopkResult want = ref::topk(masked, width, width, lengths, k, sorted);
      CHECK(abs.indices == want.indices);
      CHECK(abs.values == want.values);
    }
  }
  // Empty windows pad with -1 and -inf.
  const ref::TopkResult empty = ref::topk_windows(logits, width, width, starts, ends, 3, true, true);
  for (int i = 0; i < 3; ++i) {
    CHECK(empty.indices[3 + i] == -1);
    CHECK(empty.indices[6 + i] == -1);
    CHECK(std::isinf(empty.values[3 + i]));
  }
}
