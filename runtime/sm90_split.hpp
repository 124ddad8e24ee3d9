#pragma once
// How many KV blocks each CTA of the sm90 paged logits kernel covers (grid: splits x B). The grid may
// depend only on shapes (the lengths live on the device, a captured launch stays valid), so the choice
// assumes every request is `width_blocks` long and minimizes the time of that case:
//   waves x (blocks per CTA + a CTA's fixed work),  waves = ceil(splits x B / slots),
// slots = multiprocessors x the kernel's CTAs per SM: a last wave filled badly costs a whole wave (at
// B = 64, L = 32K, H = 32, three CTAs per SM, eight splits of 64 blocks ran 512 CTAs on 396 slots, two
// waves of 64 blocks, where twelve splits of 43 run two waves of 43). A grid of more than 8 waves even
// at 64 blocks per CTA keeps 64: there the CTAs' jitter evens the tail out and more, shorter CTAs
// measured no faster (8 % slower at B = 128, L = 128K, next_n 2, H 64; docs/benchmarks/logits.md).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "../kernels/paged_mqa_logits_sm90_form.cuh"

namespace flash_indexer {

// A CTA's own work (its query and weights, the pipeline's fill and drain) in KV blocks' worth: hidden
// behind another CTA where the SM holds two or more, exposed where it holds one (at one CTA per SM,
// halving the CTAs of B = 1 took 16-20 % off).
constexpr std::int64_t sm90_cta_fixed_blocks(int ctas_per_sm) { return ctas_per_sm >= 2 ? 2 : 8; }
constexpr std::int64_t kSm90MaxRoundedWaves = 8;

// Whether the producer issues the query and fills its first stages before the CTA's barrier
// (PagedMqaLogitsSm90Params::fill_before_barrier; kernels whose consumers move registers never do,
// paged_mqa_logits_sm90.cuh says why). Filling before the barrier is 2-8 % faster wherever a CTA's
// setup latency shows (B 1-8) and neutral in the large grids of two CTAs per SM, but it was 3-6 % slower
// in grids of several waves at one CTA per SM, for a reason the code does not show (its consumer and
// store-warp SASS were alike); docs/benchmarks/logits.md has the numbers. So one CTA per SM (next_n 4
// H 32, N 192-256) fills early only in a grid of one wave.
constexpr bool sm90_fill_before_barrier(std::int64_t ctas, int multiprocessors, int ctas_per_sm) {
  return ctas_per_sm >= 2 || ctas <= multiprocessors;
}

// The most KV blocks per CTA the split may choose. Where two or more CTAs share an SM, 64: one CTA's
// prologue and drain hide behind another's stream, so shorter CTAs cost little and even out uneven
// lengths. Where one CTA holds the SM (N 72..256) nothing overlaps them (about 8 blocks' worth per CTA,
// sm90_cta_fixed_blocks), so longer CTAs, up to the kernel's 256, take fewer of them: at B 64 x 128K
// next_n 2 H 64, 512 CTAs of 256 blocks in 4 waves instead of 2048 of 64 in 16 (DeepGEMM's grid is
// persistent: one CTA per SM for the whole call).
constexpr int sm90_max_blocks_per_split(int ctas_per_sm) { return ctas_per_sm >= 2 ? 64 : 256; }

inline int sm90_blocks_per_split(std::int64_t width_blocks, std::int64_t batch, int multiprocessors, int ctas_per_sm,
                                 int max_blocks_per_split) {
  width_blocks = std::max<std::int64_t>(width_blocks, 1);
  batch = std::max<std::int64_t>(batch, 1);
  ctas_per_sm = std::max(ctas_per_sm, 1);
  const std::int64_t slots = static_cast<std::int64_t>(std::max(multiprocessors, 1)) * ctas_per_sm;
  const std::int64_t fixed = sm90_cta_fixed_blocks(ctas_per_sm);
  const auto splits_of = [&](int b) { return (width_blocks + b - 1) / b; };
  if (splits_of(max_blocks_per_split) * batch > kSm90MaxRoundedWaves * slots) {
    const std::int64_t splits = splits_of(max_blocks_per_split);
    return static_cast<int>((width_blocks + splits - 1) / splits);
  }
  int best = max_blocks_per_split;
  std::int64_t best_cost = std::numeric_limits<std::int64_t>::max();
  for (int b = 1; b <= max_blocks_per_split; ++b) {
    const std::int64_t splits = splits_of(b);
    const std::int64_t per_cta = (width_blocks + splits - 1) / splits;  // the same splits, evened out
    const std::int64_t cost = (splits * batch + slots - 1) / slots * (per_cta + fixed);
    if (cost < best_cost) {  // ties: the smaller b, more CTAs for lengths shorter than the width
      best_cost = cost;
      best = static_cast<int>(per_cta);
    }
  }
  return best;
}

// Whether an FP8 call of next_n >= 2 runs as B * next_n query rows of the next_n = 1 kernel, each row
// reading its request's blocks (as DeepGEMM runs next_n 3 and 4), instead of one CTA computing all
// next_n rows of a block. Where few blocks meet a wide N = next_n * H, the one-wave grid of the N-wide
// kernel is latency: a CTA's one or two consumers run every row's wgmma and head sums of a block in turn,
// while the flattened rows spread them over more CTAs and SMs and read the shared blocks through L2.
// Where it pays, by configuration and size, is Sm90PagedForm::flatten_max_row_blocks
// (docs/benchmarks/logits.md has the measurements).
constexpr bool sm90_flattened(int next_n, int heads, bool mxfp4, std::int64_t batch, std::int64_t width_blocks) {
  const int max_row_blocks = kernels::sm90_paged_form(next_n, heads, mxfp4).flatten_max_row_blocks;
  if (max_row_blocks == 0 || batch * next_n > 65535) return false;
  return batch * next_n * width_blocks <= max_row_blocks;
}

}  // namespace flash_indexer
