#pragma once
// The threshold search of the on-chip top-k selectors (topk_resident.cuh, topk_register.cuh): over bin
// counts held kPer per thread, best bin first, the bin where the running count reaches k.

namespace flash_indexer {
namespace kernels {

struct FoundBin {
  int bin;    // kPer * kThreads: fewer than k counted
  int above;  // count in bins before `bin`
  int count;  // count in `bin`
  int group;  // count in the aligned group of four bins holding `bin` (fine bins: its selector bin)
  int total;
};

// The bin where the running count (bin 0 first) reaches k; thread t holds the counts of bins
// [t * kPer, (t + 1) * kPer). Every thread calls it; two barriers. Smem has warp_sums[kThreads / 32]
// and found[4].
template <int kThreads, int kPer, class Smem>
__device__ FoundBin scan_threshold(const int (&c)[kPer], int k, Smem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int own = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) own += c[i];
  int inclusive = own;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += y;
  }
  if (lane == 31) sm.warp_sums[warp] = static_cast<unsigned int>(inclusive);
  __syncthreads();
  // Lane w scans the warp totals; this warp's offset is lane warp - 1's, the total the last warp's.
  constexpr int kWarps = kThreads / 32;
  int sums = lane < kWarps ? static_cast<int>(sm.warp_sums[lane]) : 0;
#pragma unroll
  for (int d = 1; d < kWarps; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, sums, d);
    if (lane >= d) sums += y;
  }
  const int total = __shfl_sync(0xffffffffu, sums, kWarps - 1);
  const int warps_before = __shfl_sync(0xffffffffu, sums, (warp + 31) & 31);
  int before = inclusive - own + (warp > 0 ? warps_before : 0);
  if (total >= k && before < k && k <= before + own) {  // exactly one thread
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (before < k && k <= before + c[i]) {
        int group = 0;
        if constexpr (kPer % 4 == 0) {
#pragma unroll
          for (int j = 0; j < kPer; ++j) group += (j >> 2) == (i >> 2) ? c[j] : 0;
        }
        sm.found[0] = static_cast<int>(threadIdx.x) * kPer + i;
        sm.found[1] = before;
        sm.found[2] = c[i];
        sm.found[3] = group;
      }
      before += c[i];
    }
  }
  __syncthreads();
  FoundBin f;
  f.total = total;
  if (total < k) {
    f.bin = kPer * kThreads;
    f.above = total;
    f.count = 0;
    f.group = 0;
  } else {
    f.bin = sm.found[0];
    f.above = sm.found[1];
    f.count = sm.found[2];
    f.group = sm.found[3];
  }
  return f;
}

// The same search with one barrier: every warp finds the bin itself. The counts are read from shared
// memory (kPer per thread, thread t's at counts[t * kPer]), so after the warp totals have crossed the
// barrier each warp reads the kPer * 32 counts of the warp that holds the k-th and scans them; no
// second barrier hands a result around. The caller must not change `counts` or `warp_sums` until
// every warp has returned (the next barrier). k >= 1.
template <int kThreads, int kPer>
__device__ FoundBin find_bin(const unsigned int* counts, int k, unsigned int* warp_sums) {
  static_assert(kPer % 4 == 0, "whole 16-byte reads, and whole groups of four bins");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  auto read = [&](int thread, int (&c)[kPer]) {
    int own = 0;
#pragma unroll
    for (int j = 0; j < kPer / 4; ++j) {
      const uint4 a = reinterpret_cast<const uint4*>(counts)[kPer / 4 * thread + j];
      c[4 * j] = static_cast<int>(a.x);
      c[4 * j + 1] = static_cast<int>(a.y);
      c[4 * j + 2] = static_cast<int>(a.z);
      c[4 * j + 3] = static_cast<int>(a.w);
      own += c[4 * j] + c[4 * j + 1] + c[4 * j + 2] + c[4 * j + 3];
    }
    return own;
  };
  auto inclusive_scan = [&](int x) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, d);
      if (lane >= d) x += y;
    }
    return x;
  };
  int c[kPer];
  int sum = read(static_cast<int>(threadIdx.x), c);
#pragma unroll
  for (int d = 16; d >= 1; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  if (lane == 0) warp_sums[warp] = static_cast<unsigned int>(sum);
  __syncthreads();
  const int sums = inclusive_scan(lane < kWarps ? static_cast<int>(warp_sums[lane]) : 0);
  FoundBin f;
  f.total = __shfl_sync(0xffffffffu, sums, 31);
  f.bin = kPer * kThreads;
  f.above = f.total;
  f.count = f.group = 0;
  if (f.total < k) return f;
  // The warp whose running total first reaches k, then the thread, then the bin.
  const int w = __ffs(static_cast<int>(__ballot_sync(0xffffffffu, sums >= k))) - 1;
  const int before_warp = w > 0 ? __shfl_sync(0xffffffffu, sums, w - 1) : 0;
  const int own = read(w * 32 + lane, c);
  const int running = before_warp + inclusive_scan(own);
  const int l = __ffs(static_cast<int>(__ballot_sync(0xffffffffu, running >= k))) - 1;
  int bin = 0, above = 0, count = 0, group = 0;
  if (lane == l) {
    int before = running - own;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (before < k && k <= before + c[i]) {
        bin = (w * 32 + l) * kPer + i;
        above = before;
        count = c[i];
#pragma unroll
        for (int j = 0; j < kPer; ++j) group += (j >> 2) == (i >> 2) ? c[j] : 0;
      }
      before += c[i];
    }
  }
  f.bin = __shfl_sync(0xffffffffu, bin, l);
  f.above = __shfl_sync(0xffffffffu, above, l);
  f.count = __shfl_sync(0xffffffffu, count, l);
  f.group = __shfl_sync(0xffffffffu, group, l);
  return f;
}

}  // namespace kernels
}  // namespace flash_indexer
