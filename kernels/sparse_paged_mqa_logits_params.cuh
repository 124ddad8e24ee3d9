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

}  // namespace kernels
}  // namespace flash_indexer
