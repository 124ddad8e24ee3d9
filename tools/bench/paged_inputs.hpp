#pragma once
// Benchmark inputs of the paged indexer: a pool of KV blocks much larger than L2 (valid FP8 keys with
// positive scales, or MXFP4 keys with exponents near 2^0), q (FP8, or packed E2M1 with its exponents)
// and weights, and per batch shape the lengths (uniform in [0.7, 1.3] L) and a block table drawn
// shuffled from the whole pool.
//
// The FP8 values, two ways:
// - bytes: every byte uniformly random (any E4M3 value but NaN, magnitudes spread over 2^-9..448), the
//   weights normal with standard deviation 1/8. About 83 % of the scores (H 64) then lie beyond +-223,
//   in the coarse histogram's two end bins: nearly every shared-memory count of a warp meets the others
//   at one address.
// - normal: as DeepGEMM's test draws them: query and keys N(0, 1), each key token quantized with the
//   scale amax / 448 (MXFP4: query heads and key tokens quantized per 32 values, as
//   reference::mxfp4_quantize), the weights N(0, 1); the scores spread over many bins.
// The logits kernel's time, its fused histogram's included, measures the same on both (the histogram's
// overhead: median 3.5 % on bytes, 3.7 % on normal).
#include <cstdint>
#include <random>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::bench {

enum class PagedValues { bytes, normal };
const char* paged_values_name(PagedValues values);

class PagedInputs {
 public:
  // Sized for up to max_batch requests of up to 1.3 * max_length keys, next_n x heads x head_dim queries.
  PagedInputs(int max_batch, int max_length, int max_next_n, int max_heads, int head_dim, KvFormat kv, std::mt19937_64& rng,
              PagedValues values = PagedValues::bytes);

  // New lengths and block table for `batch` requests: uniform in [0.7, 1.3] `length`, or all exactly
  // `length` when `fixed` (how DeepGEMM's benchmark draws them: compare like with like). With
  // `resident_blocks` > 0 the table cycles through that many shuffled pool blocks instead of all of them.
  // `ragged`: lengths uniform in [L / 2, L] instead (a ragged decode batch; not with `fixed`).
  void draw(int batch, int length, bool fixed, std::mt19937_64& rng, std::int64_t resident_blocks = 0, bool ragged = false);

  KvFormat kv() const { return kv_; }
  int batch() const { return batch_; }
  std::int64_t width() const { return width_; }              // the longest length, rounded up to a block
  std::int64_t blocks_read() const { return blocks_read_; }  // KV blocks the lengths cover
  const std::vector<std::int32_t>& lengths() const { return lengths_; }
  std::int64_t block_bytes() const { return block_bytes_; }

  // Views for next_n and heads (<= the maxima), and the 1-D lengths.
  TensorView q(int next_n, int heads) const;
  TensorView q_scales(int next_n, int heads) const;  // MXFP4: int32 [B, next_n, H]; FP8: none (rank 0)
  TensorView kv_cache() const;
  TensorView weights(int next_n, int heads) const;
  TensorView context_lens() const;
  TensorView block_table() const;

 private:
  int head_dim_;
  KvFormat kv_;
  std::int64_t token_bytes_, block_bytes_, pool_blocks_, max_width_;
  check::DeviceBuffer pool_, q_, q_scales_, weights_, lens_, table_;
  std::vector<std::int32_t> ids_, lengths_;
  int batch_ = 0;
  std::int64_t width_ = 0, blocks_read_ = 0;
};

}  // namespace flash_indexer::bench
