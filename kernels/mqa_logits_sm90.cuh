#pragma once
// Ragged (prefill) MQA logits on Hopper (sm_90a): TMA + FP8 wgmma, warp-specialized, the structure of
// the paged sm90 kernel (paged_mqa_logits_sm90.cuh) over one contiguous key buffer.
//
// Prefill is compute-bound (T * W * H * D * 2 FLOPs), so a CTA reuses every key tile it loads for a
// group of G = 128 / H consecutive tokens: the wgmma's N is the group's G * H query rows. The CTA
// covers `tiles_per_split` consecutive 64-key tiles (grid: token groups x splits) and loads only those
// inside the union of its tokens' windows; consecutive CTAs are consecutive token groups of the same
// split, so their key tiles meet in L2. The producer thread loads the group's Q once (a 2-D TMA; rows
// past T read as zeros) and streams the key tiles (a 2-D TMA of 64 x D FP8, rows past N as zeros)
// through the ring; consumer warpgroups take the tiles in turn (sm90_mqa_tile.cuh: wgmma, then the
// ReLU-weighted head sums in a fixed order with the weights in registers, so results are bitwise
// deterministic), scale them by the keys' FP32 scales (copied into the stage beside the keys by a 1-D
// TMA where kv_scales is 16-byte aligned, else read from global) and store them themselves: after the
// quad's reduce-scatter each lane owns one value of every two tokens and writes it, -inf outside its
// token's window with fill_masked, and counts it into the histogram. (Handing the scores to the
// producer warpgroup's three warps to store and count cost 3-7 % at H 64 and halved the rate at H 16:
// those warps bounded it; docs/benchmarks/prefill.md.)
#include "coarse_histogram.cuh"
#include "grid_dependency.cuh"
#include "mqa_logits_params.cuh"
#include "mqa_window.cuh"
#include "numeric.cuh"
#include "sm90_mqa_tile.cuh"

namespace flash_indexer {
namespace kernels {

template <int kHeads, int kHeadDim, bool kHistogram, LogitsOut kOut>
__device__ void mqa_logits_sm90(const MqaLogitsSm90Params& params) {
  await_previous_kernel();  // before this kernel's first global memory access
  constexpr int kG = mqa_sm90_tokens(kHeads);
  using Tile = Sm90MqaTile<kG, kHeads, kHeadDim>;
  constexpr int kN = Tile::kN;
  constexpr int kKeyBytes = Tile::kKeyBytes;
  constexpr int kConsumers = kMqaSm90Consumers;
  constexpr int kStages = kMqaSm90Stages;
  constexpr int kThreads = kMqaSm90Threads;
  constexpr Sm90Layout kLayout = mqa_sm90_layout(kHeads, kHeadDim, kHistogram);
  static_assert(kStages % kConsumers == 0, "stage ownership");
  static_assert(sm90_handover_fits(kThreads, kMqaSm90ProducerRegisters, kConsumers, kMqaSm90ConsumerRegisters),
                "the setmaxnreg handover fits the launch's registers");
  using Store = LogitsStore<kOut>;
  const MqaLogitsParams& p = params.p;

  extern __shared__ unsigned char smem_raw[];
  const Sm90MqaSmem<kStages> sm(smem_raw, kLayout);

  const int tid = threadIdx.x;
  const int t0 = blockIdx.x * kG;
  // The group's windows; lo / hi bound their union (empty windows excluded).
  int starts[kG], ends[kG];
  int lo = 0x7fffffff, hi = 0;
#pragma unroll
  for (int j = 0; j < kG; ++j) {
    starts[j] = ends[j] = 0;
    if (t0 + j < p.tokens) {
      const MqaWindow w = mqa_window(p, t0 + j);
      starts[j] = w.start;
      ends[j] = w.end;
      if (w.end > w.start) {
        lo = min(lo, w.start);
        hi = max(hi, w.end);
      }
    }
  }
  const int key_tiles = (p.keys + 63) / 64;
  const int first = blockIdx.y * params.tiles_per_split;
  const int split_end = min(first + params.tiles_per_split, key_tiles);
  const int active = hi > lo ? max(first, lo / 64) : first;
  const int count = hi > lo ? max(0, min(split_end, (hi + 63) / 64) - active) : 0;

  // Columns of this split outside the tiles the CTA computes: -inf when asked, nothing else there.
  if (p.fill_masked) {
    const int begin = first * 64, span = min(split_end * 64, p.keys) - begin;
    for (int i = tid; i < kG * max(span, 0); i += kThreads) {
      const int j = i / span, s = begin + i % span;
      if (t0 + j >= p.tokens || (s >= active * 64 && s < (active + count) * 64)) continue;
      Store::store(p.logits, static_cast<long long>(t0 + j) * p.logits_stride + s, negative_infinity());
    }
  }
  if (count == 0) return;

  if (tid == 0) sm.init_barriers();
  if constexpr (kHistogram)
    for (int i = tid; i < kG * kCoarseBins; i += kThreads) sm.hist[i] = 0;
  for (int i = tid; i < kN; i += kThreads)
    sm.weights[i] = t0 + i / kHeads < p.tokens ? p.weights[static_cast<long long>(t0) * kHeads + i] : 0.0f;
  // For the consumers' stores, per token: the stored keys [start, end), and the element offset of key 0
  // in its logits row (a compressed row starts at the window's first key), so that a store costs what it
  // cost before the compressed form.
  int* const windows = sm.block_ids;
  long long* const origins = reinterpret_cast<long long*>(windows + 2 * kG);
  static_assert(kLayout.block_ids % 8 == 0 && 4 * kG <= kSm90MaxBlocksPerSplit,
                "the windows and the 8-byte row origins fit the (here unused) block-id slots");
  if (tid == 0) {
#pragma unroll
    for (int j = 0; j < kG; ++j) {
      windows[2 * j] = starts[j], windows[2 * j + 1] = ends[j];
      origins[j] = static_cast<long long>(t0 + j) * p.logits_stride - (p.compressed ? starts[j] : 0);
    }
  }
  __syncthreads();

  const int warpgroup = tid / 128;
  if (warpgroup == kConsumers) {
    sm90::set_max_registers_dec<kMqaSm90ProducerRegisters>();
    if (tid == kConsumers * 128) {  // the producer thread
      sm90::prefetch_tensor_map(&params.kv_map);
      sm90::mbarrier_arrive_expect_tx(sm.q_full, kN * kHeadDim);
      sm90::tma_load_2d(sm.q, &params.q_map, sm.q_full, 0, t0 * kHeads);
      const bool scales_in_stage = params.scales_in_stage != 0;
      if (scales_in_stage) sm90::prefetch_tensor_map(&params.scales_map);
      for (int i = 0; i < count; ++i) {
        const int stage = i % kStages;
        if (i >= kStages) sm90::mbarrier_wait(&sm.empty[stage], ((i / kStages) - 1) & 1);
        sm90::mbarrier_arrive_expect_tx(&sm.full[stage], kKeyBytes + (scales_in_stage ? 64 * 4 : 0));
        sm90::tma_load_2d(sm.k + stage * kKeyBytes, &params.kv_map, &sm.full[stage], 0, (active + i) * 64);
        if (scales_in_stage) sm90::tma_load_1d(sm.scales + stage * 64, &params.scales_map, &sm.full[stage], (active + i) * 64);
      }
    }  // the producer warpgroup's other warps have nothing to do
  } else {
    sm90::set_max_registers_inc<kMqaSm90ConsumerRegisters>();
    const int lane = tid % 32;
    const int quad = lane % 4;
    const int key0 = 16 * ((tid % 128) / 32) + lane / 4;  // this thread's keys: key0 and key0 + 8
    const int owned_key = Tile::owned_key(quad, key0);     // the key of its values after the head sums
    const bool scales_in_stage = params.scales_in_stage != 0;
    typename Tile::Weights weights;
    Tile::load_weights(weights, sm.weights, quad);
    typename Tile::Acc acc;
#pragma unroll
    for (int c = 0; c < Tile::kChunks; ++c)
#pragma unroll
      for (int i = 0; i < Tile::kChunk / 2; ++i) acc[c][i] = 0.0f;
    sm90::mbarrier_wait(sm.q_full, 0);

    // Tile i's stage and the phase of its full barrier, from a warp-uniform warpgroup index so that the
    // stage and the descriptors are uniform-datapath work.
    const int consumer = sm90::warpgroup_index();
    sm90::RingCursor<kStages, kConsumers> ring(consumer);
    for (int i = consumer; i < count; i += kConsumers) {
      const int stage = ring.stage;
      const int key = (active + i) * 64 + owned_key;
      // Keys past N score 0. A global load is issued before the wait, so it overlaps it and the wgmma.
      const float global_scale = !scales_in_stage && key < p.keys ? __ldg(p.kv_scales + key) : 0.0f;
      sm90::mbarrier_wait(&sm.full[stage], ring.phase);
      const float scale = scales_in_stage ? sm.scales[stage * 64 + owned_key] : global_scale;
      Tile::scores(acc, sm.k + stage * kKeyBytes, sm.q);
      sm90::mbarrier_arrive(&sm.empty[stage]);  // the stage's keys are in registers now
      typename Tile::Owned sum;
      Tile::head_sums(acc, weights, quad, sum);
#pragma unroll
      for (int n = 0; n < Tile::kOwned; ++n) sum[n] *= scale;
      // Value n of this lane: token owned_row, key `key`; a warp's store covers 16 consecutive columns of
      // two rows.
#pragma unroll
      for (int n = 0; n < Tile::kOwned; ++n) {
        const int j = Tile::owned_row(n, quad);
        if (!Tile::owns(n, quad) || t0 + j >= p.tokens || key >= p.keys) continue;
        const bool inside = key >= windows[2 * j] && key < windows[2 * j + 1];
        if (kHistogram && inside) count_stored(sm.hist + j * kCoarseBins, Store::rounded(sum[n]));
        // fill_masked is never set with a compressed row (the host refuses both).
        if (inside || p.fill_masked) Store::store(p.logits, origins[j] + key, inside ? sum[n] : negative_infinity());
      }
      ring.advance();
    }
  }

  if constexpr (kHistogram) {
    __syncthreads();
    for (int i = tid; i < kG * kCoarseBins; i += kThreads) {
      const int count_in_bin = sm.hist[i];
      if (count_in_bin != 0 && t0 + i / kCoarseBins < p.tokens)
        atomicAdd(p.histogram + static_cast<long long>(t0 + i / kCoarseBins) * kCoarseBins + i % kCoarseBins, count_in_bin);
    }
  }
}

}  // namespace kernels
}  // namespace flash_indexer
