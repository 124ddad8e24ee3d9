#pragma once
// Sparse paged MQA logits: the second level of DeepSeek-V4.1's two-level indexing
// (docs/design/two-level.md). The paged logits of paged_mqa_logits (contract §1), each query row over
// its own candidate blocks of `candidate_block` consecutive positions only:
//
//   logits[r, c * bk + o] = the paged logit of position candidates[r][c] * bk + o of row r,
//                           or -inf where candidate c is not one of the row's blocks or the position
//                           is past the row's length
//
// so that the top-k of these logits (topk(), then reference::sparse_positions' mapping) is the
// full-context top-k restricted to the candidate blocks. With options.masked_nan, topk() with
// TopkOptions::block_table = candidates and block_size = candidate_block does both in one call.
#include <string>
#include <string_view>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"

namespace flash_indexer {

struct SparsePagedMqaLogitsConfig {
  int heads = 64;           // 32, 64
  int head_dim = 128;       // 128
  int candidate_block = 8;  // positions per candidate block: 8 or 16
  bool histogram = false;
  LogitsDType logits = LogitsDType::f32;
  KvFormat kv = KvFormat::fp8;
  Arch arch{9, 0, true};
  // `sm90`: the Hopper kernel (sm_90a: TMA gathers of the candidate blocks, FP8 wgmma), whose live values
  // are bitwise the sm90 paged_mqa_logits values of their positions; `portable`: any GPU from sm_80, bitwise
  // the portable paged_mqa_logits values. `automatic` takes sm90 on sm_90a, unless the environment says
  // FLASH_INDEXER_KERNEL=portable.
  PagedMqaLogitsVariant variant = PagedMqaLogitsVariant::automatic;

  // e.g. sparse_paged_mqa_logits.sm90.h64.d128.cb8.hist0.out-f32.kv-fp8.sm_90a
  std::string key() const;
  static SparsePagedMqaLogitsConfig parse_key(std::string_view key);
  void check_supported() const;
  // The same configuration with `automatic` replaced by the kernel the op picks for `arch`.
  SparsePagedMqaLogitsConfig resolved() const;
  friend bool operator==(const SparsePagedMqaLogitsConfig&, const SparsePagedMqaLogitsConfig&) = default;
};

// Every configuration the library compiles for `arch` (part of the default warm manifest).
std::vector<SparsePagedMqaLogitsConfig> supported_sparse_paged_mqa_logits_configs(const Arch& arch);

struct SparsePagedMqaLogitsOptions {
  // Optional coarse score histogram (contract §3) of the written logits: int32 [B * next_n, 1024],
  // contiguous; the kernel ADDS the coarse-bin counts of each row's live values as stored (not NaN, not
  // the -inf of masked columns), so the caller zeroes it first.
  TensorView histogram{};
  // MXFP4 only: the query's exponents, int32 [B, next_n, H], as paged_mqa_logits takes them.
  TensorView q_scales{};
  // Programmatic dependent launch, as PagedMqaLogitsOptions::pdl.
  bool pdl = false;
  // Masked columns (candidate not one of the row's blocks, position past the row's length) as NaN
  // instead of -inf. topk() never selects NaN (contract §4), so topk() of these logits with
  // TopkOptions::block_table = candidates and block_size = candidate_block selects live positions only
  // and writes them as context positions, -1 padding a row with fewer than k: the second level's top-k
  // in one call. (A live -inf, an FP16 overflow, stays selectable, as in the full-context op.)
  bool masked_nan = false;
  // Force a kernel (comparisons, debugging); `sm90` on a device it does not cover is an error.
  PagedMqaLogitsVariant variant = PagedMqaLogitsVariant::automatic;
};

// Tensor arguments (device memory; strides in elements) as paged_mqa_logits' (q, kv_cache, weights,
// context_lens, block_table: FP8 or MXFP4 cache, H 32 or 64, D 128), and
//   candidates       int32 [B * next_n, C], inner stride 1, row stride >= C: blocks of the row's context
//                    (position / candidate_block), in any order; -1, negative and past-the-row entries are
//                    masked (never read), duplicates are computed twice
//   candidate_block  8 or 16
//   logits           float32 / float16 / bfloat16 [B * next_n, C * candidate_block], inner stride 1, row
//                    stride >= C * candidate_block, 16-byte aligned
// Lengths are not clamped: a live position whose block-table slot lies past max_blocks, or whose block id
// lies outside [0, num_blocks), is NaN, as in paged_mqa_logits. Every output column is written.
// Launches without allocating, copying or synchronizing (capturable once warm), like paged_mqa_logits.
void sparse_paged_mqa_logits(const TensorView& q, const TensorView& kv_cache, const TensorView& weights,
                             const TensorView& context_lens, const TensorView& block_table, const TensorView& candidates,
                             int candidate_block, const TensorView& logits, Stream stream,
                             const SparsePagedMqaLogitsOptions& options = {});

// Loads (compiling on a cache miss) the kernel of `config` in the current context (warm the variant you
// will call with: automatic, the options' default, is its own entry); with config.arch set, compiles it
// for that target into the disk cache only (no GPU needed).
void warm_sparse_paged_mqa_logits(const SparsePagedMqaLogitsConfig& config);

}  // namespace flash_indexer
