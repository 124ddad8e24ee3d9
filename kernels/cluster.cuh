#pragma once
// Thread-block clusters (sm_90): the CTA's rank, the cluster-wide barrier, and loads/stores to another
// CTA's shared memory (distributed shared memory), as thin PTX wrappers.

namespace flash_indexer {
namespace kernels {
namespace cluster {

__device__ __forceinline__ unsigned int rank() {
  unsigned int r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every thread of every CTA in the cluster; orders shared-memory writes before it (release) with reads
// after it (acquire) across the cluster. Also a barrier of this CTA.
__device__ __forceinline__ void sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// The cluster shared-memory address of `local` (a variable of this CTA's shared memory) in CTA `rank`.
__device__ __forceinline__ unsigned int map(const void* local, unsigned int rank) {
  const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(local));
  unsigned int remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  return remote;
}

__device__ __forceinline__ int load(unsigned int address) {
  int v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(address) : "memory");
  return v;
}

// Two consecutive words (8-byte aligned): one transaction instead of two.
__device__ __forceinline__ uint2 load2(unsigned int address) {
  uint2 v;
  asm volatile("ld.shared::cluster.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(address) : "memory");
  return v;
}

__device__ __forceinline__ void store(unsigned int address, int v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(address), "r"(v) : "memory");
}

// The barrier before reading another CTA's shared memory: the cluster's, or this CTA's alone when
// the "cluster" is one CTA.
template <int kCluster>
__device__ __forceinline__ void sync_all() {
  if constexpr (kCluster == 1) __syncthreads();
  else sync();
}

// The cluster's sum of counts[i] (this CTA's alone for one CTA); every load is issued before the sum,
// so the remote latencies overlap.
template <int kCluster>
__device__ __forceinline__ unsigned int sum(const unsigned int* counts, int i) {
  if constexpr (kCluster == 1) {
    return counts[i];
  } else {
    unsigned int v[kCluster];
#pragma unroll
    for (int q = 0; q < kCluster; ++q) v[q] = static_cast<unsigned int>(load(map(&counts[i], q)));
    unsigned int total = 0;
#pragma unroll
    for (int q = 0; q < kCluster; ++q) total += v[q];
    return total;
  }
}

}  // namespace cluster
}  // namespace kernels
}  // namespace flash_indexer
