#pragma once
// Paged MQA logits on Hopper (sm_90a): TMA + FP8 wgmma, warp-specialized.
//
// One CTA covers `blocks_per_split` consecutive KV blocks of one request, for all of its next_n query
// rows, so each block is read once. The last warpgroup is the producer: its first warp stages the
// split's block ids in shared memory (one coalesced load), then one thread loads the request's Q tile
// once and streams the blocks through a ring of shared-memory stages (a 3-D TMA of the 64 x D
// FP8 keys, 128B/64B-swizzled for wgmma, plus a bulk copy of the 64 FP32 scales), each completing on a
// "full" mbarrier; where the host asks (runtime/sm90_split.hpp) it fills the first stages before the
// CTA's barrier. The consumer warpgroups (2 or 4) take the blocks in turn, each computing the
// 64 x next_n scores of a block (sm90_mqa_tile.cuh):
//
//   logit[j, key]  = scale[key] * sum_h w[j, h] * max(S[key, j*H + h], 0),  S = K * Q^T by wgmma
//
// in a fixed order, so results are bitwise deterministic. The consumer releases the key stage (the
// "empty" mbarrier) as soon as its wgmma has read it, and hands the 64 x next_n scores of the block to
// a store warp of the producer warpgroup through a score stage (mbarriers "scores full" / "scores
// free"). The store warps round and write the logits with coalesced stores and apply the length mask;
// where four consumers share the CTA (FP8, Sm90PagedForm::direct_stores) the consumers store their values
// themselves with the same mask, and the store warps idle.
// With kHistogram the coarse bins of the stored values are counted in a shared-memory histogram per
// row, added to the global one at the end: by the consumers (a few values per lane) where four of
// them share the CTA, by the store warps elsewhere (Sm90PagedForm::consumers_count).
// Every choice by configuration comes from one table, Sm90PagedForm (paged_mqa_logits_sm90_form.cuh).
//
// A block-table slot past max_blocks, or an id outside [0, num_blocks), is never loaded: its live
// logits are NaN, exactly as in the portable kernel.
#include "coarse_histogram.cuh"
#include "grid_dependency.cuh"
#include "mxfp4_e4m3.cuh"
#include "numeric.cuh"
#include "paged_mqa_logits_params.cuh"
#include "paged_mqa_logits_sm90_form.cuh"
#include "paged_mqa_logits_rows.cuh"
#include "sm90_mqa_tile.cuh"

namespace flash_indexer {
namespace kernels {

// lens[j] for a j known only at run time, without a dynamically indexed (local memory) array.
template <int kNextN>
__device__ __forceinline__ int length_of_row(const int (&lens)[kNextN], int j) {
  int len = lens[0];
#pragma unroll
  for (int jj = 1; jj < kNextN; ++jj)
    if (jj == j) len = lens[jj];
  return len;
}

// A block's head sums from the weights in registers or in shared memory (Sm90MqaTile::weight_of), or
// zeros for an invalid block (its values become NaN with the scale).
template <class Tile, class WeightSource>
__device__ __forceinline__ void block_head_sums(bool valid, const typename Tile::Acc& acc, const WeightSource& weights, int quad,
                                                typename Tile::Owned& sum) {
  if (valid) {
    Tile::head_sums(acc, weights, quad, sum);
  } else {
#pragma unroll
    for (int n = 0; n < Tile::kOwned; ++n) sum[n] = 0.0f;
  }
}

// One value of key column s (below the width) of a row `len` long into the logits at `index`: stored and
// counted into the row's histogram where s is live, -inf past the length where asked.
template <class Store, bool kHistogram>
__device__ __forceinline__ void store_value(const PagedMqaLogitsParams& p, long long index, int s, int len, float value,
                                            int* row_hist) {
  if (s >= len) {
    if (p.fill_masked) Store::store(p.logits, index, negative_infinity());
    return;
  }
  const float stored = Store::store(p.logits, index, value);
  if constexpr (kHistogram) count_stored(row_hist, stored);
}

// A direct-store consumer's scaled values of one block (key column s of the rows row0 + j) into the
// logits (store_value), below the width.
template <class Tile, class Store, int kNextN, bool kHistogram>
__device__ __forceinline__ void store_owned_values(const PagedMqaLogitsParams& p, const typename Tile::Owned& sum, int quad,
                                                   int s, long long row0, const int (&lens)[kNextN], int* hist) {
#pragma unroll
  for (int n = 0; n < Tile::kOwned; ++n) {
    const int j = Tile::owned_row(n, quad);
    if (!Tile::owns(n, quad) || s >= p.width) continue;
    store_value<Store, kHistogram>(p, (row0 + j) * p.logits_stride + s, s, length_of_row(lens, j), sum[n],
                                   hist + j * kCoarseBins);
  }
}

// What runs after a CTA's logits: nothing, or the decode step's selection (decode_step.cuh), called by
// every thread as tail(grid row, KV blocks covered, dynamic shared memory).
struct NoLogitsTail {
  static constexpr bool kActive = false;
  __device__ __forceinline__ void operator()(int, int, unsigned char*) const {}
};

// kMxfp4: the MXFP4 cache and query (contract §2.2, D = 128), converted to E4M3 (mxfp4_e4m3.cuh): the
// query once per CTA into shared memory with its heads' factors folded into their weights, each block's
// keys by the consumer that takes it straight into the wgmma's A fragments (registers), after which the
// math is the FP8 path's.
template <int kNextN, int kHeads, int kHeadDim, bool kHistogram, LogitsOut kOut, bool kMxfp4 = false, class Tail = NoLogitsTail>
__device__ void paged_mqa_logits_sm90(const PagedMqaLogitsSm90Params& params, const Tail& tail = Tail{}) {
  await_previous_kernel();  // before this kernel's first global memory access
  using Tile = Sm90MqaTile<kNextN, kHeads, kHeadDim>;
  constexpr int kN = Tile::kN;
  static_assert(sm90_n_wide(kNextN, kHeads), "all next_n rows in one wgmma tile");
  constexpr int kKeyBytes = Tile::kKeyBytes;
  constexpr Sm90PagedForm kForm = sm90_paged_form(kNextN, kHeads, kMxfp4);
  // A consumer's rows of each block it takes: all of them, or half where two consumers share every
  // block. kTakers consumers take distinct blocks.
  constexpr int kConsumerRows = kForm.consumer_rows;
  using ConsumerTile = Sm90MqaTile<kConsumerRows, kHeads, kHeadDim>;
  constexpr int kCN = ConsumerTile::kN;
  static_assert(kCN == kForm.consumer_n, "one consumer's N");
  constexpr int kRowGroups = kForm.consumers_per_block;
  constexpr bool kOneTma = kForm.one_tma_per_block;  // FP8: the keys and scales in one stage
  constexpr int kStageBytes = kOneTma ? sm90_paged_stage_bytes(kHeadDim) : kKeyBytes;
  constexpr int kSm90Consumers = kForm.consumers;
  constexpr int kTakers = kForm.takers;
  constexpr int kSm90Stages = kForm.stages;
  constexpr int kSm90Threads = kForm.threads;
  constexpr bool kConsumersCount = kForm.consumers_count;
  constexpr bool kDirectStores = kForm.direct_stores;
  static_assert(kNextN % kConsumerRows == 0 && kSm90Consumers % kRowGroups == 0 && (kRowGroups == 1 || kDirectStores),
                "whole row groups per block, each storing its own rows");
  constexpr Sm90Layout kLayout = sm90_layout(kNextN, kHeads, kHeadDim, kHistogram, 0, kMxfp4);
  static_assert(!kMxfp4 || kHeadDim == 128, "the MXFP4 path is built for D = 128");
  constexpr int kMxfp4Round = kForm.mxfp4_round;
  static_assert(!kForm.moves_registers ||
                    sm90_handover_fits(kSm90Threads, kForm.producer_registers, kSm90Consumers, kForm.consumer_registers),
                "the setmaxnreg handover fits the launch's registers");
  using Store = LogitsStore<kOut>;
  const PagedMqaLogitsParams& p = params.p;

  extern __shared__ unsigned char smem_raw[];
  const Sm90MqaSmem<kSm90Stages> sm(smem_raw, kLayout);

  const int tid = threadIdx.x;
  const int b = blockIdx.y;
  const int first = blockIdx.x * params.blocks_per_split;
  const int warpgroup = tid / 128;
  const bool producer_warp = tid / 32 == kSm90Consumers * 4;
  const bool producer_thread = tid == kSm90Consumers * 128;

  // Requested before the lengths arrive, so that the latencies of the first global loads overlap
  // instead of adding up ahead of the first TMA (a short split's time is mostly that chain): the
  // split's block ids, one coalesced load by the producer warp (ids past the live blocks are read but
  // never used; read one by one ahead of each TMA, a load's latency per block would bound the stream),
  // this thread's head weight, and the key tensor map (Sm90PagedForm::early_loads). Not where the
  // consumers take registers from the producer warpgroup: their registers are at the limit, and with
  // these loads first (or the map prefetched before the barrier, or the stages filled early, below)
  // ptxas spilled the block count at next_n 3 H 32 and next_n 2 H 64 measured slower in long grids
  // (docs/benchmarks/logits.md); there they come after the lengths.
  constexpr bool kEarly = kForm.early_loads;
  constexpr int kIdsPerLane = kSm90MaxBlocksPerSplit / 32;
  static_assert(kSm90MaxBlocksPerSplit % 32 == 0, "whole block ids per lane");
  static_assert(kN <= kSm90Threads, "one weight per thread");
  int ids[kIdsPerLane];
  float weight = 0.0f;
  // This CTA's block table row. Computed once where the rows may be groups of a request's (a division);
  // elsewhere it is the request b, in the expression the wider kernels were tuned with.
  constexpr bool kGroups = kNextN <= kSm90MaxGroupRows;
  const long long table_row_start = kGroups ? table_row<kNextN>(p, b) * p.block_table_stride : 0;
  auto load_ids_and_weight = [&](int blocks) {
    if (producer_warp) {
#pragma unroll
      for (int h = 0; h < kIdsPerLane; ++h) {
        const int i = tid % 32 + 32 * h;
        ids[h] = i < blocks && first + i < p.max_blocks
                     ? p.block_table[(kGroups ? table_row_start : static_cast<long long>(b) * p.block_table_stride) + first + i]
                     : -1;
      }
    }
    if (tid < kN) weight = p.weights[static_cast<long long>(b) * kN + tid];
    if (kEarly && !kMxfp4 && producer_thread) sm90::prefetch_tensor_map(&params.kv_map);
  };
  if constexpr (kEarly) load_ids_and_weight(params.blocks_per_split);

  int lens[kNextN];
  int max_len = 0;
#pragma unroll
  for (int j = 0; j < kNextN; ++j) {
    lens[j] = row_length<kNextN>(p, b, j);
    max_len = max(max_len, lens[j]);
  }
  const int live_blocks = (max_len + 63) / 64;
  const int count = max(0, min(first + params.blocks_per_split, live_blocks) - first);

  // Columns of this split past every row's live blocks: -inf when asked, nothing else to do there.
  if (p.fill_masked) {
    const int begin = max(first, live_blocks) * 64;
    const int end = min((first + params.blocks_per_split) * 64, p.width);
    for (int i = tid; i < kNextN * max(end - begin, 0); i += kSm90Threads) {
      const long long row = static_cast<long long>(b) * kNextN + i / (end - begin);
      Store::store(p.logits, row * p.logits_stride + begin + i % (end - begin), negative_infinity());
    }
  }
  // The KV blocks of row b this CTA covers, for the tail (those past the live ones included).
  const int covered = min(params.blocks_per_split, (p.width + 63) / 64 - first);
  if (count == 0) {
    if constexpr (Tail::kActive) tail(b, covered, smem_raw);
    return;
  }
  if constexpr (!kEarly) load_ids_and_weight(count);

  // Block i of the split into stage i % kSm90Stages (the stage is free: its previous block released).
  auto issue_block = [&](int i) {
    const int stage = i % kSm90Stages;
    const int id = sm.block_ids[i];
    const bool valid = id >= 0 && id < p.num_blocks;
    sm.invalid[stage] = !valid;
    if (valid && kMxfp4) {  // the block as it is; its consumer converts it
      sm90::mbarrier_arrive_expect_tx(&sm.full[stage], kMxfp4BlockBytes);
      sm90::bulk_load(sm.k + stage * kMxfp4BlockBytes, p.kv_cache + static_cast<long long>(id) * p.kv_block_stride,
                      kMxfp4BlockBytes, &sm.full[stage]);
    } else if (valid) {
      sm90::mbarrier_arrive_expect_tx(&sm.full[stage], kKeyBytes + 64 * 4);
      sm90::tma_load_3d(sm.k + stage * kStageBytes, &params.kv_map, &sm.full[stage], 0, 0, id);  // kOneTma: and the scales
      if constexpr (!kOneTma)
        sm90::bulk_load(sm.scales + stage * 64, p.kv_cache + static_cast<long long>(id) * p.kv_block_stride + kKeyBytes, 64 * 4,
                        &sm.full[stage]);
    } else {
      sm90::mbarrier_arrive(&sm.full[stage]);
    }
  };
  auto issue_query = [&] {
    if constexpr (!kMxfp4) {
      sm90::mbarrier_arrive_expect_tx(sm.q_full, kN * kHeadDim);
      sm90::tma_load_2d(sm.q, &params.q_map, sm.q_full, 0, b * kN);
    }
  };
  // Where the host asks for it (and kEarly), the producer thread issues the query and fills the first
  // stages before the CTA's barrier (nobody waits on the mbarriers before it, and the thread that
  // initialized them may use them at once), so that the first keys are on their way while the CTA
  // sets up.
  const bool early = kEarly && params.fill_before_barrier != 0;
  const int prologue_blocks = early ? min(count, kSm90Stages) : 0;
  auto stage_ids_and_start = [&] {
    if (producer_warp) {
#pragma unroll
      for (int h = 0; h < kIdsPerLane; ++h)
        if (tid % 32 + 32 * h < params.blocks_per_split) sm.block_ids[tid % 32 + 32 * h] = ids[h];
      __syncwarp();
      if (producer_thread) {
        sm.init_barriers(128 * kRowGroups);
        if (early) issue_query();
        for (int i = 0; i < prologue_blocks; ++i) issue_block(i);
      }
    }
  };
  if constexpr (kEarly) stage_ids_and_start();
  if constexpr (kHistogram)
    for (int i = tid; i < kNextN * kCoarseBins; i += kSm90Threads) sm.hist[i] = 0;
  if (tid < kN) {
    if constexpr (kMxfp4) {  // the head's factor 2^(M - 133), unless its dots are NaN (then its row is zeros)
      const Mxfp4Exponents e = mxfp4_exponents(static_cast<unsigned int>(p.q_scales[static_cast<long long>(b) * kN + tid]));
      if (!e.nan) weight *= exact_power_of_two(e.largest - 133);
    }
    sm.weights[tid] = weight;
  }
  if constexpr (kMxfp4) {
    // The query as E4M3 in the tile the TMA fills on the FP8 path, in the K order of the keys' register
    // fragments (mxfp4_e4m3.cuh): one row per thread.
    for (int row = tid; row < kN; row += kSm90Threads) {
      const long long q_row = static_cast<long long>(b) * kN + row;
      mxfp4_query_row(p.q + q_row * 64, static_cast<unsigned int>(p.q_scales[q_row]), row, sm.q);
    }
    sm90::fence_proxy_async();  // before the barrier below: the consumers' wgmma reads it
  }
  if constexpr (!kEarly) stage_ids_and_start();
  __syncthreads();

  if (warpgroup == kSm90Consumers) {
    if constexpr (kForm.moves_registers) sm90::set_max_registers_dec<kForm.producer_registers>();
    if (producer_thread) {
      if constexpr (!kEarly && !kMxfp4) sm90::prefetch_tensor_map(&params.kv_map);
      if (!early) issue_query();
      for (int i = prologue_blocks; i < count; ++i) {
        if (i >= kSm90Stages) sm90::mbarrier_wait(&sm.empty[i % kSm90Stages], ((i / kSm90Stages) - 1) & 1);
        issue_block(i);
      }
    } else if (!kDirectStores && tid >= kSm90Consumers * 128 + 32) {  // the store warps, block i to warp i % 3
      static_assert(kSm90Stages % kSm90StoreWarps == 0 && kSm90Stages % kTakers == 0, "stage ownership");
      const int warp = (tid - (kSm90Consumers * 128 + 32)) / 32;
      const int lane = tid % 32;
      for (int i = warp; i < count; i += kSm90StoreWarps) {
        const int stage = i % kSm90Stages;
        sm90::mbarrier_wait(&sm.scores_full[stage], (i / kSm90Stages) & 1);
        // The lane's values, keys s0 and s0 + 32 of every row, all read before the stage is handed back,
        // so that the consumer that refills it need not wait for the stores and the count. Unrolled, the
        // row of each value is known at compile time (its length a register, not a select over the rows)
        // and the values' loads, stores and bins interleave: one store warp per block in flight was the
        // bound of the N = 192-256 kernels with the histogram (their consumers waited for free score
        // stages in 16 % of all samples).
        float value[kNextN][2];
#pragma unroll
        for (int j = 0; j < kNextN; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) value[j][h] = sm.scores[(stage * kNextN + j) * 64 + 32 * h + lane];
        sm90::mbarrier_arrive(&sm.scores_free[stage]);
        const int s0 = (first + i) * 64 + lane;
#pragma unroll
        for (int j = 0; j < kNextN; ++j) {
          const long long row = (static_cast<long long>(b) * kNextN + j) * p.logits_stride;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int s = s0 + 32 * h;
            if (s >= p.width) continue;
            store_value<Store, kHistogram && !kConsumersCount>(p, row + s, s, lens[j], value[j][h], sm.hist + j * kCoarseBins);
          }
        }
      }
    }
    // A tail runs after the branches join, where the register budget must be the launch's again.
    if constexpr (Tail::kActive && kForm.moves_registers) sm90::set_max_registers_inc<sm90_launch_registers(kSm90Threads)>();
  } else {
    if constexpr (kForm.moves_registers) sm90::set_max_registers_inc<kForm.consumer_registers>();
    const int lane = tid % 32;
    const int quad = lane % 4;
    const int key0 = 16 * ((tid % 128) / 32) + lane / 4;  // this thread's keys: key0 and key0 + 8
    const int owned_key = ConsumerTile::owned_key(quad, key0);  // the key of its values after the head sums
    // Its first query row (consumers kTakers apart share blocks).
    const int row0 = kRowGroups == 1 ? 0 : sm90::warpgroup_index() / kTakers * kConsumerRows;
    const unsigned char* q_s = sm.q + row0 * kHeads * kHeadDim;
    const float* weights_s = sm.weights + row0 * kHeads;
    int row_lens[kConsumerRows];
#pragma unroll
    for (int j = 0; j < kConsumerRows; ++j) row_lens[j] = length_of_row(lens, row0 + j);
    constexpr bool kRegisterWeights = kForm.register_weights;
    typename ConsumerTile::Weights weights;
    if constexpr (kRegisterWeights) ConsumerTile::load_weights(weights, weights_s, quad);
    // What the head sums read their weights from.
    const auto& weight_source = [&]() -> const auto& {
      if constexpr (kRegisterWeights) return weights;
      else return weights_s;
    }();
    typename ConsumerTile::Acc acc;
#pragma unroll
    for (int c = 0; c < ConsumerTile::kChunks; ++c)
#pragma unroll
      for (int i = 0; i < ConsumerTile::kChunk / 2; ++i) acc[c][i] = 0.0f;
    if constexpr (!kMxfp4) sm90::mbarrier_wait(sm.q_full, 0);  // the MXFP4 query was written before the block barrier

    // The blocks this consumer takes, block i's stage and the phase of its full barrier, from a warpgroup
    // index the compiler knows to be warp-uniform: else it computed i % kSm90Stages per thread every block
    // and moved the descriptors into uniform registers one by one (about 30 instructions per block).
    const int consumer = sm90::warpgroup_index();
    const int taker = kRowGroups == 1 ? consumer : consumer % kTakers;
    sm90::RingCursor<kSm90Stages, kTakers> ring(taker);
    for (int i = taker; i < count; i += kTakers) {
      const int stage = ring.stage;
      sm90::mbarrier_wait(&sm.full[stage], ring.phase);
      const bool valid = sm.invalid[stage] == 0;
      float scale = 0.0f;  // of this lane's key (owned_key)
      auto read_scales_and_release = [&] {  // the FP8 path
        if (valid)
          scale = kOneTma
                      ? *reinterpret_cast<const float*>(sm.k + stage * kStageBytes + sm90_paged_scale_offset(kHeadDim, owned_key))
                      : sm.scales[stage * 64 + owned_key];
        sm90::mbarrier_arrive(&sm.empty[stage]);  // the stage's keys and scales are in registers now
      };
      // The FP8 stage is released as soon as the wgmma has read it, except where the accumulators and
      // the weights fill the registers (four consumers that move registers): there it is released after
      // the head sums (Sm90PagedForm::late_release).
      constexpr bool kLateRelease = kForm.late_release;
      // The two-consumer FP8 kernel of N 192 (n3 h64): the wgmma in two parts, the first query row and
      // the rest, the first part's head sums while the second part's wgmma runs
      // (Sm90MqaTile::scores_and_head_sums, Sm90PagedForm::overlapped_parts). With only two consumers per
      // SM the tensor pipe idles whenever both are in their epilogues; three parts of one row each read
      // the keys and issue a wgmma per part, which costs more than the overlap saves
      // (docs/benchmarks/logits.md).
      constexpr bool kOverlap = kForm.overlapped_parts;
      typename ConsumerTile::Owned sum;
      if constexpr (kMxfp4) {
        // The keys straight into the wgmma's A fragments (also for an invalid block: its values become
        // NaN below), after which the stage is free.
        typename ConsumerTile::KeyFragments a;
        float key_scales[2];
        mxfp4_key_fragments(sm.k + stage * kMxfp4BlockBytes, key0, quad, a, key_scales);
        sm90::mbarrier_arrive(&sm.empty[stage]);
        if (valid) scale = (quad & 1) != 0 ? key_scales[1] : key_scales[0];  // ConsumerTile::owned_key
        if constexpr (kMxfp4Round < kCN) ConsumerTile::template head_sums_in_rounds<kMxfp4Round>(a, q_s, weights_s, quad, sum);
        else ConsumerTile::scores(acc, a, q_s);
      } else if constexpr (kOverlap) {
        // An invalid block's sums are of stale keys here and become NaN below; the stage is released once
        // the last part's wgmma has read it.
        static_assert(!kLateRelease, "the stage released inside the parts");
        ConsumerTile::scores_and_head_sums(acc, sm.k + stage * kStageBytes, q_s, weight_source, quad, sum,
                                           read_scales_and_release);
      } else {
        // Also for an invalid block (the stage holds stale or no keys; its values become NaN below):
        // without the branch the flag's shared-memory load overlaps the wgmma instead of gating it.
        ConsumerTile::scores(acc, sm.k + stage * kStageBytes, q_s);
        if constexpr (!kLateRelease) read_scales_and_release();
      }

      if constexpr (kMxfp4Round == kCN &&
                    !kOverlap)  // (in rounds or parts the sums are made; an invalid block's become NaN below)
        block_head_sums<ConsumerTile>(valid, acc, weight_source, quad, sum);
      if constexpr (kLateRelease) read_scales_and_release();

      // Hand the scaled scores to the store warps, or store them (kDirectStores).
      if (!kDirectStores && i >= kSm90Stages) sm90::mbarrier_wait(&sm.scores_free[stage], ring.phase ^ 1u);
#pragma unroll
      for (int n = 0; n < ConsumerTile::kOwned; ++n) sum[n] = valid ? sum[n] * scale : quiet_nan();
      const int s = (first + i) * 64 + owned_key;
      if constexpr (kDirectStores) {  // as the store warps do
        store_owned_values<ConsumerTile, Store, kConsumerRows, kHistogram>(
            p, sum, quad, s, static_cast<long long>(b) * kNextN + row0, row_lens, sm.hist + row0 * kCoarseBins);
      } else {
        if constexpr (kHistogram && kConsumersCount) {  // (MXFP4) what the store warps will store and mask
#pragma unroll
          for (int n = 0; n < ConsumerTile::kOwned; ++n) {
            if (!ConsumerTile::owns(n, quad)) continue;
            const int j = ConsumerTile::owned_row(n, quad);
            if (s < length_of_row(row_lens, j) && s < p.width) count_stored(sm.hist + j * kCoarseBins, Store::rounded(sum[n]));
          }
        }
        ConsumerTile::hand_off(sm.scores + stage * kNextN * 64, sum, quad, key0);
        sm90::mbarrier_arrive(&sm.scores_full[stage]);
      }
      ring.advance();
    }
    if constexpr (Tail::kActive && kForm.moves_registers) sm90::set_max_registers_dec<sm90_launch_registers(kSm90Threads)>();
  }

  if constexpr (kHistogram) {
    __syncthreads();
    for (int i = tid; i < kNextN * kCoarseBins; i += kSm90Threads) {
      const int count_in_bin = sm.hist[i];
      if (count_in_bin != 0)
        atomicAdd(p.histogram + (static_cast<long long>(b) * kNextN + i / kCoarseBins) * kCoarseBins + i % kCoarseBins,
                  count_in_bin);
    }
  }
  if constexpr (Tail::kActive) tail(b, covered, smem_raw);
}

}  // namespace kernels
}  // namespace flash_indexer
