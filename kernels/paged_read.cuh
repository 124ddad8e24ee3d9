#pragma once
// Reads exactly the KV blocks a paged logits call reads (those its lengths cover, through its block
// table) and nothing else: no math, no stores. Timed in the benchmarks' harness on a cell's inputs, it
// is the time below which no paged logits kernel, ours or a peer's, can read that cell's blocks.
// One warp per block; each lane issues all its loads of the block at once (up to 17 16-byte vectors: 8448
// bytes, an FP8 block), so that a block costs one round trip after its id, even where a single short
// request leaves most warps idle.
#include "paged_read_params.cuh"

namespace flash_indexer {
namespace kernels {

__device__ void paged_read(const PagedReadParams& p) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int entries = p.batch * p.table_stride;  // < 2^31 (host)
  unsigned int acc = 0;
  for (int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < entries; w += warps) {
    const int b = w / p.table_stride, j = w % p.table_stride;
    if (static_cast<long long>(j) * p.block_tokens >= __ldg(p.lengths + b)) continue;
    const uint4* block = static_cast<const uint4*>(p.pool) + static_cast<long long>(__ldg(p.block_table + w)) * p.block_vectors;
    uint4 v[kPagedReadVectorsPerLane];
#pragma unroll
    for (int u = 0; u < kPagedReadVectorsPerLane; ++u) {
      const int i = 32 * u + lane;
      v[u] = i < p.block_vectors ? __ldcs(block + i) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kPagedReadVectorsPerLane; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  // One store per warp (no atomics to time): the XOR over the slots is that of every word read, which
  // the test compares with the blocks the lengths cover.
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if (lane == 0) p.warp_xor[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = acc;
}

}  // namespace kernels
}  // namespace flash_indexer
