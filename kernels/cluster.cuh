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

// A cluster barrier split in two without the GPU-scope fence of a release: the arrive right after the
// CTA's mbarriers are initialised (fence.mbarrier_init publishes them), the wait before the first
// exchange, so that the barrier costs nothing while the row's loads are in flight. It orders nothing
// but the initialisation; the data then goes through st.async. Every thread of every CTA, once each.
__device__ __forceinline__ void arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

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

// Exchanges through the async proxy, without the GPU-scope fence that a cluster barrier's release
// compiles to on sm_90 (MEMBAR.ALL.GPU before every arrive: five such barriers took 26 % of the
// resident selector's warp samples at 1 x 128K FP32, 8.6 % in that fence). A CTA receives
// into its own shared memory and counts the bytes on its own mbarrier, which it initialises before a
// cluster barrier's arrive (that barrier publishes the initialisation: arrive_relaxed / wait below, or a
// full cluster barrier) and uses once per launch.
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(static_cast<unsigned int>(__cvta_generic_to_shared(bar)))
               : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The receiver's one arrival: `bytes` more are to come from the other CTAs.
__device__ __forceinline__ void expect_bytes(unsigned long long* bar, unsigned int bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(static_cast<unsigned int>(__cvta_generic_to_shared(bar))),
      "r"(bytes)
      : "memory");
}

// Waits until the receiver's arrival and every expected byte have come (phase 0 completes).
__device__ __forceinline__ void wait_received(unsigned long long* bar) {
  const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(bar));
  unsigned int done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n"
        "selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(address)
        : "memory");
  }
}

// Stores v at `address` (another CTA's shared memory, from map()) and counts its 4 bytes on that CTA's
// mbarrier `bar` (its address from map() as well).
__device__ __forceinline__ void send(unsigned int address, unsigned int v, unsigned int bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%0], %1, [%2];" ::"r"(address), "r"(v), "r"(bar)
               : "memory");
}

// Every CTA's kWords words to every other CTA: word j of this CTA (`rank`) goes to slot `rank` of the
// word array slots[j] in the others and is counted on their `bar`; returns once the other CTAs' words
// have come into this CTA's slots (its own slot is left as it is: the caller holds its words). Every
// thread calls it.
template <int kCluster, int kWords>
__device__ __forceinline__ void send_to_all(unsigned long long* bar, int rank, const void* const (&slots)[kWords],
                                            const unsigned int (&words)[kWords]) {
  if (threadIdx.x == 0) expect_bytes(bar, 4u * kWords * (kCluster - 1));
  if (threadIdx.x < kCluster && static_cast<int>(threadIdx.x) != rank) {
    const unsigned int to = map(bar, threadIdx.x);
#pragma unroll
    for (int j = 0; j < kWords; ++j) send(map(static_cast<const unsigned int*>(slots[j]) + rank, threadIdx.x), words[j], to);
  }
  wait_received(bar);
}

}  // namespace cluster
}  // namespace kernels
}  // namespace flash_indexer
