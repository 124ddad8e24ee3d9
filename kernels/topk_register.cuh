#pragma once
// Exact top-k (CONTRACT 4) of a row held in registers: one CTA per row, kRegisterColumns logits per
// thread in 16-byte vectors (512 threads: 8K logits; 1024 threads: 16K). A short row's time
// is its fixed cost, a chain of dependent latencies and barriers, so this selector keeps the chain
// short:
//   1. The row's vectors are requested as soon as its address is known, the length alongside (a decode
//      row starts at column 0, so only a window start is waited for). Columns outside the window read
//      as NaN afterwards, so they drop out wherever NaN does. No staging buffer, no candidate buffer.
//   2. Radix select on the order-preserving keys: the 4096 fine bins (those of the resident selector,
//      so the row report means the same) find the threshold bin, then 12-bit digits of the keys inside
//      it narrow it until every key left is needed or it holds a single key. A round is one pass over
//      the registers and two barriers: one for its counts, one in the threshold search (find_bin: each
//      warp finds the bin itself).
//   3. Output: thread t holds the consecutive columns from + t * kRegisterColumns + [0, 16), so one
//      block scan of (winners, ties) per thread places every winner in column order, and the first ties
//      by column fill what the winners leave. Ascending columns, the same bytes as every selector.
#include "topk_common.cuh"
#include "topk_threshold_scan.cuh"

namespace flash_indexer {
namespace kernels {

constexpr int kRegisterDigitBits = 12;

template <int kThreads>
struct TopkRegisterSmem {
  // Counts of one round; the next round counts into the other buffer, zeroed meanwhile.
  alignas(16) unsigned int hist[2][kTopkFineBins];
  unsigned int warp_sums[kThreads / 32];  // find_bin
  unsigned int scan[kThreads / 32];       // the output scan
};

// Element e (a constant) of a 16-byte vector of kPer logits, and its replacement.
template <class In>
__device__ __forceinline__ typename In::Raw vector_element(const uint4& v, int e) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(typename In::Raw));
  const int i = kPer == 4 ? e : e >> 1;
  const unsigned int word = i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
  if constexpr (kPer == 4) return In::from_bits(word);
  else return In::from_bits(word >> ((e & 1) * 16));
}
template <class In>
__device__ __forceinline__ void set_vector_element(uint4& v, int e, typename In::Raw x) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(typename In::Raw));
  const int i = kPer == 4 ? e : e >> 1;
  unsigned int& word = i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
  if constexpr (kPer == 4) {
    word = float_bits(x);
  } else {
    const int shift = (e & 1) * 16;
    word = (word & ~(0xffffu << shift)) | (static_cast<unsigned int>(x) << shift);
  }
}

template <LogitsOut kIn, int kThreads>
__device__ void topk_register(const TopkParams& p) {
  static_assert(kThreads == 512 || kThreads == 1024, "threads");
  using In = TopkInput<kIn>;
  using Raw = typename In::Raw;
  constexpr int kPer = 16 / static_cast<int>(sizeof(Raw));
  constexpr int kVec = kRegisterColumns / kPer;
  constexpr int kBinsPer = kTopkFineBins / kThreads;  // 8 or 4: whole selector bins per thread
  constexpr int kDigits = 1 << kRegisterDigitBits;
  static_assert(kDigits == kTopkFineBins, "a digit round uses a fine-bin buffer");
  __shared__ TopkRegisterSmem<kThreads> sm;

  const int r = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x);
  const Raw* row = reinterpret_cast<const Raw*>(static_cast<const char*>(p.logits) +
                                                static_cast<long long>(r) * p.logits_stride * sizeof(Raw));
  const bool aligned = (reinterpret_cast<unsigned long long>(row) & 15u) == 0;
  uint4 x[kVec];
  // This thread's columns [first, first + kRegisterColumns) below the width (the host checked that the
  // width fits); what lies past it reads as NaN.
  auto load = [&](int first) {
    const Raw nan = In::nan();
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      const int s = first + v * kPer;
      if (aligned && s + kPer <= p.width) {
        x[v] = __ldg(reinterpret_cast<const uint4*>(row + s));
      } else {
#pragma unroll
        for (int e = 0; e < kPer; ++e) set_vector_element<In>(x[v], e, s + e < p.width ? In::load(row, s + e) : nan);
      }
    }
  };
  int start = 0, first = t * kRegisterColumns;
  if (p.row_starts == nullptr) load(first);  // before the length arrives: the two latencies overlap
  // Zeroed while the loads fly; the first barrier below orders it before the counts.
#pragma unroll
  for (int j = 0; j < kBinsPer / 4; ++j) {
    reinterpret_cast<uint4*>(sm.hist[0])[kBinsPer / 4 * t + j] = make_uint4(0, 0, 0, 0);
    reinterpret_cast<uint4*>(sm.hist[1])[kBinsPer / 4 * t + j] = make_uint4(0, 0, 0, 0);
  }
  const int len = topk_row_length(p, r);
  if (p.row_starts != nullptr) {
    start = topk_row_start(p, r, len);
    first += aligned_start<kPer>(start);
    load(first);
  }
  if (first < start || first + kRegisterColumns > len) {
    const Raw nan = In::nan();
#pragma unroll
    for (int v = 0; v < kVec; ++v)
#pragma unroll
      for (int e = 0; e < kPer; ++e)
        if (first + v * kPer + e < start || first + v * kPer + e >= len) set_vector_element<In>(x[v], e, nan);
  }
  __syncthreads();

  // 1. Fine-bin counts and the threshold bin.
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const Raw y = vector_element<In>(x[v], e);
      if (!In::is_nan(y)) atomicAdd(&sm.hist[0][In::fine_bin_of(y)], 1u);  // not one contended slot for a short row's tail
    }
  }
  __syncthreads();
  const FoundBin f = find_bin<kThreads, kBinsPer>(sm.hist[0], p.k, sm.warp_sums);
  if (t == 0) {  // the row report, now: its values need no registers later
    int* out = p.report + static_cast<long long>(r) * kTopkReportInts;
    out[0] = 0;                                                      // counted here
    out[1] = f.bin < kTopkFineBins ? f.bin >> 2 : kTopkSelectorBins;  // its selector bin
    out[2] = f.bin < kTopkFineBins ? f.group : 0;
    out[3] = f.bin < kTopkFineBins && f.count > kTopkResidentCandidates ? 1 : 0;  // what the resident selector reports
  }

  // 2. The threshold bin as keys [lo, hi), narrowed by 12-bit digits while more keys are in it than
  // needed and it holds more than one key. Keys >= hi win; of [lo, hi), all (in_bin == need) or the
  // first `need` by column (a single key).
  unsigned int lo = In::kMinKey, hi = In::kMinKey;  // fewer than k: every selectable column wins
  int need = 0, in_bin = 0;
  if (f.bin < kTopkFineBins) {
    hi = f.bin == 0 ? In::kMaxKey + 1 : In::lowest_key_of_fine_bin(f.bin - 1);
    lo = In::lowest_key_of_fine_bin(f.bin);
    need = p.k - f.above;
    in_bin = f.count;
  }
  int round = 1;
#pragma unroll 1
  while (in_bin > need && hi - lo > 1) {
    unsigned int* counts = sm.hist[round & 1];
    const int shift = max(0, 32 - __clz(static_cast<int>(hi - 1u - lo)) - kRegisterDigitBits);
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const Raw y = vector_element<In>(x[v], e);
        const unsigned int key = In::key(y);
        if (!In::is_nan(y) && key >= lo && key < hi) atomicAdd(&counts[kDigits - 1 - static_cast<int>((key - lo) >> shift)], 1u);
      }
    }
    __syncthreads();
    // The other buffer was last read by the previous search, which every warp left before the barrier
    // above; the next round counts into it after the search's barrier.
#pragma unroll
    for (int j = 0; j < kBinsPer / 4; ++j)
      reinterpret_cast<uint4*>(sm.hist[(round + 1) & 1])[kBinsPer / 4 * t + j] = make_uint4(0, 0, 0, 0);
    const FoundBin g = find_bin<kThreads, kBinsPer>(counts, need, sm.warp_sums);
    const unsigned int digit = static_cast<unsigned int>(kDigits - 1 - g.bin);
    need -= g.above;
    const unsigned long long top = static_cast<unsigned long long>(lo) + (static_cast<unsigned long long>(digit + 1) << shift);
    lo += digit << shift;
    hi = static_cast<unsigned int>(min(top, static_cast<unsigned long long>(hi)));
    in_bin = g.count;
    ++round;
  }
  const bool all_in = in_bin == need;  // block-uniform

  // 3. Which columns win (bit i: column first + i): keys >= hi, and keys in [lo, hi) as ties. FP32
  // compares values against the bounds as values (NaN never passes); 16-bit logits compare keys.
  auto at_least = [&](unsigned int bound) {
    const float at = bound_value<In>(bound);
    unsigned int mask = 0;
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const Raw y = vector_element<In>(x[v], e);
        bool in;
        if constexpr (kPer == 4) in = In::value(y) >= at;
        else in = !In::is_nan(y) && In::key(y) >= bound;
        mask |= in ? 1u << (v * kPer + e) : 0u;
      }
    }
    return mask;
  };
  const unsigned int win = at_least(all_in ? lo : hi);
  const unsigned int tie = all_in ? 0u : at_least(lo) & ~win;
  // Winners <= k and ties < 2^16 before any thread: both fit one word. No barrier after the scan: its
  // scratch is not used again.
  const int lane = t & 31, warp = t >> 5;
  const unsigned int counts = static_cast<unsigned int>(__popc(win)) | static_cast<unsigned int>(__popc(tie)) << 16;
  unsigned int inclusive = counts;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const unsigned int y = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += y;
  }
  if (lane == 31) sm.scan[warp] = inclusive;
  __syncthreads();
  unsigned int before = inclusive - counts, total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) {
    const unsigned int y = sm.scan[w];
    before += w < warp ? y : 0u;
    total += y;
  }
  const int selected = static_cast<int>(total & 0xffffu) + min(need, static_cast<int>(total >> 16));
  int na = static_cast<int>(before & 0xffffu), nt = static_cast<int>(before >> 16);
  const int k = p.k;
  int* indices = p.indices + static_cast<long long>(r) * k;
  float* values = p.values != nullptr ? p.values + static_cast<long long>(r) * k : nullptr;
  for (unsigned int m = win | tie; m != 0; m &= m - 1) {  // i is not a constant: selects, not local memory
    const int i = __ffs(static_cast<int>(m)) - 1;
    int at;
    if ((win >> i) & 1u) {
      at = na + min(nt, need);
      ++na;
    } else {
      at = nt < need ? na + nt : -1;
      ++nt;
    }
    if (at >= 0) {
      indices[at] = output_index(p, r, first + i, start);
      if (values != nullptr) {
        const int v = i / kPer;
        const uint4 vec = v == 0 ? x[0] : v == 1 ? x[kVec > 1 ? 1 : 0] : v == 2 ? x[kVec > 2 ? 2 : 0] : x[kVec > 3 ? 3 : 0];
        values[at] = In::value(vector_element<In>(vec, i % kPer));
      }
    }
  }
  for (int i = selected + t; i < k; i += kThreads) {
    indices[i] = -1;
    if (values != nullptr) values[i] = negative_infinity();
  }
}

}  // namespace kernels
}  // namespace flash_indexer
