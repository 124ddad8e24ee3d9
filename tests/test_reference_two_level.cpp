// The CPU reference of two-level indexing (docs/design/two-level.md): the first level's best blocks and
// the second level's logits over candidate blocks, against the full-context reference.
#include "catch_compat.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "flash_indexer/reference.hpp"
#include "logits_check.hpp"

using namespace flash_indexer;
namespace ref = flash_indexer::reference;
namespace ck = flash_indexer::check;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Random inputs of B requests (16 heads, D 64, FP8, 2-D lengths, check::make_inputs); the first
// request's block table slot 1 names an id outside the cache, so its keys 64..127 are NaN.
struct Problem {
  ck::LogitsCase c;
  ck::HostInputs host;
  std::vector<std::int32_t> lens;
  ref::PagedMqaLogitsInputs in;

  Problem(int next_n, std::vector<int> lengths, std::uint64_t seed) {
    c.config = {next_n, 16, 64, 64, false, LogitsDType::f32, {}};
    c.lengths = std::move(lengths);
    c.seed = seed;
    host = ck::make_inputs(c);
    host.block_table[1] = host.num_blocks;
    lens.assign(c.lengths.begin(), c.lengths.end());
    in = host.reference_view(c);
  }
};

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST_CASE("two-level reference: logits over candidate blocks equal the full-context logits at their positions", "[reference]") {
  std::mt19937_64 rng(20261207);
  // Rows of 0, 1, 7, 100 (keys 64..99 in the invalid id), 129 and 192 keys; sparse blocks of 8 and 16.
  Problem p(2, {100, 0, 129, 1, 7, 192}, rng());
  const std::vector<double> full = ref::paged_mqa_logits(p.in);
  for (const int block : {8, 16}) {
    const int candidates = 6;
    const std::int64_t rows = 6;
    // Every kind of entry: in range, the last (partial) block, a duplicate, -1, negative, past the row.
    std::vector<std::int32_t> c(static_cast<std::size_t>(rows * candidates));
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int32_t blocks = (p.lens[r] + block - 1) / block;
      const std::int32_t list[candidates] = {blocks - 1, 0, -1, blocks, static_cast<std::int32_t>(rng() % 12), -7};
      std::copy(list, list + candidates, c.begin() + r * candidates);
      c[r * candidates + 5] = c[r * candidates + 4];  // a duplicate of a random one
    }
    const std::vector<double> sparse = ref::sparse_paged_mqa_logits(p.in, c.data(), candidates, block);
    REQUIRE(sparse.size() == static_cast<std::size_t>(rows * candidates * block));
    int live = 0, nan = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < candidates; ++j) {
        const std::int32_t cand = c[r * candidates + j];
        const std::int64_t len = p.lens[r];
        const bool valid = cand >= 0 && cand < (len + block - 1) / block;
        for (int o = 0; o < block; ++o) {
          const std::int64_t pos = static_cast<std::int64_t>(cand) * block + o;
          const double got = sparse[static_cast<std::size_t>((r * candidates + j) * block + o)];
          INFO("block " << block << " row " << r << " candidate " << cand << " offset " << o);
          if (valid && pos < len) {
            CHECK(same(got, full[static_cast<std::size_t>(r * p.in.width + pos)]));
            live += std::isnan(got) ? 0 : 1;
            nan += std::isnan(got) ? 1 : 0;
          } else {
            CHECK(got == -std::numeric_limits<double>::infinity());
          }
        }
      }
    CHECK(live > 50);
    CHECK(nan > 0);  // row 0's keys 64..99 sit in the block outside the cache
  }
}

TEST_CASE("two-level reference: the first level's blocks (maxima, NaN, ties, -0, the newest block, padding)", "[reference]") {
  // One row of 20 positions in blocks of 4: maxima 3, NaN (all NaN), 5, 5, -0 / +0 mixed into 0.
  const std::vector<float> row = {1, 3, 2, -1, kNaN, kNaN, kNaN, kNaN, 5, 0, 0, 0, -2, 5, 4, kNaN, -0.0f, 0.0f, -1, -3};
  const std::vector<std::int64_t> len = {20};
  CHECK(ref::top_blocks(row, 20, 20, len, 4, 2, false) == std::vector<std::int32_t>{2, 3});  // 5 and 5: both
  CHECK(ref::top_blocks(row, 20, 20, len, 4, 3, false) == std::vector<std::int32_t>{0, 2, 3});
  // Five blocks, one all NaN: four selectable, then -1.
  CHECK(ref::top_blocks(row, 20, 20, len, 4, 6, false) == std::vector<std::int32_t>{0, 2, 3, 4, -1, -1});
  // The newest block (4, maximum +0) first, then the best others.
  CHECK(ref::top_blocks(row, 20, 20, len, 4, 2, true) == std::vector<std::int32_t>{2, 4});
  CHECK(ref::top_blocks(row, 20, 20, len, 4, 1, true) == std::vector<std::int32_t>{4});
  // A shorter row: 10 positions, blocks 0..2 (the last partial: 5, 0); +inf counts, NaN does not.
  std::vector<float> two = row;
  two[1] = kInf;
  const std::vector<std::int64_t> short_len = {10};
  CHECK(ref::top_blocks(two, 20, 20, short_len, 4, 1, false) == std::vector<std::int32_t>{0});
  CHECK(ref::top_blocks(two, 20, 20, short_len, 4, 2, true) == std::vector<std::int32_t>{0, 2});
  // Empty and zero-length rows: all -1.
  CHECK(ref::top_blocks(row, 20, 20, {0}, 4, 2, true) == std::vector<std::int32_t>{-1, -1});
}

TEST_CASE("two-level reference: both levels compose to the full-context top-k over the chosen blocks", "[reference]") {
  std::mt19937_64 rng(7);
  Problem p(3, {192, 150, 3, 191, 64, 80}, rng());
  const std::int64_t rows = 6, width = p.in.width;
  const std::vector<double> full = ref::paged_mqa_logits(p.in);
  std::vector<float> stored(full.size());
  for (std::size_t i = 0; i < full.size(); ++i) stored[i] = static_cast<float>(full[i]);
  std::vector<std::int64_t> lens(p.lens.begin(), p.lens.end());
  const int block = 8, k_blocks = 10, k = 24;
  const std::vector<std::int32_t> blocks = ref::top_blocks(stored, width, width, lens, block, k_blocks, true);
  const std::vector<double> sparse = ref::sparse_paged_mqa_logits(p.in, blocks.data(), k_blocks, block);
  std::vector<float> sparse_stored(sparse.size());
  for (std::size_t i = 0; i < sparse.size(); ++i) sparse_stored[i] = static_cast<float>(sparse[i]);
  const std::int64_t columns = static_cast<std::int64_t>(k_blocks) * block;
  const ref::TopkResult second =
      ref::topk(sparse_stored, columns, columns, std::vector<std::int64_t>(static_cast<std::size_t>(rows), columns), k, false);
  const std::vector<std::int32_t> positions = ref::sparse_positions(second.indices, k, blocks.data(), k_blocks, block);
  // The full-context top-k with every position outside the chosen blocks masked out.
  std::vector<float> masked(stored.size(), -kInf);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < k_blocks; ++i) {
      const std::int32_t b = blocks[r * k_blocks + i];
      for (int o = 0; b >= 0 && o < block; ++o)
        if (b * block + o < lens[r]) masked[r * width + b * block + o] = stored[r * width + b * block + o];
    }
  const ref::TopkResult want = ref::topk(masked, width, width, lens, k, false);
  for (std::int64_t r = 0; r < rows; ++r) {
    INFO("row " << r << " length " << lens[r]);
    std::vector<std::int32_t> got(positions.begin() + r * k, positions.begin() + (r + 1) * k);
    std::vector<std::int32_t> exp(want.indices.begin() + r * k, want.indices.begin() + (r + 1) * k);
    // -inf columns (masked) are selectable in the masked row but never in the sparse one: compare the
    // positions with a live score.
    std::erase_if(exp, [&](std::int32_t s) { return s < 0 || (std::isinf(masked[r * width + s]) && masked[r * width + s] < 0); });
    std::erase_if(got, [&](std::int32_t s) { return s < 0 || (std::isinf(stored[r * width + s]) && stored[r * width + s] < 0); });
    std::sort(got.begin(), got.end());
    std::sort(exp.begin(), exp.end());
    CHECK(got == exp);
    CHECK(!got.empty());
  }
}
