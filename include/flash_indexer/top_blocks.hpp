#pragma once
// The first level of DeepSeek-V4.1's two-level indexing (docs/design/two-level.md): each row's best
// blocks of `block` consecutive columns, ranked by their largest score, as reference::top_blocks
// computes them: block i of row r covers columns [i * block, min((i + 1) * block, lengths[r])); its
// maximum ignores NaN, and a block with no selectable score is never chosen; with keep_newest the row's
// last block (its newest keys, possibly partial) is always taken; the others follow the rules of topk()
// (larger first, -0 equal to +0, equal maxima to the lower block). The result is each row's block ids in
// ascending order, -1 padding a row with fewer blocks: the candidates the second level reads
// (sparse_paged_mqa_logits, DecodePlan::run_second_level).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flash_indexer/arch.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"  // LogitsDType
#include "flash_indexer/tensor.hpp"

namespace flash_indexer {

// One kernel per dtype of the logits (both phases: the blocks' maxima, and the newest block's place).
struct TopBlocksConfig {
  LogitsDType logits = LogitsDType::f32;
  Arch arch{9, 0, true};

  std::string key() const;  // "top_blocks.in-f32.sm_90a"
  static TopBlocksConfig parse_key(std::string_view key);
  void check_supported() const;
  friend bool operator==(const TopBlocksConfig&, const TopBlocksConfig&) = default;
};
std::vector<TopBlocksConfig> supported_top_blocks_configs(const Arch& arch);

struct TopBlocksOptions {
  // Each row's last block is taken first, whatever its scores (SGLang's V4.1 publisher forces it in).
  bool keep_newest = false;
  // Lengths per request, as DecodePlan's context_lens: 0 takes lengths [rows] (or [B, next_n], one per
  // row); n > 0 takes lengths [B] with rows = B * n, row b * n + j seeing lengths[b] - n + j + 1 columns
  // (contract §1.2, the MTP rule).
  int next_n = 0;
};

// Bytes of workspace a call needs: the top-k's (topk_workspace_bytes), the rows' block counts and the
// blocks' maxima in the logits' dtype.
std::size_t top_blocks_workspace_bytes(std::int64_t rows, std::int64_t width, int block, LogitsDType logits);

// Tensor arguments (device memory; strides in elements):
//   logits     float32 / float16 / bfloat16 [rows, width], inner stride 1, row stride >= width
//   lengths    int32 [rows] or [B, next_n], contiguous: row r's live columns (clamped to [0, width]); or [B]
//              with options.next_n
//   After a DecodePlan::run the full-context step's logits are plan.logits(B), with its context_lens and
//   options.next_n = config.next_n for [B] lengths: the first level of the same step.
//   blocks     int32 [rows, k_blocks], contiguous; 1 <= k_blocks <= 4096: the chosen block ids
//   workspace  uint8, at least top_blocks_workspace_bytes(rows, width, block, dtype) bytes, 16-byte aligned
// block: 1..1024 columns. Launches on `stream` (the maxima, a topk() over them, and with keep_newest the
// newest block's place) without allocating, copying or synchronizing: capturable once its kernels are
// loaded (the first call per dtype compiles or reads the disk cache and must not be captured).
void top_blocks(const TensorView& logits, const TensorView& lengths, int block, const TensorView& blocks,
                const TensorView& workspace, Stream stream, const TopBlocksOptions& options = {});

// Loads (compiling on a cache miss) the kernel for `logits` in the current context, and the top-k's.
void warm_top_blocks(LogitsDType logits);

}  // namespace flash_indexer
