#pragma once
// Kernel parameters of the sparse decode step (sparse_decode_step_sm90.cuh; docs/design/two-level.md,
// "One kernel"): the second level of two-level indexing, the sparse logits of a query row kept in
// shared memory and its top-k selected there. Shared verbatim by the host launcher and the device code
// (plain types only: compiled by both the host compiler and NVRTC).
#include "sparse_paged_mqa_logits_params.cuh"
#include "topk_params.cuh"

namespace flash_indexer {
namespace kernels {

// The sparse logits' parameters (their logits pointer unused: no row is written to global memory) and
// the top-k's (its logits pointer unused: each CTA's segment of the row is already in shared memory).
struct SparseDecodeStepParams {
  SparsePagedMqaLogitsSm90Params logits;  // tiles_per_cta unused: a CTA takes its segment's tiles
  TopkParams topk;
};

// Four warpgroups gather and score, then all 512 threads select (the resident selector's 512-thread
// form, topk_resident.cuh), one CTA per SM; a row on a cluster of 1, 2, 4 or 8 CTAs.
constexpr int kSparseStepThreads = 512;
constexpr int kSparseStepGroups = kSparseStepThreads / 128;
constexpr int kSparseStepRing = 4;  // ring stages per warpgroup
constexpr int kSparseStepMaxCluster = 8;
// Columns of a row per CTA (its segment): the resident selector's 64 KiB of FP32 (16K 16-bit values
// fit the same layout in half of it).
constexpr int kSparseStepSegmentColumns = 16384;
// Bytes of the resident selector's shared state (TopkResidentSmem<512>), which takes the gather's memory
// once the segment is complete (the device code asserts that it fits).
constexpr int kSparseStepSelectBytes = 56 * 1024;

// Dynamic shared memory: the segment at the base (where the selector reads it), then, from a 1024-aligned
// offset, the query tile, the warpgroups' stages, the FP8 scales, the weights, the stages' mbarriers and
// the segment's resolved candidates (an int2 each: sparse_candidate), or the selector's state.
struct SparseStepLayout {
  int q, k, scales, weights, barriers, candidates, bytes;
};
constexpr SparseStepLayout sparse_step_layout(int heads, int head_dim, int candidate_block, int value_bytes, bool mxfp4) {
  constexpr int kStages = kSparseStepGroups * kSparseStepRing;
  SparseStepLayout l{};
  l.q = round_up(kSparseStepSegmentColumns * value_bytes, 1024);
  l.k = l.q + round_up(heads * head_dim, 1024);
  l.scales = l.k + kStages * sparse_sm90_stage_bytes(mxfp4);
  l.weights = l.scales + (mxfp4 ? 0 : kStages * 64 * 4);
  l.barriers = round_up(l.weights + heads * 4, 8);
  l.candidates = l.barriers + kStages * 8;
  // A segment's tiles: one more where its first tile starts before it.
  const int gather_end = l.candidates + 8 * (kSparseStepSegmentColumns / kSparseTile + 1) * (kSparseTile / candidate_block);
  const int select_end = l.q + kSparseStepSelectBytes;
  l.bytes = (gather_end > select_end ? gather_end : select_end) + 1024;  // + slack to align the base
  return l;
}

}  // namespace kernels
}  // namespace flash_indexer
