#pragma once
// The threshold search of the on-chip top-k selectors (topk_resident.cuh, topk_register.cuh): over bin
// counts held kPer per thread, best bin first, the bin where the running count reaches k.

#include "block_scan.cuh"

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
// and found[4]. Sync: the threads' barrier (block_scan.cuh).
template <int kThreads, int kPer, class Smem, class Sync = CtaSync>
__device__ FoundBin scan_threshold(const int (&c)[kPer], int k, Smem& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int own = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) own += c[i];
  const int inclusive = warp_inclusive_sum(own);
  if (lane == 31) sm.warp_sums[warp] = static_cast<unsigned int>(inclusive);
  Sync::sync();
  // Lane w scans the warp totals; this warp's offset is lane warp - 1's, the total the last warp's.
  constexpr int kWarps = kThreads / 32;
  const int sums = warp_inclusive_sum<kWarps>(lane < kWarps ? static_cast<int>(sm.warp_sums[lane]) : 0);
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
  Sync::sync();
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

// The keys [lo, hi) that hold the k-th best of a row: `need` of them still win, `count` are there.
// Keys >= hi win outright.
struct ThresholdKeys {
  unsigned int lo, hi;
  int need, count;
};

// The interval of fine bin f (In's keys, bin 0 the best) of a row whose k best are sought; no bin (f.bin
// >= fine_bins: fewer than k selectable) gives the empty interval at kMinKey, where every selectable
// column wins.
template <class In>
__device__ __forceinline__ ThresholdKeys threshold_keys_of_fine_bin(const FoundBin& f, int k, int fine_bins) {
  if (f.bin >= fine_bins) return {In::kMinKey, In::kMinKey, 0, 0};
  return {In::lowest_key_of_fine_bin(f.bin), f.bin == 0 ? In::kMaxKey + 1 : In::lowest_key_of_fine_bin(f.bin - 1), k - f.above,
          f.count};
}

// Narrows t to the digit a round found: g is bin kDigits - 1 - digit of the digits (key - lo) >> shift,
// counted best (highest digit) first.
template <int kDigits>
__device__ __forceinline__ void narrow_to_digit(ThresholdKeys& t, const FoundBin& g, int shift) {
  const unsigned int digit = static_cast<unsigned int>(kDigits - 1 - g.bin);
  t.need -= g.above;
  const unsigned long long top = static_cast<unsigned long long>(t.lo) + (static_cast<unsigned long long>(digit + 1) << shift);
  t.lo += digit << shift;
  t.hi = static_cast<unsigned int>(min(top, static_cast<unsigned long long>(t.hi)));
  t.count = g.count;
}

// A digit round over the keys in [lo, hi): the shift that leaves kBits-bit digits of key - lo.
template <int kBits>
__device__ __forceinline__ int digit_shift(unsigned int lo, unsigned int hi) {
  return max(0, 32 - __clz(static_cast<int>(hi - 1u - lo)) - kBits);
}

}  // namespace kernels
}  // namespace flash_indexer
