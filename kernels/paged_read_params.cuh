#pragma once
// Parameters of the paged-read probe, shared by host and device code.

namespace flash_indexer {
namespace kernels {

struct PagedReadParams {
  const void* pool;          // KV blocks of block_vectors 16-byte vectors each, 16-byte aligned
  const int* block_table;    // [batch, table_stride]
  const int* lengths;        // [batch] tokens; block j of request b is read if j * block_tokens < lengths[b]
  int batch;
  int table_stride;
  int block_vectors;         // block bytes / 16
  int block_tokens;
  unsigned int* warp_xor;    // [gridDim.x * warps per CTA]: each warp's XOR of every 32-bit word it read
};

constexpr int kPagedReadThreads = 256;
constexpr int kPagedReadCtasPerSm = 3;
constexpr int kPagedReadVectorsPerLane = 17;  // blocks of up to 17 * 32 vectors (8704 bytes)

}  // namespace kernels
}  // namespace flash_indexer
