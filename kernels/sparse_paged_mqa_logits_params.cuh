#pragma once
// Kernel parameters of the sparse paged MQA logits kernels (docs/design/two-level.md): the paged logits
// of each query row over its candidate blocks only. Shared verbatim by the host launcher and the device
// code (plain types only: compiled by both the host compiler and NVRTC).

namespace flash_indexer {
namespace kernels {

struct SparsePagedMqaLogitsParams {
  const unsigned char* q;         // FP8 [B, next_n, H, D], contiguous; MXFP4: packed [B, next_n, H, D / 2]
  const int* q_scales;            // MXFP4 only: [B, next_n, H]
  const unsigned char* kv_cache;  // the paged cache of paged_mqa_logits (64-token blocks)
  const float* weights;           // [B * next_n, H], contiguous
  const int* context_lens;        // [B] (the MTP rule) or [B, next_n]
  const int* block_table;         // [B, max_blocks], row stride block_table_stride
  const int* candidates;          // [B * next_n, num_candidates], row stride candidates_stride
  void* logits;                   // [B * next_n, num_candidates * candidate_block], row stride logits_stride
  int* histogram;                 // [B * next_n, 1024] coarse-bin counts to add to (histogram kernels only)
  long long kv_block_stride;      // bytes
  long long block_table_stride;   // elements
  long long candidates_stride;    // elements
  long long logits_stride;        // elements
  int next_n;
  int num_blocks;
  int max_blocks;
  int num_candidates;
  int lens_2d;  // 1: context_lens is [B, next_n]; 0: [B] with the MTP rule
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
