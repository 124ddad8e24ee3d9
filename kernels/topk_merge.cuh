#pragma once
// The exact top-k of the union of candidate lists, one row per CTA (contract §4's rules; decode context
// parallel, dcp.hpp): each of `lists` ranks brings up to k_in (value, global position) pairs of a row,
// its local top-k, and the row's top-k of their union is written in ascending position order, as
// topk() writes a row. Larger values first, -0 equal to +0, NaN and negative positions never taken,
// equal values to the lower position; -1 pads.
//
// A candidate is the 64-bit key (ordered value key << 32) | (2^32 - 1 - position): the larger key is
// the better candidate, and keys of distinct positions are distinct, so the k-th largest key is found
// by 12-bit digit rounds (a 4096-bin count per round, re-reading the candidates, which stay in L2)
// until its bin holds exactly the candidates still needed, and the winners are exactly the keys from
// there up. The winners' slots in shared memory come from an atomic counter (any arrival order), and
// a bitonic sort by position makes the bytes unique. Equal keys (a position given twice with the same
// value) are identical candidates, so whichever copies are taken, the bytes are the same.
#include "block_scan.cuh"
#include "dcp.hpp"
#include "grid_dependency.cuh"
#include "topk_common.cuh"
#include "topk_merge_params.cuh"
#include "topk_threshold_scan.cuh"

namespace flash_indexer {
namespace kernels {

// The digit counts are last read before the winners are first written (a barrier between), so they share
// storage: apart, at k = 4096, the two would pass the 48 KiB of static shared memory.
struct TopkMergeSmem {
  union {
    unsigned int hist[4096];  // digit counts, largest digit first
    struct {
      int position[kMaxTopk];  // the winners, then sorted by position
      float value[kMaxTopk];
    };
  };
  unsigned int warp_sums[kTopkMergeThreads / 32];
  int found[4];
  int taken;  // winners placed
  int tied;   // duplicates of the threshold key taken
};

template <LogitsOut kIn>
__device__ void topk_merge(const TopkMergeParams& p) {
  await_previous_kernel();  // before this kernel's first global memory access
  using In = TopkInput<kIn>;
  using Raw = typename In::Raw;
  constexpr int kThreads = kTopkMergeThreads, kBins = 4096, kPer = kBins / kThreads;
  static_assert(kBins % kThreads == 0, "whole bins per thread");
  __shared__ TopkMergeSmem sm;
  const int r = blockIdx.x, k = p.k;
  const int n = p.lists * p.k_in;
  const long long list_stride = static_cast<long long>(p.rows) * p.k_in;

  // Candidate i of the row (list i / k_in, entry i % k_in): false where there is none (a negative
  // position or a NaN value).
  auto candidate = [&](int i, unsigned long long& key, int& position, float& value) {
    const long long at = static_cast<long long>(i / p.k_in) * list_stride + static_cast<long long>(r) * p.k_in + i % p.k_in;
    position = __ldg(p.positions + at);
    const Raw x = In::load(static_cast<const Raw*>(p.values) + at, 0);
    value = In::value(x);
    key = static_cast<unsigned long long>(TopkInput<LogitsOut::f32>::key(value)) << 32 |
          (0xffffffffu - static_cast<unsigned int>(position));
    return position >= 0 && !In::is_nan(x);
  };

  // Digit rounds over the keys matching `prefix` in the bits of `mask`, until the bin of the k-th
  // largest key holds exactly the `need` keys still to take (or every bit is fixed).
  unsigned long long prefix = 0, mask = 0;
  int need = k, total = 0;
  bool whole_bin = true;  // every key matching prefix in mask wins
#pragma unroll 1
  for (int shift = 52;; shift = shift > 4 ? shift - 12 : 0) {
    const int width = shift > 0 ? 12 : 4;
    const unsigned int digit_mask = (1u << width) - 1u;
#pragma unroll
    for (int j = 0; j < kPer; ++j) sm.hist[kPer * threadIdx.x + j] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      unsigned long long key;
      int position;
      float value;
      if (candidate(i, key, position, value) && (key & mask) == prefix)
        atomicAdd(&sm.hist[kBins - 1 - static_cast<int>((key >> shift) & digit_mask)], 1u);
    }
    __syncthreads();
    int d[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) d[j] = static_cast<int>(sm.hist[kPer * threadIdx.x + j]);
    const FoundBin f = scan_threshold<kThreads, kPer>(d, need, sm);
    if (shift == 52) total = f.total;  // every candidate, counted in the first round
    if (f.total <= need) break;        // the first round: at most k candidates, all taken
    need -= f.above;
    prefix |= static_cast<unsigned long long>(kBins - 1 - f.bin) << shift;
    mask |= static_cast<unsigned long long>(digit_mask) << shift;
    if (f.count == need) break;
    if (shift == 0) {  // every bit fixed and more equal keys than needed: duplicates
      whole_bin = false;
      break;
    }
  }

  // The winners into shared memory, any order.
  if (threadIdx.x == 0) sm.taken = sm.tied = 0;
  __syncthreads();
  const bool all = total <= k;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    unsigned long long key;
    int position;
    float value;
    if (!candidate(i, key, position, value)) continue;
    const unsigned long long top = key & mask;
    bool win = all || top > prefix || (top == prefix && whole_bin);
    if (!win && top == prefix) win = atomicAdd(&sm.tied, 1) < need;
    if (win) {
      const int slot = atomicAdd(&sm.taken, 1);
      sm.position[slot] = position;
      sm.value[slot] = value;
    }
  }
  __syncthreads();
  const int taken = min(total, k);

  // Bitonic sort of the winners by position over the power of two >= k; empty slots sort last.
  int size = 1;
  while (size < k) size <<= 1;
  for (int i = taken + static_cast<int>(threadIdx.x); i < size; i += kThreads) sm.position[i] = 0x7fffffff;
  __syncthreads();
#pragma unroll 1
  for (int span = 2; span <= size; span <<= 1)
#pragma unroll 1
    for (int stride = span >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < size / 2; t += kThreads) {
        const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
        const bool ascending = (lo & span) == 0;
        const int a = sm.position[lo], b = sm.position[hi];
        if ((a > b) == ascending) {
          sm.position[lo] = b;
          sm.position[hi] = a;
          const float v = sm.value[lo];
          sm.value[lo] = sm.value[hi];
          sm.value[hi] = v;
        }
      }
      __syncthreads();
    }

  int* indices = p.indices + static_cast<long long>(r) * k;
  float* values = p.out_values != nullptr ? p.out_values + static_cast<long long>(r) * k : nullptr;
  for (int i = threadIdx.x; i < k; i += kThreads) {
    indices[i] = i < taken ? sm.position[i] : -1;
    if (values != nullptr) values[i] = i < taken ? sm.value[i] : negative_infinity();
  }
  if (p.owned == nullptr) return;
  // This rank's share in the same order, as its local columns: each thread takes consecutive slots,
  // so one scan of the per-thread counts places them.
  constexpr int kSlots = kMaxTopk / kThreads;
  static_assert(kMaxTopk % kThreads == 0, "whole output slots per thread");
  auto mine = [&](int i) { return i < taken && dcp_owner(sm.position[i], p.owner_ranks, p.owner_interleave) == p.owner_rank; };
  unsigned int count = 0;
#pragma unroll
  for (int j = 0; j < kSlots; ++j) count += mine(kSlots * static_cast<int>(threadIdx.x) + j) ? 1u : 0u;
  unsigned int owned_total;
  unsigned int at = BlockScan<kThreads>::exclusive(count, sm.warp_sums, owned_total);
  int* owned = p.owned + static_cast<long long>(r) * k;
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int i = kSlots * static_cast<int>(threadIdx.x) + j;
    if (mine(i)) owned[at++] = dcp_local_column(sm.position[i], p.owner_ranks, p.owner_interleave);
  }
  for (int i = static_cast<int>(owned_total + threadIdx.x); i < k; i += kThreads) owned[i] = -1;
}

}  // namespace kernels
}  // namespace flash_indexer
