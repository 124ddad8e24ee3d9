#pragma once
// Sparse paged MQA logits on Hopper (sm_90a; docs/design/two-level.md): the output of the portable
// kernel (sparse_paged_mqa_logits_portable.cuh, the same masks) with the full-context sm90 kernel's
// arithmetic (sm90_mqa_tile.cuh), so every live value is bitwise the sm90 paged_mqa_logits value of its
// position.
//
// A row's candidates have no keys in common with another row's, so each query row is its own wgmma
// tile of N = H columns. One CTA, one warpgroup, computes `tiles_per_cta` consecutive 64-column tiles of
// one row (grid: CTA ranges x rows). Its threads first resolve every candidate of its range to the
// cache block that holds it (block table) and its number of live positions; then each tile is gathered
// into a ring stage, kStages tiles ahead, completing on the stage's mbarrier. FP8: the 128 threads copy
// the candidates' key rows and scales with 16-byte cp.async into the 128B-swizzled layout a whole
// block's TMA writes (sparse_copy_tile_threads; one thread's TMA per candidate gathered 8-13 % slower at
// B 8-128, docs/benchmarks/decode.md). MXFP4: thread 0's bulk copies of the packed rows and their
// exponents into the block layout the full-context kernel's stage has. Candidates that are masked or
// whose block id is invalid are never read; their columns are written from the resolution alone. Several CTAs share an SM, so one CTA's epilogue overlaps another's copies and wgmma.
#include "coarse_histogram.cuh"
#include "grid_dependency.cuh"
#include "sparse_gather_sm90.cuh"

namespace flash_indexer {
namespace kernels {

template <int kHeads, int kHeadDim, int kBlock, bool kHistogram, LogitsOut kOut, bool kMxfp4 = false>
__device__ void sparse_paged_mqa_logits_sm90(const SparsePagedMqaLogitsSm90Params& params) {
  await_previous_kernel();  // before this kernel's first global memory access
  static_assert(kHeadDim == 128, "128-byte key rows: one 128B swizzle atom per 8 rows");
  static_assert(kSparseTile % kBlock == 0 && 64 % kBlock == 0, "whole candidates per tile, each inside one cache block");
  using Tile = Sm90MqaTile<1, kHeads, kHeadDim>;
  using Store = LogitsStore<kOut>;
  constexpr int kPer = kSparseTile / kBlock;  // candidates per tile
  constexpr int kStages = kSparseSm90Stages;
  constexpr int kStageBytes = sparse_sm90_stage_bytes(kMxfp4);
  constexpr SparseSm90Layout kLayout = sparse_sm90_layout(kHeads, kHeadDim, kBlock, kHistogram, kMxfp4);
  constexpr int kMaxCandidates = kSparseSm90MaxTiles * kPer;
  const SparsePagedMqaLogitsParams& sp = params.s;
  const PagedMqaLogitsParams& p = sp.p;

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (sm90::smem_address(smem_raw) & 1023u)) & 1023u);  // 128B swizzle: 1024-aligned
  unsigned char* q_s = smem + kLayout.q;
  unsigned char* k_s = smem + kLayout.k;
  float* scale_s = reinterpret_cast<float*>(smem + kLayout.scales);  // FP8: [stage][64]
  float* weight_s = reinterpret_cast<float*>(smem + kLayout.weights);
  int* hist_s = reinterpret_cast<int*>(smem + kLayout.histogram);
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + kLayout.barriers);
  int2* cand_s = reinterpret_cast<int2*>(smem + kLayout.candidates);  // the range's candidates (sparse_candidate)

  const int tid = threadIdx.x;
  const int r = blockIdx.y;
  const int total_tiles = (sp.num_candidates * kBlock + kSparseTile - 1) / kSparseTile;
  const int first_tile = blockIdx.x * params.tiles_per_cta;
  const int tiles = min(params.tiles_per_cta, total_tiles - first_tile);
  const long long columns = static_cast<long long>(sp.num_candidates) * kBlock;
  const long long len = sparse_row_length(sp, r);

  // Where each candidate of the range lies; the query tile and its weights.
  for (int i = tid; i < tiles * kPer; i += kSparseSm90Threads)
    cand_s[i] = sparse_candidate<kBlock>(sp, r, first_tile * kPer + i, len);
  sparse_load_query<kHeads, kHeadDim, kMxfp4>(p, r, q_s, weight_s, tid, kSparseSm90Threads);
  if constexpr (kHistogram)
    for (int i = tid; i < kCoarseBins; i += kSparseSm90Threads) hist_s[i] = 0;
  using Fill = SparseStageFill<kHeadDim, kBlock, kMxfp4>;
  static_assert(kSparseSm90Threads == 128, "one warpgroup fills a stage");
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) sm90::mbarrier_init(&full[s], Fill::kArrivals);
    sm90::fence_barrier_init();
  }
  sm90::fence_proxy_async();  // the query tile, read by the wgmma after the barrier
  __syncthreads();

  // Tile t of the range into its stage, kStages tiles ahead.
  auto issue = [&](int t) {
    const int stage = t % kStages;
    Fill::fill(p, cand_s + t * kPer, k_s + stage * kStageBytes, scale_s + stage * 64, &full[stage], tid);
  };
  if (Fill::fills(tid))
    for (int t = 0; t < min(tiles, kStages); ++t) issue(t);

  const int lane = tid % 32;
  const int quad = lane % 4;
  const int key0 = 16 * (tid / 32) + lane / 4;  // this thread's keys: key0 and key0 + 8
  const int owned_key = Tile::owned_key(quad, key0);
  typename Tile::Weights weights;
  Tile::load_weights(weights, weight_s, quad);
  typename Tile::Acc acc;
#pragma unroll
  for (int i = 0; i < Tile::kChunk / 2; ++i) acc[0][i] = 0.0f;
  const float masked = sp.masked_nan ? quiet_nan() : negative_infinity();

  for (int t = 0; t < tiles; ++t) {
    const int stage = t % kStages;
    sm90::mbarrier_wait(&full[stage], (t / kStages) & 1);
    if constexpr (Fill::kFenceAfterWait) sm90::fence_proxy_async();
    const float scale = sparse_tile_scores<kHeads, kHeadDim, kMxfp4>(acc, k_s + stage * kStageBytes, scale_s + stage * 64, q_s,
                                                                     key0, quad, owned_key);
    __syncthreads();  // every thread is done with the stage: refill it
    if (Fill::fills(tid) && t + kStages < tiles) issue(t + kStages);
    typename Tile::Owned sum;
    Tile::head_sums(acc, weights, quad, sum);
    if (Tile::owns(0, quad)) {
      const long long column = static_cast<long long>(first_tile + t) * kSparseTile + owned_key;
      if (column < columns) {
        const int2 c = cand_s[t * kPer + owned_key / kBlock];
        const long long index = static_cast<long long>(r) * p.logits_stride + column;
        if (owned_key % kBlock >= sparse_candidate_live(c)) {
          Store::store(p.logits, index, masked);
        } else if (c.x < 0) {
          Store::store(p.logits, index, quiet_nan());
        } else {
          const float stored = Store::store(p.logits, index, sum[0] * scale);
          if constexpr (kHistogram) count_stored(hist_s, stored);
        }
      }
    }
  }

  if constexpr (kHistogram) {
    __syncthreads();
    for (int i = tid; i < kCoarseBins; i += kSparseSm90Threads)
      if (hist_s[i] != 0) atomicAdd(p.histogram + static_cast<long long>(r) * kCoarseBins + i, hist_s[i]);
  }
}

}  // namespace kernels
}  // namespace flash_indexer
