#pragma once
// Parameters of the sparse-read probe, shared by host and device code.

namespace flash_indexer {
namespace kernels {

struct SparseReadParams {
  const unsigned char* kv_cache;  // blocks of 64 positions: 64 keys of key_bytes, then 64 4-byte scales
  long long block_stride;         // bytes from one cache block to the next, a multiple of 16
  const int* block_table;         // [batch, table_stride]
  const int* lengths;             // [batch] tokens; query row b * next_n + j sees lengths[b] - next_n + j + 1
  const int* candidates;          // [batch * next_n, count] candidate blocks of candidate_block positions
  int batch;
  int next_n;
  int table_stride;
  int count;
  int candidate_block;            // 8 or 16 positions
  int key_bytes;                  // per position: 128 (FP8) or 64 (MXFP4)
  unsigned int* warp_xor;         // [gridDim.x * warps per CTA]: each warp's XOR of every 32-bit word it read
};

constexpr int kSparseReadThreads = 256;
constexpr int kSparseReadCtasPerSm = 2;
constexpr int kSparseReadGroup = 4;  // candidates a warp reads at once

}  // namespace kernels
}  // namespace flash_indexer
