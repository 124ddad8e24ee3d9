#pragma once
// Kernel parameters of the sparse paged MQA logits kernels (docs/design/two-level.md): the paged logits
// of each query row over its candidate blocks only. Shared verbatim by the host launcher and the device
// code (plain types only: compiled by both the host compiler and NVRTC).
#include "paged_mqa_logits_params.cuh"

namespace flash_indexer {
namespace kernels {

// The full-context op's parameters (paged_mqa_logits_params.cuh; the logits are [B * next_n,
// num_candidates * candidate_block], whose width the kernel does not read: lengths are not clamped),
// and the candidates.
struct SparsePagedMqaLogitsParams {
  PagedMqaLogitsParams p;
  const int* candidates;        // [B * next_n, num_candidates], row stride candidates_stride
  long long candidates_stride;  // elements
  int num_candidates;
  int next_n;
  int masked_nan;  // 1: masked columns are NaN, not -inf (SparsePagedMqaLogitsOptions::masked_nan)
};

// The portable kernel: one CTA per 64 output columns of one row (grid: column tiles x rows).
constexpr int kSparsePortableThreads = 256;
constexpr int kSparseTile = 64;
// Its dynamic shared memory, bytes: the tile's keys as FP32 [64][head_dim + 1], the query row, its
// weights, the keys' scales and one partial sum per (head group, key).
constexpr int sparse_portable_smem_bytes(int heads, int head_dim) {
  return (kSparseTile * (head_dim + 1) + heads * head_dim + heads + kSparseTile +
          (kSparsePortableThreads / kSparseTile) * kSparseTile) *
         4;
}

// ---- the sm_90a kernel (sparse_paged_mqa_logits_sm90.cuh) ----------------------------------------

// One warpgroup per CTA, `tiles_per_cta` (at most kSparseSm90MaxTiles) 64-column tiles of one row
// (grid: ranges of tiles x rows), a ring of kSparseSm90Stages gathered tiles.
constexpr int kSparseSm90Threads = 128;
constexpr int kSparseSm90Stages = 4;
constexpr int kSparseSm90MaxTiles = 16;

struct SparsePagedMqaLogitsSm90Params {
  SparsePagedMqaLogitsParams s;
  int tiles_per_cta;
};

// A ring stage: 64 FP8 key rows (their scales apart), or the MXFP4 block layout (kMxfp4BlockBytes).
constexpr int sparse_sm90_stage_bytes(bool mxfp4) { return mxfp4 ? kMxfp4BlockBytes : 64 * 128; }

// Dynamic shared memory, offsets from a 1024-aligned base (the query tile and the FP8 stages are 128B
// swizzled): the query tile, the stages, the FP8 scales, the weights, the histogram, the stages'
// mbarriers and the range's resolved candidates (an int2 each: sparse_candidate).
struct SparseSm90Layout {
  int q, k, scales, weights, histogram, barriers, candidates, bytes;
};
constexpr SparseSm90Layout sparse_sm90_layout(int heads, int head_dim, int candidate_block, bool histogram, bool mxfp4) {
  SparseSm90Layout l{};
  l.q = 0;
  l.k = round_up(heads * head_dim, 1024);
  l.scales = l.k + kSparseSm90Stages * sparse_sm90_stage_bytes(mxfp4);
  l.weights = l.scales + (mxfp4 ? 0 : kSparseSm90Stages * 64 * 4);
  l.histogram = l.weights + heads * 4;
  l.barriers = round_up(l.histogram + (histogram ? 1024 * 4 : 0), 8);
  l.candidates = l.barriers + kSparseSm90Stages * 8;
  l.bytes = l.candidates + 8 * kSparseSm90MaxTiles * (kSparseTile / candidate_block) + 1024;  // + slack to align the base
  return l;
}

}  // namespace kernels
}  // namespace flash_indexer
