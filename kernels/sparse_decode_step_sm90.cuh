#pragma once
// The sparse decode step on Hopper (sm_90a; docs/design/two-level.md, "One kernel"): the second level
// of two-level indexing in one kernel. The sparse logits of a query row over its candidate blocks never
// leave the chip: each CTA of the row's cluster computes its segment of the row (the columns the
// resident selector assigns to it, topk_segment) into shared memory, as the stored dtype, and the
// cluster then selects the row's top-k from the segments (topk_resident.cuh, preloaded). The output is
// the bytes of the two-kernel second level: the sparse logits kernel with masked_nan, then topk with the
// candidates as its table of candidate_block positions.
//
// Gather and scores: four warpgroups; warpgroup g takes tiles g, g + 4, ... of the CTA's segment
// through its own ring of kSparseStepRing stages and computes each tile as the sparse logits kernel
// does (sparse_gather_sm90.cuh), so every live value is bitwise the sparse (and the full-context)
// kernel's. FP8 stages are filled by the warpgroup's 128 threads, 16-byte cp.async copies into the
// TMA's swizzled layout (sparse_copy_tile_threads): one thread issuing a TMA per 1 KiB candidate and a
// bulk copy per 32-byte run of scales gathered about 15 GB/s per SM, the threads' copies about 19
// (docs/benchmarks/decode.md, "Two-level indexing"). MXFP4 stages keep one thread's bulk copies into
// the block layout. Masked candidates and invalid block ids are never read: their columns are NaN,
// which the selector never takes.
#include "grid_dependency.cuh"
#include "sparse_decode_step_params.cuh"
#include "sparse_gather_sm90.cuh"
#include "topk_resident.cuh"

namespace flash_indexer {
namespace kernels {

template <int kHeads, int kHeadDim, int kBlock, LogitsOut kOut, bool kMxfp4, int kCluster>
__device__ void sparse_decode_step_sm90(const SparseDecodeStepParams& params) {
  await_previous_kernel();  // before this kernel's first global memory access
  static_assert(kHeadDim == 128, "128-byte key rows: one 128B swizzle atom per 8 rows");
  static_assert(kSparseTile % kBlock == 0 && 64 % kBlock == 0, "whole candidates per tile, each inside one cache block");
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8, "a portable cluster size");
  constexpr int kThreads = kSparseStepThreads;
  constexpr int kGroups = kSparseStepGroups;
  constexpr int kRing = kSparseStepRing;
  using Tile = Sm90MqaTile<1, kHeads, kHeadDim>;
  using Store = LogitsStore<kOut>;
  using In = TopkInput<kOut>;
  using Segment = TopkResidentTile<In, kThreads>;
  constexpr int kPer = kSparseTile / kBlock;  // candidates per tile
  constexpr int kValues = Segment::kPer;      // stored values per 16-byte vector
  constexpr int kStageBytes = sparse_sm90_stage_bytes(kMxfp4);
  constexpr SparseStepLayout kLayout =
      sparse_step_layout(kHeads, kHeadDim, kBlock, static_cast<int>(sizeof(typename In::Raw)), kMxfp4);
  // The selector's resident stages: its segment, read from the dynamic shared memory's base.
  constexpr int kSelectStages = kMaxLive * kThreads / kStageVectors;
  static_assert(kSparseStepSegmentColumns <= kMaxLive * kThreads * kValues, "the selector holds a segment");
  static_assert(sizeof(TopkResidentSmem<kThreads>) <= kSparseStepSelectBytes, "the selector's state fits the gather's memory");
  const SparsePagedMqaLogitsSm90Params& lp = params.logits;
  const SparsePagedMqaLogitsParams& sp = lp.s;
  const PagedMqaLogitsParams& p = sp.p;
  const TopkParams& tp = params.topk;

  extern __shared__ __align__(16) unsigned char step_smem[];
  void* segment_s = step_smem;  // the row's segment, as the stored dtype (the selector's topk_stages)
  unsigned char* smem = step_smem + ((1024u - (sm90::smem_address(step_smem) & 1023u)) & 1023u);  // 128B swizzle
  unsigned char* q_s = smem + kLayout.q;
  unsigned char* k_s = smem + kLayout.k;
  float* scale_s = reinterpret_cast<float*>(smem + kLayout.scales);  // FP8: [stage][64]
  float* weight_s = reinterpret_cast<float*>(smem + kLayout.weights);
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem + kLayout.barriers);
  int2* cand_s = reinterpret_cast<int2*>(smem + kLayout.candidates);
  TopkResidentSmem<kThreads>& sm = *reinterpret_cast<TopkResidentSmem<kThreads>*>(smem + kLayout.q);

  const int tid = threadIdx.x;
  const int r = blockIdx.x / kCluster;
  const int rank = kCluster > 1 ? static_cast<int>(cluster::rank()) : 0;
  // This CTA's segment of the row: what the selector expects in its shared memory.
  const int len = topk_row_length(tp, r);
  const TopkSegment seg = topk_segment<kValues, kCluster>(tp, r, len, rank);
  const int vectors = (seg.end - seg.begin + kValues - 1) / kValues;
  const int held = Segment::live_for(max(vectors, 1)) * kThreads * kValues;  // values the selector reads
  for (int i = max(seg.end - seg.begin, 0) + tid; i < held; i += kThreads) Store::store(segment_s, i, quiet_nan());

  // Where each candidate of the segment's tiles lies; the query tile and its weights.
  const int first_tile = seg.begin / kSparseTile;
  const int tiles = seg.end > seg.begin ? (seg.end + kSparseTile - 1) / kSparseTile - first_tile : 0;
  const long long row_length = sparse_row_length(sp, r);
  for (int i = tid; i < tiles * kPer; i += kThreads)
    cand_s[i] = sparse_candidate<kBlock>(sp, r, first_tile * kPer + i, row_length);
  sparse_load_query<kHeads, kHeadDim, kMxfp4>(p, r, q_s, weight_s, tid, kThreads);
  using Fill = SparseStageFill<kHeadDim, kBlock, kMxfp4>;
  if (tid == 0) {
    for (int s = 0; s < kGroups * kRing; ++s) sm90::mbarrier_init(&full[s], Fill::kArrivals);
    sm90::fence_barrier_init();
  }
  sm90::fence_proxy_async();  // the query tile, read by the wgmma after the barrier
  __syncthreads();

  const int group = sm90::warpgroup_index(), gtid = tid % 128;
  const int mine = tiles > group ? (tiles - group + kGroups - 1) / kGroups : 0;  // this warpgroup's tiles
  auto issue = [&](int i) {  // the warpgroup's i-th tile, tile group + i * kGroups of the segment
    const int t = group + i * kGroups, stage = group * kRing + i % kRing;
    Fill::fill(p, cand_s + t * kPer, k_s + stage * kStageBytes, scale_s + stage * 64, &full[stage], gtid);
  };
  if (Fill::fills(gtid))
    for (int i = 0; i < min(mine, kRing); ++i) issue(i);

  const int lane = gtid % 32;
  const int quad = lane % 4;
  const int key0 = 16 * (gtid / 32) + lane / 4;  // this thread's keys: key0 and key0 + 8
  const int owned_key = Tile::owned_key(quad, key0);
  typename Tile::Weights weights;
  Tile::load_weights(weights, weight_s, quad);
  typename Tile::Acc acc;
#pragma unroll
  for (int i = 0; i < Tile::kChunk / 2; ++i) acc[0][i] = 0.0f;

#pragma unroll 1
  for (int i = 0; i < mine; ++i) {
    const int stage = group * kRing + i % kRing;
    sm90::mbarrier_wait(&full[stage], (i / kRing) & 1);
    if constexpr (Fill::kFenceAfterWait) sm90::fence_proxy_async();
    const float scale = sparse_tile_scores<kHeads, kHeadDim, kMxfp4>(acc, k_s + stage * kStageBytes, scale_s + stage * 64, q_s,
                                                                     key0, quad, owned_key);
    sm90::named_barrier_sync(1 + group, 128);  // the warpgroup is done with the stage: refill it
    if (Fill::fills(gtid) && i + kRing < mine) issue(i + kRing);
    typename Tile::Owned sum;
    Tile::head_sums(acc, weights, quad, sum);
    if (Tile::owns(0, quad)) {
      const int t = group + i * kGroups;
      const int column = (first_tile + t) * kSparseTile + owned_key;
      if (column >= seg.begin && column < seg.end) {
        const int2 c = cand_s[t * kPer + owned_key / kBlock];
        const bool live = owned_key % kBlock < sparse_candidate_live(c) && c.x >= 0;
        Store::store(segment_s, column - seg.begin, live ? sum[0] * scale : quiet_nan());
      }
    }
  }
  __syncthreads();  // the segment is complete; the gather's memory becomes the selector's

  topk_resident_row<kOut, kCluster, kSelectStages, kThreads, true>(tp, r, rank, sm);
}

}  // namespace kernels
}  // namespace flash_indexer
