#pragma once
// Sparse paged MQA logits on Hopper (sm_90a; docs/design/two-level.md): the output of the portable
// kernel (sparse_paged_mqa_logits_portable.cuh, the same masks) with the full-context sm90 kernel's
// arithmetic (sm90_mqa_tile.cuh), so every live value is bitwise the sm90 paged_mqa_logits value of its
// position.
//
// A row's candidates have no keys in common with another row's, so each query row is its own wgmma
// tile of N = H columns. One CTA, one warpgroup, computes `tiles_per_cta` consecutive 64-column tiles of
// one row (grid: CTA ranges x rows). Its threads first resolve every candidate of its range to the
// cache block that holds it (block table) and its number of live positions; then thread 0 gathers each
// tile into a ring stage, one copy per candidate (FP8: a TMA of candidate_block key rows, 128B-swizzled
// like a whole block's, since a block of 8 or 16 rows starts on a swizzle atom, plus a bulk copy of
// their scales; MXFP4: bulk copies of the packed rows and their exponents into the block layout the
// full-context kernel's stage has), completing on the stage's mbarrier, kStages tiles ahead. Candidates
// that are masked or whose block id is invalid are never read; their columns are written from the
// resolution alone. Several CTAs share an SM, so one CTA's epilogue overlaps another's copies and wgmma.
#include "coarse_histogram.cuh"
#include "grid_dependency.cuh"
#include "mxfp4_e4m3.cuh"
#include "numeric.cuh"
#include "sm90_mqa_tile.cuh"
#include "sparse_paged_mqa_logits_params.cuh"

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
  int* block_s = reinterpret_cast<int*>(smem + kLayout.candidates);  // cache block id; -1 masked, -2 invalid id
  int* token_s = block_s + kMaxCandidates;                           // first token within that block
  int* live_s = token_s + kMaxCandidates;                            // live positions (below the row's length)

  const int tid = threadIdx.x;
  const int r = blockIdx.y;
  const int b = r / sp.next_n, j = r % sp.next_n;
  const int total_tiles = (sp.num_candidates * kBlock + kSparseTile - 1) / kSparseTile;
  const int first_tile = blockIdx.x * params.tiles_per_cta;
  const int tiles = min(params.tiles_per_cta, total_tiles - first_tile);
  const long long columns = static_cast<long long>(sp.num_candidates) * kBlock;
  long long len = p.lens_2d ? p.context_lens[r] : static_cast<long long>(p.context_lens[b]) - sp.next_n + j + 1;
  if (len < 0) len = 0;
  const long long live_blocks = (len + kBlock - 1) / kBlock;

  // Where each candidate of the range lies.
  for (int i = tid; i < tiles * kPer; i += kSparseSm90Threads) {
    const int c = first_tile * kPer + i;
    int id = -1, token = 0, live = 0;
    if (c < sp.num_candidates) {
      const long long candidate = sp.candidates[static_cast<long long>(r) * sp.candidates_stride + c];
      if (candidate >= 0 && candidate < live_blocks) {
        const long long pos = candidate * kBlock;
        const long long slot = pos / 64;
        const int block = slot < p.max_blocks ? p.block_table[static_cast<long long>(b) * p.block_table_stride + slot] : -1;
        id = block >= 0 && block < p.num_blocks ? block : -2;
        token = static_cast<int>(pos % 64);
        live = static_cast<int>(min(static_cast<long long>(kBlock), len - pos));
      }
    }
    block_s[i] = id;
    token_s[i] = token;
    live_s[i] = live;
  }
  // The query row as E4M3 in the 128B-swizzled tile the wgmma reads (the layout of the full-context
  // kernel's TMA), and its weights (MXFP4: with each head's factor 2^(M - 133), as there).
  if constexpr (kMxfp4) {
    for (int h = tid; h < kHeads; h += kSparseSm90Threads) {
      const long long q_row = static_cast<long long>(r) * kHeads + h;
      const unsigned int exponents = static_cast<unsigned int>(p.q_scales[q_row]);
      mxfp4_query_row(p.q + q_row * (kHeadDim / 2), exponents, h, q_s);
      const Mxfp4Exponents e = mxfp4_exponents(exponents);
      float w = p.weights[q_row];
      if (!e.nan) w *= exact_power_of_two(e.largest - 133);
      weight_s[h] = w;
    }
  } else {
    const unsigned char* q = p.q + static_cast<long long>(r) * (kHeads * kHeadDim);
    for (int c = tid; c < kHeads * kHeadDim / 16; c += kSparseSm90Threads)
      *reinterpret_cast<uint4*>(q_s + swizzled_128b(c / 8, c % 8)) = reinterpret_cast<const uint4*>(q)[c];
    for (int h = tid; h < kHeads; h += kSparseSm90Threads) weight_s[h] = p.weights[static_cast<long long>(r) * kHeads + h];
  }
  if constexpr (kHistogram)
    for (int i = tid; i < kCoarseBins; i += kSparseSm90Threads) hist_s[i] = 0;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) sm90::mbarrier_init(&full[s], 1);
    sm90::fence_barrier_init();
  }
  sm90::fence_proxy_async();  // the query tile, read by the wgmma after the barrier
  __syncthreads();

  // Tile t of the range into its stage: one copy per candidate that has an id; the stage's barrier
  // completes when they land (at once where none has).
  auto issue = [&](int t) {
    const int stage = t % kStages;
    unsigned char* dst = k_s + stage * kStageBytes;
    unsigned int bytes = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (block_s[t * kPer + i] >= 0) bytes += kBlock * (kMxfp4 ? kHeadDim / 2 + 4 : kHeadDim + 4);
    sm90::mbarrier_arrive_expect_tx(&full[stage], bytes);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int id = block_s[t * kPer + i];
      if (id < 0) continue;
      const int token = token_s[t * kPer + i];
      const unsigned char* block = p.kv_cache + static_cast<long long>(id) * p.kv_block_stride;
      if constexpr (kMxfp4) {
        sm90::bulk_load(dst + i * kBlock * 64, block + token * 64, kBlock * 64, &full[stage]);
        sm90::bulk_load(dst + 64 * 64 + i * kBlock * 4, block + 64 * 64 + token * 4, kBlock * 4, &full[stage]);
      } else {
        sm90::tma_load_3d(dst + i * kBlock * kHeadDim, &params.kv_map, &full[stage], 0, token, id);
        sm90::bulk_load(scale_s + stage * 64 + i * kBlock, block + 64 * kHeadDim + token * 4, kBlock * 4, &full[stage]);
      }
    }
  };
  if (tid == 0)
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
    float scale;  // of owned_key
    if constexpr (kMxfp4) {
      typename Tile::KeyFragments a;
      float key_scales[2];
      mxfp4_key_fragments(k_s + stage * kStageBytes, key0, quad, a, key_scales);
      scale = (quad & 1) != 0 ? key_scales[1] : key_scales[0];
      Tile::scores(acc, a, q_s);
    } else {
      Tile::scores(acc, k_s + stage * kStageBytes, q_s);
      scale = scale_s[stage * 64 + owned_key];
    }
    __syncthreads();  // every thread is done with the stage: refill it
    if (tid == 0 && t + kStages < tiles) issue(t + kStages);
    typename Tile::Owned sum;
    Tile::head_sums(acc, weights, quad, sum);
    if (Tile::owns(0, quad)) {
      const long long column = static_cast<long long>(first_tile + t) * kSparseTile + owned_key;
      if (column < columns) {
        const int i = t * kPer + owned_key / kBlock;
        const long long index = static_cast<long long>(r) * p.logits_stride + column;
        if (owned_key % kBlock >= live_s[i]) {
          Store::store(p.logits, index, masked);
        } else if (block_s[i] < 0) {
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
