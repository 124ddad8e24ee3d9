#pragma once
// Block-wide prefix sums for kernels whose writes must land in a fixed order (deterministic output
// positions instead of atomic arrival order).

namespace flash_indexer {
namespace kernels {

// The barrier of a scan's threads: the whole CTA (__syncthreads), or named barrier kId over the first
// kThreads threads, for code that runs on part of a CTA (the decode step's selection runs on the logits
// kernel's consumer warpgroups while its producer warpgroup has left).
struct CtaSync {
  __device__ __forceinline__ static void sync() { __syncthreads(); }
};
template <int kId, int kThreads>
struct NamedSync {
  static_assert(kThreads % 32 == 0, "whole warps");
  __device__ __forceinline__ static void sync() { asm volatile("bar.sync %0, %1;" ::"n"(kId), "n"(kThreads) : "memory"); }
};

// Inclusive prefix sum of `x` over the lanes of a warp in lane order, summed over the first kLanes lanes
// (every lane of the warp must call it).
template <int kLanes = 32, class T>
__device__ __forceinline__ T warp_inclusive_sum(T x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < kLanes; d <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  return x;
}

template <int kThreads, class Sync = CtaSync>
struct BlockScan {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 32");
  static constexpr int kWarps = kThreads / 32;

  // Exclusive prefix sum of `x` over the threads in index order; `total` gets the sum over the block.
  // `scratch` holds kWarps values in shared memory. Every thread of the block must call it. One barrier:
  // after the warp scans every warp reads all the warp totals itself, so no warp waits on a serial
  // second-level scan. For a CTA's last scan into `scratch`: a later write to it would race with the
  // reads of slower warps (exclusive() adds the barrier that frees it).
  template <class T>
  __device__ static T exclusive_last(T x, T* scratch, T& total) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const T inclusive = warp_inclusive_sum(x);
    if (lane == 31) scratch[warp] = inclusive;
    Sync::sync();
    if constexpr (kWarps == 32) {
      // 1024 threads: lane l reads warp l's total and one more warp scan gives every warp its offset,
      // one shared-memory read per thread instead of 32 (with 32 reads the scan took 3.5K of the 14.8K
      // cycles of a 16K row on the register selector; this form makes those rows 11 % faster).
      const T mine = scratch[lane];
      const T through = warp_inclusive_sum(mine);
      total = __shfl_sync(0xffffffffu, through, 31);
      return __shfl_sync(0xffffffffu, through - mine, warp) + inclusive - x;
    } else {
      T before = T(0);
      total = T(0);
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const T v = scratch[w];
        before += w < warp ? v : T(0);
        total += v;
      }
      return before + inclusive - x;
    }
  }

  // The same, `scratch` free again when this returns (two barriers).
  template <class T>
  __device__ static T exclusive(T x, T* scratch, T& total) {
    const T before = exclusive_last(x, scratch, total);
    Sync::sync();
    return before;
  }

  template <class T>
  __device__ static T sum(T x, T* scratch) {
    T total;
    exclusive(x, scratch, total);
    return total;
  }
};

}  // namespace kernels
}  // namespace flash_indexer
