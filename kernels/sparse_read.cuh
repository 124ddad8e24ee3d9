#pragma once
// Reads exactly the bytes a sparse logits call reads (each live candidate's keys and scales, located as
// sparse_candidate locates them) and nothing else: no math, no stores. Timed on a two-level cell's
// inputs, it is the gather floor: the time below which no kernel can fetch that cell's scattered
// candidate blocks, which a streaming read's bandwidth (the candidate floor) does not see.
// A warp takes kSparseReadGroup candidates of a row and issues all their loads at once (up to 4 key
// vectors and one scale vector per lane and candidate), so that a group costs one round trip.
#include "sparse_read_params.cuh"

namespace flash_indexer {
namespace kernels {

__device__ void sparse_read(const SparseReadParams& p) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int groups = (p.count + kSparseReadGroup - 1) / kSparseReadGroup;
  const long long items = static_cast<long long>(p.batch) * p.next_n * groups;
  const int key_vectors = p.candidate_block * p.key_bytes / 16;  // <= 128: 4 per lane
  const int scale_vectors = p.candidate_block * 4 / 16;          // <= 4
  unsigned int acc = 0;
  for (long long w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < items; w += warps) {
    const long long r = w / groups;
    const int g = static_cast<int>(w % groups);
    const int b = static_cast<int>(r / p.next_n);
    const long long len = max(0ll, static_cast<long long>(__ldg(p.lengths + b)) - p.next_n + r % p.next_n + 1);
    uint4 v[kSparseReadGroup][5];
#pragma unroll
    for (int i = 0; i < kSparseReadGroup; ++i) {
      const int c = g * kSparseReadGroup + i;
      const long long candidate = c < p.count ? __ldg(p.candidates + r * p.count + c) : -1;
      const uint4* keys = nullptr;
      const uint4* scales = nullptr;
      if (candidate >= 0 && candidate < (len + p.candidate_block - 1) / p.candidate_block) {
        const long long pos = candidate * p.candidate_block;
        const unsigned char* block =
            p.kv_cache +
            static_cast<long long>(__ldg(p.block_table + static_cast<long long>(b) * p.table_stride + pos / 64)) * p.block_stride;
        keys = reinterpret_cast<const uint4*>(block + (pos % 64) * p.key_bytes);
        scales = reinterpret_cast<const uint4*>(block + 64 * p.key_bytes + (pos % 64) * 4);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int e = 32 * u + lane;
        v[i][u] = keys != nullptr && e < key_vectors ? __ldcs(keys + e) : make_uint4(0u, 0u, 0u, 0u);
      }
      v[i][4] = scales != nullptr && lane < scale_vectors ? __ldcs(scales + lane) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < kSparseReadGroup; ++i)
#pragma unroll
      for (int u = 0; u < 5; ++u) acc ^= v[i][u].x ^ v[i][u].y ^ v[i][u].z ^ v[i][u].w;
  }
  // One store per warp (no atomics to time): the XOR over the slots is that of every word read.
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if (lane == 0) p.warp_xor[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = acc;
}

}  // namespace kernels
}  // namespace flash_indexer
