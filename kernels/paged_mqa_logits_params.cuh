#pragma once
// Kernel parameters of the paged MQA logits kernels. Shared verbatim by the host launcher and the
// device code (plain types only: this file is compiled by both the host compiler and NVRTC).

namespace flash_indexer {
namespace kernels {

struct PagedMqaLogitsParams {
  const unsigned char* q;         // FP8 [B, next_n, H, D], contiguous
  const unsigned char* kv_cache;  // [num_blocks] x (block_size * D FP8 bytes, then block_size FP32 scales)
  const float* weights;           // [B * next_n, H], contiguous
  const int* context_lens;        // [B] or [B, next_n]
  const int* block_table;         // [B, max_blocks], row stride block_table_stride
  void* logits;                   // [B * next_n, width], row stride logits_stride
  int* histogram;                 // [B * next_n, 1024] coarse-bin counts to add to (histogram kernels only)
  long long kv_block_stride;      // bytes between consecutive blocks (multiple of 16)
  long long block_table_stride;   // elements
  long long logits_stride;        // elements
  int batch;
  int num_blocks;
  int max_blocks;
  int width;
  int lens_2d;      // 1: context_lens is [B, next_n]; 0: [B] with the MTP rule
  int fill_masked;  // 1: write -inf into columns s >= len(r)
};

// Launch geometry of the portable kernel, needed by both sides.
constexpr int kPortableThreads = 256;

// Shared memory of the portable kernel: keys as FP32 [block_size][head_dim + 1] (+1 float keeps reads
// across keys free of bank conflicts), one query row [heads][head_dim], its weights, the key scales and
// one partial sum per (head group, key).
constexpr int portable_smem_bytes(int heads, int head_dim, int block_size) {
  return (block_size * (head_dim + 1) + heads * head_dim + heads + block_size +
          (kPortableThreads / block_size) * block_size) * 4;
}

}  // namespace kernels
}  // namespace flash_indexer
