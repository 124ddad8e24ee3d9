#pragma once
// Paged MQA logits on Hopper over ranges: the four-consumer FP8 kernels that move registers
// (Sm90PagedForm::has_ranges: n2 h64, n3 h32). Where the host asks (PagedMqaLogitsSm90Params::ranges), one CTA
// per SM takes an even share of the B x width_blocks KV blocks, as DeepGEMM's persistent grid does. A
// CTA's range may span several requests, one segment per request, streamed through one ring without
// draining between them. Otherwise the common kernel (paged_mqa_logits_sm90.cuh) runs unchanged.
//
// The block loop is the common kernel's: one query buffer at a fixed address (the consumers' wgmma
// descriptors stay constant), the weights in registers, the register handover. Around it:
// - warp 0 is the producer thread alone: one TMA per block (keys and scales) from a ring of ids;
// - warp 2 stages the ids, 64 at a time in two buffers, a chunk ahead, checked against the pool; the
//   issuing thread never shares its warp with threads that wait (sharing it cost 7 %);
// - warp 1 writes each segment's weights and loads its query once the consumers have finished the last
//   segment (q_empty), while the producer thread already streams the new segment's blocks: one query
//   load per request change is the only bubble;
// - warps 2 and 3 fill -inf past the live blocks where asked.
#include "paged_mqa_logits_sm90.cuh"

namespace flash_indexer {
namespace kernels {

// A CTA's range of the B x width_blocks blocks, from block `first` of request `b` up to block `end_last`
// of request `end_b` (exclusive), taken one request's part (a segment) at a time.
struct Sm90Range {
  int b, first, end_b, end_last;
  __device__ __forceinline__ bool more() const { return b < end_b || (b == end_b && first < end_last); }
};

// The segment at the front of a range: blocks [first, last) of request b, `count` of them live.
template <int kNextN>
struct Sm90Segment {
  int b, first, last, count, live_blocks;
  int lens[kNextN];

  Sm90Segment() = default;
  __device__ __forceinline__ Sm90Segment(const PagedMqaLogitsParams& p, Sm90Range& range, int width_blocks) {
    b = range.b;
    first = range.first;
    last = b == range.end_b ? range.end_last : width_blocks;
    ++range.b;
    range.first = 0;
    int max_len = 0;
#pragma unroll
    for (int j = 0; j < kNextN; ++j) {
      lens[j] = row_length<kNextN>(p, b, j);
      max_len = max(max_len, lens[j]);
    }
    live_blocks = (max_len + 63) / 64;
    count = max(0, min(last, live_blocks) - first);
  }
};

__device__ __forceinline__ Sm90Range sm90_cta_range(const PagedMqaLogitsSm90Params& params, int width_blocks) {
  const long long total = static_cast<long long>(params.p.batch) * width_blocks;
  const long long lo = total * blockIdx.x / gridDim.x, hi = total * (blockIdx.x + 1) / gridDim.x;
  return {static_cast<int>(lo / width_blocks), static_cast<int>(lo % width_blocks), static_cast<int>(hi / width_blocks),
          static_cast<int>(hi % width_blocks)};
}

template <int kNextN, int kHeads, int kHeadDim, bool kHistogram, LogitsOut kOut>
__device__ void paged_mqa_logits_sm90_ranges(const PagedMqaLogitsSm90Params& params) {
  await_previous_kernel();  // before this kernel's first global memory access
  using Tile = Sm90MqaTile<kNextN, kHeads, kHeadDim>;
  using Segment = Sm90Segment<kNextN>;
  using Store = LogitsStore<kOut>;
  constexpr int kN = Tile::kN;
  constexpr int kKeyBytes = Tile::kKeyBytes;
  constexpr int kStageBytes = sm90_paged_stage_bytes(kHeadDim);  // FP8: the keys and their scales
  constexpr Sm90PagedForm kForm = sm90_paged_form(kNextN, kHeads, false);
  constexpr int kConsumers = kForm.consumers;
  constexpr int kStages = kForm.stages;
  constexpr int kThreads = kForm.threads;
  static_assert(kForm.consumer_n == kN && kConsumers == 4 && kForm.has_ranges && kForm.one_tma_per_block,
                "n2 h64 and n3 h32, FP8: one TMA per block");
  // Taking ranges implies both: the consumers take registers from the producer warpgroup and hold
  // their weights in them.
  static_assert(kForm.moves_registers && kForm.register_weights, "registers");
  constexpr Sm90Layout kLayout = sm90_layout(kNextN, kHeads, kHeadDim, kHistogram);
  constexpr int kIdChunk = 64;  // block ids staged at a time by the producer warp
  const PagedMqaLogitsParams& p = params.p;

  extern __shared__ unsigned char smem_raw[];
  const Sm90MqaSmem<kStages> sm(smem_raw, kLayout);
  // The direct-store kernels use no score stages: their first "scores full" barrier is q_empty, which
  // the 512 consumer threads complete once per segment.
  unsigned long long* const q_empty = sm.scores_full;
  // Two buffers of 64 block ids (sm.block_ids[64 c ..], their counts at sm.block_ids[128 + c], 0: the
  // end), filled by warp 2 and read by the producer thread, the only thread of warp 0 that stays: a warp
  // of its own for the ids, so that the issuing thread never shares its warp with threads that wait.
  unsigned long long* const ids_full = sm.scores_full + 1;
  unsigned long long* const ids_empty = sm.scores_full + 3;

  const int tid = threadIdx.x;
  const int warpgroup = tid / 128;
  const int lane = tid % 32;
  const int width_blocks = (p.width + 63) / 64;
  const Sm90Range cta_range = sm90_cta_range(params, width_blocks);

  if constexpr (kHistogram)
    for (int i = tid; i < kNextN * kCoarseBins; i += kThreads) sm.hist[i] = 0;
  if (tid == kConsumers * 128) {
    sm.init_barriers();
    sm90::mbarrier_init(q_empty, kConsumers * 128);
    for (int c = 0; c < 2; ++c) {
      sm90::mbarrier_init(ids_full + c, 32);
      sm90::mbarrier_init(ids_empty + c, 1);
    }
    sm90::fence_barrier_init();
    sm90::prefetch_tensor_map(&params.kv_map);
  }
  __syncthreads();

  if (warpgroup == kConsumers) {
    sm90::set_max_registers_dec<kForm.producer_registers>();
    const int warp = (tid / 32) % 4;
    if (warp == 0) {  // the producer thread: the blocks of every segment, one ring across them
      if (lane == 0) {
        // The CTA's blocks in order through the ring: stage and round kept as counters (no division per
        // block), the wait for a free stage from the second round on.
        unsigned int stage = 0, round = 0;
        for (int chunk = 0;; ++chunk) {
          const int buf = chunk & 1;
          sm90::mbarrier_wait(ids_full + buf, (chunk >> 1) & 1);
          const int n = sm.block_ids[128 + buf];
          if (n == 0) break;
          for (int i = 0; i < n; ++i) {
            if (round > 0) sm90::mbarrier_wait(&sm.empty[stage], (round - 1) & 1);
            const int id = sm.block_ids[64 * buf + i];
            const bool valid = id >= 0;  // checked against the pool by warp 2
            sm.invalid[stage] = !valid;
            if (valid) {
              sm90::mbarrier_arrive_expect_tx(&sm.full[stage], kKeyBytes + 64 * 4);  // keys and scales, one TMA
              sm90::tma_load_3d(sm.k + stage * kStageBytes, &params.kv_map, &sm.full[stage], 0, 0, id);
            } else {
              sm90::mbarrier_arrive(&sm.full[stage]);
            }
            if (++stage == kStages) {
              stage = 0;
              ++round;
            }
          }
          sm90::mbarrier_arrive(ids_empty + buf);
        }
      }
    } else if (warp == 2 || warp == 3) {
      if (warp == 2) {  // the block ids, 64 at a time, a chunk ahead of the producer thread
        Sm90Range range = cta_range;
        Segment seg;  // none yet: the first chunk takes the range's first segment
        seg.count = 0;
        int c0 = 0;
        for (int chunk = 0;; ++chunk) {
          while (c0 >= seg.count && range.more()) {
            seg = Segment(p, range, width_blocks);
            c0 = 0;
          }
          const int n = c0 < seg.count ? min(seg.count - c0, kIdChunk) : 0;
          int ids[kIdChunk / 32];
#pragma unroll
          for (int h = 0; h < kIdChunk / 32; ++h) {
            const int slot = seg.first + c0 + lane + 32 * h;
            const int id = lane + 32 * h < n && slot < p.max_blocks
                               ? p.block_table[static_cast<long long>(seg.b) * p.block_table_stride + slot]
                               : -1;
            ids[h] = id >= 0 && id < p.num_blocks ? id : -1;  // -1: not loaded, its logits NaN
          }
          c0 += n;
          const int buf = chunk & 1;
          if (chunk >= 2) sm90::mbarrier_wait(ids_empty + buf, ((chunk >> 1) - 1) & 1);
#pragma unroll
          for (int h = 0; h < kIdChunk / 32; ++h) sm.block_ids[64 * buf + lane + 32 * h] = ids[h];
          if (lane == 0) sm.block_ids[128 + buf] = n;
          sm90::mbarrier_arrive(ids_full + buf);  // each lane's stores before its arrival (release)
          if (n == 0) break;
        }
      }
      if (p.fill_masked) {  // warps 2 and 3: -inf in the columns past every row's live blocks
        const int t = tid - (kConsumers * 128 + 64);
        for (Sm90Range range = cta_range; range.more();) {
          const Segment seg(p, range, width_blocks);
          const int begin = max(seg.first, seg.live_blocks) * 64;
          const int end = min(seg.last * 64, p.width);
          for (int i = t; i < kNextN * max(end - begin, 0); i += 64) {
            const long long row = static_cast<long long>(seg.b) * kNextN + i / (end - begin);
            Store::store(p.logits, row * p.logits_stride + begin + i % (end - begin), negative_infinity());
          }
        }
      }
    } else if (warp == 1) {  // each segment's query and weights, once the consumers are done with the last
      int k = 0;
      for (Sm90Range range = cta_range; range.more();) {
        const Segment seg(p, range, width_blocks);
        if (seg.count == 0) continue;
        if (k > 0) {  // a segment's length: asleep, not polling the barrier beside the consumers
          while (!sm90::mbarrier_test_wait(q_empty, (k - 1) & 1)) __nanosleep(1000);
        }
        for (int t = lane; t < kN; t += 32) sm.weights[t] = p.weights[static_cast<long long>(seg.b) * kN + t];
        __syncwarp();  // the weights before the arrival that publishes them (release)
        if (lane == 0) {
          sm90::mbarrier_arrive_expect_tx(sm.q_full, kN * kHeadDim);
          sm90::tma_load_2d(sm.q, &params.q_map, sm.q_full, 0, seg.b * kN);
        }
        ++k;
      }
    }
  } else {
    sm90::set_max_registers_inc<kForm.consumer_registers>();
    const int quad = lane % 4;
    const int key0 = 16 * ((tid % 128) / 32) + lane / 4;  // this thread's keys: key0 and key0 + 8
    const int owned_key = Tile::owned_key(quad, key0);     // the key of its values after the head sums
    typename Tile::Weights weights;
    typename Tile::Acc acc;
#pragma unroll
    for (int c = 0; c < Tile::kChunks; ++c)
#pragma unroll
      for (int i = 0; i < Tile::kChunk / 2; ++i) acc[c][i] = 0.0f;
    // This consumer's blocks are the CTA's blocks g = consumer (mod 4), across segments (the producer's
    // stage sequence): the cursor runs on, and i counts from each segment's first block.
    const int consumer = sm90::warpgroup_index();
    sm90::RingCursor<kStages, kConsumers> ring(consumer);
    int i = consumer;
    int k = 0;
    for (Sm90Range range = cta_range; range.more();) {
      Segment seg(p, range, width_blocks);
      if (seg.count == 0) continue;
      // The segment's fields as warp-uniform values (uniform registers in the block loop, as the common
      // kernel's blockIdx-derived ones), and its first column of this lane's key.
      seg.b = __shfl_sync(0xffffffffu, seg.b, 0);
      seg.count = __shfl_sync(0xffffffffu, seg.count, 0);
#pragma unroll
      for (int j = 0; j < kNextN; ++j) seg.lens[j] = __shfl_sync(0xffffffffu, seg.lens[j], 0);
      const int s0 = __shfl_sync(0xffffffffu, seg.first, 0) * 64 + owned_key;
      const long long row0 = static_cast<long long>(seg.b) * kNextN;
      sm90::mbarrier_wait(sm.q_full, k & 1);  // this segment's query and weights
      Tile::load_weights(weights, sm.weights, quad);
      for (; i < seg.count; i += kConsumers) {
        const int stage = ring.stage;
        sm90::mbarrier_wait(&sm.full[stage], ring.phase);
        const bool valid = sm.invalid[stage] == 0;
        Tile::scores(acc, sm.k + stage * kStageBytes, sm.q);
        typename Tile::Owned sum;
        block_head_sums<Tile>(valid, acc, weights, quad, sum);
        // As the common kernel where the weights are in registers: the stage released after the head sums.
        float scale = 0.0f;  // of this lane's key (Tile::owned_key)
        if (valid)
          scale = *reinterpret_cast<const float*>(sm.k + stage * kStageBytes + sm90_paged_scale_offset(kHeadDim, owned_key));
        sm90::mbarrier_arrive(&sm.empty[stage]);
#pragma unroll
        for (int n = 0; n < Tile::kOwned; ++n) sum[n] = valid ? sum[n] * scale : quiet_nan();
        store_owned_values<Tile, Store, kNextN, kHistogram>(p, sum, quad, s0 + i * 64, row0, seg.lens, sm.hist);
        ring.advance();
      }
      i -= seg.count;
      // Every wgmma of this thread on the segment's query has completed and its weights are read: the
      // query warp may replace them (shared-memory weights: after the last head sums, above).
      sm90::mbarrier_arrive(q_empty);
      if constexpr (kHistogram) {  // the segment's counts into its request's rows, by the 512 consumer threads
        sm90::named_barrier_sync(1, kConsumers * 128);
        for (int bin = tid; bin < kNextN * kCoarseBins; bin += kConsumers * 128) {
          const int c = sm.hist[bin];
          if (c != 0) {
            atomicAdd(
                p.histogram + (static_cast<long long>(seg.b) * kNextN + bin / kCoarseBins) * kCoarseBins + bin % kCoarseBins, c);
            sm.hist[bin] = 0;
          }
        }
        sm90::named_barrier_sync(1, kConsumers * 128);
      }
      ++k;
    }
  }
}

// The four-consumer kernels' entry: ranges where the host asks for them, else the common kernel.
template <int kNextN, int kHeads, int kHeadDim, bool kHistogram, LogitsOut kOut>
__device__ void paged_mqa_logits_sm90_direct(const PagedMqaLogitsSm90Params& params) {
  if (params.ranges != 0) paged_mqa_logits_sm90_ranges<kNextN, kHeads, kHeadDim, kHistogram, kOut>(params);
  else paged_mqa_logits_sm90<kNextN, kHeads, kHeadDim, kHistogram, kOut>(params);
}

}  // namespace kernels
}  // namespace flash_indexer
