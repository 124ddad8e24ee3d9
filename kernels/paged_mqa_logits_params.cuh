#pragma once
// Kernel parameters of the paged MQA logits kernels. Shared verbatim by the host launcher and the
// device code (plain types only: this file is compiled by both the host compiler and NVRTC).
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
  // 1, or the call's next_n where the sm90 next_n = 1 kernel runs the call's B * next_n query rows as
  // rows of their own (runtime/sm90_split.hpp, sm90_flattened): row r then belongs to request
  // r / rows_per_request (its block table row, its 1-D length) as query row r % rows_per_request. q,
  // weights, 2-D lengths, logits and histogram are laid out by row either way.
  int rows_per_request;
};

// Launch geometry of the portable kernel, needed by both sides.
constexpr int kPortableThreads = 256;

// Shared memory of the portable kernel: keys as FP32 [block_size][head_dim + 1] (+1 float keeps reads
// across keys free of bank conflicts), one query row [heads][head_dim], its weights, the key scales and
// one partial sum per (head group, key).
constexpr int portable_smem_bytes(int heads, int head_dim, int block_size) {
  return (block_size * (head_dim + 1) + heads * head_dim + heads + block_size +
          (kPortableThreads / block_size) * block_size) * 4;
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
  // The four-consumer FP8 kernels (paged_mqa_logits_sm90_ranges.cuh): nonzero splits the B x width
  // blocks evenly over the grid's CTAs (grid.y 1); zero keeps the splits x B grid.
  int ranges;
};

constexpr int kSm90MaxNextN = 4;  // N = next_n * heads <= 256 (one wgmma tile)

// Consumer warpgroups per CTA, by one consumer's wgmma N (next_n * heads, or sm90_consumer_n where two
// consumers share a block). Up to N = 64 (<= 66 registers) two
// CTAs fit an SM, so two consumers each; up to 128 one CTA with four (640 threads: the 96 registers
// each that this leaves hold a consumer's 64 accumulators without spilling), so that a consumer's
// epilogue overlaps three others' wgmma; beyond, the 128 accumulator registers per thread leave room
// for two. A stage always goes to the same consumer (stage % consumers; or pair of them) and the same
// store warp (stage % 3), so no waiter ever waits on a barrier a phase ahead: 6 stages, 12 with four
// consumers.
constexpr int sm90_consumers(int n) { return n <= 64 ? 2 : n <= 128 ? 4 : 2; }
// The query rows one consumer computes of each block it takes: all next_n, except at next_n 4 H 64 FP8
// (N = 256), where two consumers share every block, two rows (N = 128) each, so that the CTA is the
// four-consumer kernel of N = 128 (next_n 2 H 64's form, weights in registers) twice over a block. Two
// consumers of N = 256 hid 31 % of their CUDA-core epilogue under the tensor work, four of N = 128 at
// next_n 2 H 64 67 % (device runs 215-216); so next_n 4 H 64 took 0.91 of the two-consumer time without
// the histogram and 0.96 with it (run 217; the consumers now count too). Not at next_n 3 H 64 (three rows
// do not halve) nor for MXFP4 (its consumers hold the keys' fragments). Every N-keyed choice of the paged
// kernel below (consumers, stages, threads, who stores and counts, one TMA per block) takes a consumer's
// N, sm90_consumer_n.
constexpr int sm90_consumer_rows(int next_n, int heads, bool mxfp4 = false) {
  return !mxfp4 && next_n == 4 && heads == 64 ? 2 : next_n;
}
constexpr int sm90_consumer_n(int next_n, int heads, bool mxfp4 = false) { return sm90_consumer_rows(next_n, heads, mxfp4) * heads; }
constexpr int sm90_stages(int n) { return sm90_consumers(n) == 4 ? 12 : 6; }
constexpr int sm90_threads(int n) { return 128 * (sm90_consumers(n) + 1); }  // + the producer warpgroup
// The consumers hold their columns' weights (N / 4 floats) in registers (Sm90MqaTile::load_weights)
// up to N = 128 and next_n = 3 (ptxas, sm_90a: next_n 4 spilled 72 bytes at N = 128, took 87 registers
// at N = 64). Two consumers (N <= 64, two CTAs per SM) stay within 80 registers (48..80); four (N 72..128)
// take registers from the producer warpgroup (setmaxnreg, as the prefill kernel: 128 * 32 + 512 * 112 =
// 640 * 96, exactly what the launch holds; a handover asking for more than the producer frees deadlocks).
// The MXFP4 path (mxfp4_e4m3.cuh) keeps them in shared memory: its consumers need the registers for
// their keys' fragments, and move registers wherever they are four.
constexpr bool sm90_register_weights(int next_n, int heads, bool mxfp4 = false) {
  return !mxfp4 && next_n <= 3 && next_n * heads <= 128;
}
// Who counts the fused histogram: with four consumers (N 72..128, one CTA per SM) the three store
// warps could not keep up with a bin and an atomic per score (device run 127: consumers waiting for
// their score stages; the histogram cost +11 % at next_n 2 H 64, +24-36 % at N = 96-128), so each
// consumer lane counts the values it hands off (one or two per block after the quad reduction) and the
// store warps only store: +6-10 % (run 128). Elsewhere the store warps count: with two consumers of
// N = 192-256 the consumers bound the kernel and counting there was 5-7 % slower (run 128), with two
// CTAs per SM (N <= 64) six store warps share the SM. `n` is one consumer's N (sm90_consumer_n).
constexpr bool sm90_consumers_count(int n) { return sm90_consumers(n) == 4; }
// Where the consumers also store their values themselves (after the quad's reduce-scatter each lane
// owns one or two; DeepGEMM's consumers store too) instead of handing them to the store warps through
// shared-memory score stages: the four-consumer FP8 kernels, which count the histogram already. The
// MXFP4 ones keep the hand-off (n4 h32 with the histogram spilled).
constexpr bool sm90_direct_stores(int n, bool mxfp4) { return sm90_consumers_count(n) && !mxfp4; }
constexpr bool sm90_moves_registers(int next_n, int heads, bool mxfp4 = false) {
  const int rows = sm90_consumer_rows(next_n, heads, mxfp4);
  return sm90_consumers(rows * heads) == 4 && (mxfp4 || sm90_register_weights(rows, heads));
}
// The kernels with a ranges form (paged_mqa_logits_sm90_ranges.cuh): the four-consumer FP8 ones whose
// consumers take registers from the producer warpgroup (n2 h64, n3 h32). At next_n 4 (N = 128, the
// weights in shared memory, 96 registers each) the segments' state spilled 8 bytes.
constexpr bool sm90_takes_ranges(int next_n, int heads, bool mxfp4) {
  return sm90_consumer_rows(next_n, heads, mxfp4) == next_n && sm90_direct_stores(next_n * heads, mxfp4) &&
         sm90_moves_registers(next_n, heads, mxfp4);
}
constexpr int round_up(int x, int to) { return (x + to - 1) / to * to; }

// The registers per thread that a launch of `threads` (one CTA per SM) holds: the 64K register file over
// the threads counted in whole warpgroups (288 count as 384), in steps of 8, at most 255; ptxas gives a
// kernel that moves registers with setmaxnreg exactly that. A handover whose warpgroups ask for more in
// total waits forever in `setmaxnreg.inc` (device run 159), so every kernel that moves registers checks
// its split against this at compile time.
constexpr int sm90_launch_registers(int threads) {
  const int r = 65536 / round_up(threads, 128) / 8 * 8;
  return r < 255 ? r : 255;
}
constexpr bool sm90_handover_fits(int threads, int producer_registers, int consumer_warpgroups, int consumer_registers) {
  return 128 * producer_registers + 128 * consumer_warpgroups * consumer_registers <= threads * sm90_launch_registers(threads);
}

// The MXFP4 form's wgmma N per round (Sm90MqaTile::head_sums_in_rounds): all N columns at once, except
// at next_n 4, where the accumulators of all four query rows and the keys' 16 fragment registers did not
// fit (ptxas spilled 16 bytes at N = 128, four consumers, and 24 at N = 256, two): there two rows a round.
constexpr int sm90_mxfp4_round(int next_n, int heads) { return next_n == 4 ? 2 * heads : next_n * heads; }
// Four consumers: 128 * 32 + 512 * 112 = 640 * 96, exactly what the launch holds. MXFP4 from next_n 3
// on: 40 / 104 (128 * 40 + 512 * 104 = 58368 <= 640 * 96), its store warps spilled 12-28 bytes at 32;
// at next_n 2 (H 64) its consumers spill 16 bytes at 104.
constexpr int sm90_producer_registers(int next_n, bool mxfp4) { return mxfp4 && next_n > 2 ? 40 : 32; }
constexpr int sm90_consumer_registers(int next_n, bool mxfp4) { return mxfp4 && next_n > 2 ? 104 : 112; }

// Dynamic shared memory of the sm_90a kernel; TMA destinations 1024-byte aligned (128B swizzle).
struct Sm90Layout {
  int q, k, scales, weights, values, histogram, barriers, invalid, block_ids, bytes;
};

// The MXFP4 cache's block (D = 128): 64 tokens of 64 packed bytes, then their 64 int32 exponent words;
// the sm90 kernel copies it whole into a ring stage, from which the consumer that takes it converts its
// keys straight into the wgmma's register fragments (mxfp4_e4m3.cuh).
constexpr int kMxfp4BlockBytes = 64 * 64 + 64 * 4;

// The four-consumer paged FP8 kernels (N 96 and 128: n3 h32; n2 h64, n4 h32) fetch a block's 64 keys
// and its 64 scales right behind them (the cache's block layout, CONTRACT 2.1) by one 3-D TMA of
// 64 + 256 / D rows of D bytes, swizzled like the keys, into stages 1024-aligned for the swizzle; the
// others by a TMA for the keys and a bulk copy for the scales. Runs 196-197, one TMA against two copies:
// 4-8 % faster at n4 h32 from B 64 x 64K on (and the ranges form's n2 h64 gain), but the two-consumer
// n4 h64 kernel 2-6 % slower up to B 32 x 32K and next_n 1 no faster.
constexpr bool sm90_one_tma_per_block(int n, bool mxfp4) { return !mxfp4 && sm90_consumers(n) == 4; }
constexpr int sm90_paged_stage_bytes(int head_dim) { return (64 * head_dim + 256 + 1023) / 1024 * 1024; }
// Where key `key`'s scale lies in such a stage: the swizzle XORs a row's 16-byte chunk index with the
// row's address bits 7 and up, which for the scales' rows (D = 64 or 128) moves the scales of keys 32..63
// by one chunk.
constexpr int sm90_paged_scale_offset(int head_dim, int key) { return 64 * head_dim + ((4 * key) ^ ((key >> 5) << 4)); }

// A CTA's KV blocks (its split of one request), at most; the host's split never exceeds it. The paged
// kernel stages the split's block ids in shared memory (Sm90Layout::block_ids). The host's split goes
// up to 64 where two CTAs share an SM and up to this where one holds it (runtime/sm90_split.hpp).
constexpr int kSm90MaxBlocksPerSplit = 256;
// `stages`: 0 for sm90_stages (the paged kernel); the prefill kernel sets its own. `mxfp4`: the paged
// kernel on the MXFP4 cache (D = 128). `score_stages`: the consumers hand their scores to the store
// warps through shared memory (the paged kernel's choice: sm90_direct_stores; not in the prefill kernel,
// whose consumers store them).
constexpr Sm90Layout sm90_layout(int next_n, int heads, int head_dim, bool histogram, int stages = 0, bool mxfp4 = false,
                                 bool score_stages = true) {
  const int consumer_n = sm90_consumer_n(next_n, heads, mxfp4);
  const bool one_tma = stages == 0 && sm90_one_tma_per_block(consumer_n, mxfp4);
  if (stages == 0) {  // the paged kernel
    stages = sm90_stages(consumer_n);
    score_stages = !sm90_direct_stores(consumer_n, mxfp4);
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
