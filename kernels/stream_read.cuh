#pragma once
// A plain streaming read of a large buffer: the memory bandwidth the benchmarks compare against.
#include "stream_read_params.cuh"

namespace flash_indexer {
namespace kernels {

__device__ void stream_read(const StreamReadParams& p) {
  constexpr int kUnroll = 4;
  const uint4* data = static_cast<const uint4*>(p.data);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  unsigned int acc = 0;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < p.vectors; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(data + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < p.vectors; i += stride) {
    const uint4 v = __ldcs(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) p.sink[0] = acc;
}

}  // namespace kernels
}  // namespace flash_indexer
