#pragma once
// Kernel parameters of the paged MQA logits kernels. Shared verbatim by the host launcher and the
// device code (plain types only: this file is compiled by both the host compiler and NVRTC).
#include "paged_mqa_logits_sm90_form.cuh"
#include "tensor_map.cuh"

namespace flash_indexer {
namespace kernels {

struct PagedMqaLogitsParams {
  const unsigned char* q;         // FP8 [B, next_n, H, D], contiguous; MXFP4: packed [B, next_n, H, D / 2]
  const int* q_scales;            // MXFP4 only: [B, next_n, H], four UE8M0 exponents each
  const unsigned char* kv_cache;  // [num_blocks] x (block_size * D FP8 bytes, then block_size FP32 scales);
                                  // MXFP4: block_size * D / 2 packed bytes, then block_size int32 exponents
  const float* weights;           // [B * next_n, H], contiguous
  const int* context_lens;        // [B] or [B, next_n]
  const int* block_table;         // [B, max_blocks], row stride block_table_stride
  void* logits;                   // [B * next_n, width], row stride logits_stride
  int* histogram;                 // [B * next_n, 1024] coarse-bin counts to add to (histogram kernels only)
  long long kv_block_stride;      // bytes between consecutive blocks (multiple of 16)
  long long block_table_stride;   // elements
  long long logits_stride;        // elements
  int batch;
  int num_blocks;
  int max_blocks;
  int width;
  int lens_2d;      // 1: context_lens is [B, next_n]; 0: [B] with the MTP rule
  int fill_masked;  // 1: write -inf into columns s >= len(r)
  // Decode context parallel (dcp.hpp): with dcp_ranks > 1 the lengths are global and this cache is
  // rank dcp_rank's shard, so a row has dcp_local_length(its length) columns.
  int dcp_ranks;
  int dcp_rank;
  int dcp_interleave;
  // 1, or the kernel rows per request where an sm90 kernel of next_n <= kSm90MaxGroupRows runs groups of
  // a request's query rows as rows of its own (runtime/sm90_split.hpp, sm90_flattened; next_n 6 at H 64
  // as groups of 2, kernels::sm90_group_rows): kernel row r then belongs to request r / rows_per_request
  // (its block table row, its 1-D length), as that request's rows (r % rows_per_request) * next_n + j. q,
  // weights, 2-D lengths, logits and histogram are laid out by row either way.
  int rows_per_request;
};

// Launch geometry of the portable kernel, needed by both sides.
constexpr int kPortableThreads = 256;

// Shared memory of the portable kernel: keys as FP32 [block_size][head_dim + 1] (+1 float keeps reads
// across keys free of bank conflicts), one query row [heads][head_dim], its weights, the key scales and
// one partial sum per (head group, key).
constexpr int portable_smem_bytes(int heads, int head_dim, int block_size) {
  return (block_size * (head_dim + 1) + heads * head_dim + heads + block_size + (kPortableThreads / block_size) * block_size) * 4;
}

// ---- the sm_90a kernel ----------------------------------------------------------------------

// One CTA covers `blocks_per_split` KV blocks of one request (grid: splits x B): a producer warp
// streams them through a TMA ring, consumer warpgroups take the blocks in turn, three store warps
// write the logits (and count the histogram).
struct PagedMqaLogitsSm90Params {
  PagedMqaLogitsParams p;
  TensorMap kv_map;  // uint8 {head_dim, 64 tokens, num_blocks}, strides {head_dim, block stride} bytes
  TensorMap q_map;   // uint8 {head_dim, B * next_n * heads}
  int blocks_per_split;
  // Nonzero: the producer issues the query and the first stages before the CTA's barrier, in kernels
  // that have the code for it (runtime/sm90_split.hpp, sm90_fill_before_barrier, says where).
  int fill_before_barrier;
  // Kernels with a ranges form (Sm90PagedForm::has_ranges, paged_mqa_logits_sm90_ranges.cuh): nonzero
  // splits the B x width blocks evenly over the grid's CTAs (grid.y 1); zero keeps the splits x B grid.
  int ranges;
};

constexpr int round_up(int x, int to) { return (x + to - 1) / to * to; }

// The registers per thread that a launch of `threads` (one CTA per SM) holds: the 64K register file over
// the threads counted in whole warpgroups (288 count as 384), in steps of 8, at most 255; ptxas gives a
// kernel that moves registers with setmaxnreg exactly that. A handover whose warpgroups ask for more in
// total waits forever in `setmaxnreg.inc`, so every kernel that moves registers checks its split
// against this at compile time.
constexpr int sm90_launch_registers(int threads) {
  const int r = 65536 / round_up(threads, 128) / 8 * 8;
  return r < 255 ? r : 255;
}
constexpr bool sm90_handover_fits(int threads, int producer_registers, int consumer_warpgroups, int consumer_registers) {
  return 128 * producer_registers + 128 * consumer_warpgroups * consumer_registers <= threads * sm90_launch_registers(threads);
}

// Dynamic shared memory of the sm_90a kernel; TMA destinations 1024-byte aligned (128B swizzle).
struct Sm90Layout {
  int q, k, scales, weights, values, histogram, barriers, invalid, block_ids, bytes;
};

// The MXFP4 cache's block (D = 128): 64 tokens of 64 packed bytes, then their 64 int32 exponent words;
// the sm90 kernel copies it whole into a ring stage, from which the consumer that takes it converts its
// keys straight into the wgmma's register fragments (mxfp4_e4m3.cuh).
constexpr int kMxfp4BlockBytes = 64 * 64 + 64 * 4;

// The one-TMA stage (Sm90PagedForm::one_tma_per_block): a block's 64 keys and its 64 scales right behind
// them (the cache's block layout, contract §2.1), fetched by one 3-D TMA of 64 + 256 / D rows of D bytes,
// swizzled like the keys, into stages 1024-aligned for the swizzle.
constexpr int sm90_paged_stage_bytes(int head_dim) { return (64 * head_dim + 256 + 1023) / 1024 * 1024; }
// Where key `key`'s scale lies in such a stage: the swizzle XORs a row's 16-byte chunk index with the
// row's address bits 7 and up, which for the scales' rows (D = 64 or 128) moves the scales of keys 32..63
// by one chunk.
constexpr int sm90_paged_scale_offset(int head_dim, int key) { return 64 * head_dim + ((4 * key) ^ ((key >> 5) << 4)); }

// A CTA's KV blocks (its split of one request), at most; the host's split never exceeds it. The paged
// kernel stages the split's block ids in shared memory (Sm90Layout::block_ids). The host's split goes
// up to 64 where two CTAs share an SM and up to this where one holds it (runtime/sm90_split.hpp).
constexpr int kSm90MaxBlocksPerSplit = 256;
// `stages`: 0 for the paged kernel, whose form (Sm90PagedForm) decides its stages and score stages; the
// prefill kernel sets its own. `mxfp4`: the paged kernel on the MXFP4 cache (D = 128). `score_stages`:
// the consumers hand their scores to the store warps through shared memory (not in the prefill kernel,
// whose consumers store them).
constexpr Sm90Layout sm90_layout(int next_n, int heads, int head_dim, bool histogram, int stages = 0, bool mxfp4 = false,
                                 bool score_stages = true) {
  const Sm90PagedForm form = sm90_paged_form(next_n, heads, mxfp4);
  const bool one_tma = stages == 0 && form.one_tma_per_block;
  if (stages == 0) {  // the paged kernel
    stages = form.stages;
    score_stages = !form.direct_stores;
  }
  Sm90Layout l{};
  l.q = 0;
  l.k = round_up(next_n * heads * head_dim, 1024);
  // MXFP4 and the one-TMA paged FP8 stages hold their scales: no separate ones.
  const int stage_bytes = mxfp4 ? kMxfp4BlockBytes : one_tma ? sm90_paged_stage_bytes(head_dim) : 64 * head_dim;
  l.scales = l.k + stages * stage_bytes;
  l.weights = l.scales + (mxfp4 || one_tma ? 0 : stages * 64 * 4);
  l.values = l.weights + next_n * heads * 4;
  l.histogram = l.values + (score_stages ? stages * next_n * 64 * 4 : 0);
  l.barriers = round_up(l.histogram + (histogram ? next_n * 1024 * 4 : 0), 8);
  l.invalid = l.barriers + (4 * stages + 1) * 8;
  l.block_ids = l.invalid + stages * 4;
  l.bytes = l.block_ids + kSm90MaxBlocksPerSplit * 4 + 1024;  // + slack to align the base to 1024
  return l;
}

// The producer warpgroup: warp 0 issues the loads, the other three store the logits and count the
// histogram from the consumers' scores, each warp its own blocks (several blocks in flight).
constexpr int kSm90StoreWarps = 3;

}  // namespace kernels
}  // namespace flash_indexer
