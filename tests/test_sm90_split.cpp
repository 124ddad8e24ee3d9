// The sm90 paged logits kernel's split choice (runtime/sm90_split.hpp), on the H200's shapes (132 SMs).
#include "catch_compat.hpp"
#include "sm90_split.hpp"

using namespace flash_indexer;

namespace {
int choose(std::int64_t width, std::int64_t batch, int ctas_per_sm) {
  return sm90_blocks_per_split(width, batch, 132, ctas_per_sm, sm90_max_blocks_per_split(ctas_per_sm));
}
}  // namespace

TEST_CASE("sm90 split: whole waves at the kernel's occupancy, at most 64 blocks per CTA where CTAs share an SM", "[split]") {
  // B = 64, L = 32K (512 blocks) at three CTAs per SM (n1, H = 32): twelve splits of 43 blocks, 768 CTAs
  // in two waves of 396, where eight of 64 (512 CTAs) also took two waves. Two per SM: eight of 64.
  CHECK(choose(512, 64, 3) == 43);
  CHECK(choose(512, 64, 2) == 64);
  // One CTA per SM (n2, H = 64), B = 1, L = 32K: 128 CTAs of 4 blocks, one wave (256 of 2 took two).
  CHECK(choose(512, 1, 1) == 4);
  // Two per SM, B = 1: one wave of 256 two-block CTAs.
  CHECK(choose(512, 1, 2) == 2);
  // B = 128, L = 8K at two per SM: two splits of 64 (one wave of 256) where three of 43 took two waves.
  CHECK(choose(128, 128, 2) == 64);
  // One per SM, many blocks: the longest CTAs (their prologue and drain are not hidden): B = 64 and 128
  // at L = 128K, 256 blocks each (512 / 1024 CTAs, 4 / 8 waves) where 64 took 16 / 32 waves; B = 8, one
  // wave of 128 CTAs of 128 blocks; B = 64 at L = 32K, one wave of 128 CTAs of 256.
  CHECK(choose(2048, 128, 1) == 256);
  CHECK(choose(2048, 64, 1) == 256);
  CHECK(choose(2048, 8, 1) == 128);
  CHECK(choose(512, 64, 1) == 256);
  // With the old bound of 64 the many-wave rule keeps 64 (B = 128, L = 128K: 64 blocks each, not 57).
  CHECK(sm90_blocks_per_split(2048, 128, 132, 1, 64) == 64);
  for (const int per_sm : {1, 2, 3, 4})
    for (const std::int64_t batch : {1, 2, 3, 8, 17, 64, 128, 1000})
      for (const std::int64_t width : {1, 2, 63, 64, 65, 512, 777, 2048, 4096, 100000}) {
        const int b = choose(width, batch, per_sm);
        REQUIRE(b >= 1);
        REQUIRE(b <= sm90_max_blocks_per_split(per_sm));
        REQUIRE(b <= width);
        // b is what the kernel's splits cover: evened out, so the last split is never empty.
        const std::int64_t splits = (width + b - 1) / b;
        REQUIRE((splits - 1) * b < width);
      }
}

TEST_CASE("sm90 split: the first stages are filled before the CTA barrier except in long grids of one CTA per SM", "[split]") {
  // Two or more CTAs per SM: always (faster at small B, neutral at large; docs/design/logits-sm90.md).
  CHECK(sm90_fill_before_barrier(1, 132, 2));
  CHECK(sm90_fill_before_barrier(100000, 132, 3));
  // One per SM (N 72-256): only a grid of one wave (next_n 2 H 64 B 64 x 128K: 3-6 % slower otherwise).
  CHECK(sm90_fill_before_barrier(128, 132, 1));
  CHECK(sm90_fill_before_barrier(132, 132, 1));
  CHECK_FALSE(sm90_fill_before_barrier(133, 132, 1));
  CHECK_FALSE(sm90_fill_before_barrier(2048, 132, 1));
}

TEST_CASE("sm90 split: small FP8 draft-token calls run flattened into next_n = 1 rows where that measured faster", "[split]") {
  // H 64: up to B * next_n * width_blocks = 6144 (B 1 to 128K at next_n 2-3, to 64K at next_n 4; B 8 x 8K),
  // where flattened rows measured 0.87-0.98 of the native kernel's time.
  CHECK(sm90_flattened(2, 64, false, 1, 2048));
  CHECK(sm90_flattened(3, 64, false, 1, 2048));
  CHECK(sm90_flattened(4, 64, false, 1, 1024));
  CHECK_FALSE(sm90_flattened(4, 64, false, 1, 2048));
  CHECK(sm90_flattened(4, 64, false, 8, 128));
  CHECK_FALSE(sm90_flattened(2, 64, false, 8, 512));
  CHECK_FALSE(sm90_flattened(2, 64, false, 32, 128));
  // H 32: next_n 3 only, up to 1536 (B 1 to 32K).
  CHECK(sm90_flattened(3, 32, false, 1, 512));
  CHECK_FALSE(sm90_flattened(3, 32, false, 1, 1024));
  CHECK_FALSE(sm90_flattened(2, 32, false, 1, 128));
  CHECK_FALSE(sm90_flattened(4, 32, false, 1, 128));
  // Never next_n 1, MXFP4, H 16, or more than 65535 rows (the grid's y).
  CHECK_FALSE(sm90_flattened(1, 64, false, 1, 128));
  CHECK_FALSE(sm90_flattened(2, 64, true, 1, 128));
  CHECK_FALSE(sm90_flattened(2, 16, false, 1, 128));
  CHECK_FALSE(sm90_flattened(2, 64, false, 40000, 0));
}
