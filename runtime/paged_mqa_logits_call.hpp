#pragma once
// A paged_mqa_logits call in three steps, so that a caller running several ops (DecodePlan) can check
// and prepare all of them before it enqueues any: a rejected call changes no byte anywhere.
//   check_paged_mqa_logits()    every argument check, no driver call; returns the checked call
//   prepare_paged_mqa_logits()  loads the kernel, checks the stream, builds the launch; enqueues nothing
//   enqueue()                   the launch alone
#include <string_view>

#include "../kernels/paged_mqa_logits_params.cuh"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "kernel_registry.hpp"

namespace flash_indexer {

struct PagedMqaLogitsCall {
  PagedMqaLogitsConfig config;  // arch: filled in for the current device by prepare
  kernels::PagedMqaLogitsParams params{};
  unsigned width_blocks = 0;  // 64-key blocks of the logits width
  unsigned batch = 0;
  bool pdl = false;  // options.pdl
  bool empty() const { return width_blocks == 0 || batch == 0; }
};

// `op` prefixes every error ("paged_mqa_logits", or the caller's name for a composite op).
PagedMqaLogitsCall check_paged_mqa_logits(std::string_view op, const TensorView& q, const TensorView& kv_cache,
                                          const TensorView& weights, const TensorView& context_lens,
                                          const TensorView& block_table, const TensorView& logits,
                                          const PagedMqaLogitsOptions& options);

struct PagedMqaLogitsLaunch {
  const LoadedKernel* kernel = nullptr;
  bool sm90 = false;
  kernels::PagedMqaLogitsSm90Params sm90_params{};  // p is the portable kernel's argument too
  unsigned grid_x = 0, grid_y = 0;
  bool pdl = false;  // a programmatic dependent launch (launch_kernel)
};

// Not for an empty call. `allow_flattened`: small FP8 calls of next_n >= 2 may run as B * next_n rows of
// the next_n = 1 kernel (sm90_flattened in sm90_split.hpp); the checks turn it off to test the next_n
// kernels themselves on small shapes. `allow_ranges`: a grid of several waves may take the ranges form
// (the decode step, built on the split form, turns it off).
PagedMqaLogitsLaunch prepare_paged_mqa_logits(std::string_view op, const PagedMqaLogitsCall& call, CUstream stream,
                                              bool allow_flattened = true, bool allow_ranges = true);
void enqueue(const PagedMqaLogitsLaunch& launch, CUstream stream);

// The sm90 kernels' TMA map of the FP8 cache's key rows: {head_dim bytes, `rows` rows, block} (the rows
// past 64 are the block's scales), fetched `box_rows` rows at a time, swizzled as wide as a row (wgmma's
// K-major layout). `context` names the call in an error (a literal: the launch path does not allocate).
void encode_kv_cache_map(kernels::TensorMap& map, const kernels::PagedMqaLogitsParams& p, int head_dim, int rows, int box_rows,
                         std::string_view context);

// The sm90 grid for `blocks_per_split` (1..kSm90MaxBlocksPerSplit) KV blocks per CTA: what prepare sets
// from runtime/sm90_split.hpp, and what the checks force to test other splits.
void set_blocks_per_split(PagedMqaLogitsLaunch& launch, const PagedMqaLogitsCall& call, int blocks_per_split);
// Whether the launch's kernel takes ranges of blocks across requests (the four-consumer FP8 kernels,
// kernels/paged_mqa_logits_sm90_ranges.cuh), and the grid of `ctas` CTAs that split the call's B x width
// blocks evenly: what prepare sets where the splits need more than one wave, and what the checks force.
bool takes_ranges(const PagedMqaLogitsLaunch& launch, const PagedMqaLogitsCall& call);
void set_ranges(PagedMqaLogitsLaunch& launch, unsigned ctas);

}  // namespace flash_indexer
