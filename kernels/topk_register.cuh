#pragma once
// Exact top-k (contract §4) of an FP32 row held in registers: one CTA per row, kColumns logits per
// thread in 16-byte vectors (16: rows of 8K with 512 threads, 16K with 1024). A short row's time is its
// fixed cost, a chain of dependent latencies and barriers, so this selector keeps the chain short:
//   1. The row's vectors are requested as soon as its address is known, the length alongside (a decode
//      row starts at column 0, so only a window start is waited for). Columns outside the window read
//      as NaN afterwards, so they drop out wherever NaN does. No staging buffer, no candidate buffer.
//   2. Radix select on the order-preserving keys: the 4096 fine bins (those of the resident selector,
//      so the row report means the same) find the threshold bin, then 12-bit digits of the keys inside
//      it narrow it until every key left is needed or it holds a single key (one round in nearly every
//      8K row). Every warp finds the bin where the count reaches k itself (find_in_groups: the 64
//      groups of 64 bins, then the group's 64), so a search is the barrier after its counts and a few
//      shuffles, with no scan over the 4096 bins and no barrier to publish the result.
//   3. Output: vector v of thread t holds columns from + (v * kThreads + t) * kPer + [0, kPer) (so each
//      load is coalesced), the counts of a thread's vectors, packed 16 bits each into one word, are
//      placed in column order by one block scan. When only some columns of the last key are needed,
//      a second scan of that form over that key's columns picks the lowest first. Ascending columns, the same bytes
//      as every selector. A decode row's winners are stored predicated per element.
// Faster than the resident selector for FP32 rows (1 x 8K 9.3 -> 8.2 µs, 512 x 8K 24.0 -> 19.9 on the
// H200). FP16/BF16 rows stay on the resident selector: their frequent ties make a register form no
// faster there. Ranking the threshold bin's few keys instead of a digit round (each against all, by
// one warp, or in 8192 finer bins listed and ranked per warp) is slower: the ranking's dependent chain,
// or the list's shared-memory atomics and a search of 8192 bins by every warp, cost more than the digit
// round. Numbers and the other variants measured: docs/benchmarks/topk.md; the design:
// docs/design/topk-selectors.md.
#include "block_scan.cuh"
#include "grid_dependency.cuh"
#include "topk_common.cuh"
#include "topk_threshold_scan.cuh"

namespace flash_indexer {
namespace kernels {

constexpr int kRegisterDigitBits = 12;

template <int kThreads>
struct TopkRegisterSmem {
  // The fine bins' counts, then a digit round's in the other buffer (a later round alternates, zeroing
  // its buffer first), and the counts of their 64 groups of 64 bins beside them.
  alignas(16) unsigned int hist[2][kTopkFineBins];
  alignas(16) unsigned int groups[2][64];
  unsigned long long scan[kThreads / 32];
};

// The bin of 4096 (fine bins, or a round's digits; best first) where the running count reaches `need`,
// found by every warp itself from the counts of the 64 groups of 64 bins and then the 64 bins of that
// group (two words per lane each): no barrier after the counts are in, no scan over all 4096 bins.
// Fewer than `need` counted: bin 4096.
__device__ __forceinline__ FoundBin find_in_groups(const unsigned int* bins, const unsigned int* groups, int need) {
  const int lane = threadIdx.x & 31;
  // Of 64 counts (two per lane) after `before`: the one where the running count reaches `need`, the
  // count before it and its own; false where the 64 do not reach it.
  auto reach = [&](const unsigned int* c, int before, int& bin, int& above, int& count) {
    const uint2 two = reinterpret_cast<const uint2*>(c)[lane];
    const int own = static_cast<int>(two.x + two.y);
    const int inclusive = warp_inclusive_sum(own) + before;
    const unsigned int reached = __ballot_sync(0xffffffffu, inclusive >= need);
    if (reached == 0) {
      above = __shfl_sync(0xffffffffu, inclusive, 31);
      return false;
    }
    const int holder = __ffs(static_cast<int>(reached)) - 1;
    const int first = inclusive - own;
    const bool low = first + static_cast<int>(two.x) >= need;
    bin = __shfl_sync(0xffffffffu, 2 * lane + (low ? 0 : 1), holder);
    above = __shfl_sync(0xffffffffu, low ? first : first + static_cast<int>(two.x), holder);
    count = __shfl_sync(0xffffffffu, static_cast<int>(low ? two.x : two.y), holder);
    return true;
  };
  FoundBin g{4096, 0, 0, 0, 0};
  int group, group_above, group_count;
  if (!reach(groups, 0, group, group_above, group_count)) {
    g.above = group_above;  // every count: fewer than `need`
    return g;
  }
  reach(bins + 64 * group, group_above, g.bin, g.above, g.count);
  g.bin += 64 * group;
  return g;
}

// Element e of a vector of four logits, and its replacement (selects on e, never local memory).
__device__ __forceinline__ float vector_element(const uint4& v, int e) {
  return float_from_bits(e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w);
}
__device__ __forceinline__ void set_vector_element(uint4& v, int e, float x) {
  unsigned int& word = e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
  word = float_bits(x);
}

template <LogitsOut kIn, int kThreads, int kColumns>
__device__ void topk_register(const TopkParams& p) {
  await_previous_kernel();  // before this kernel's first global memory access
  static_assert(kThreads == 512 || kThreads == 1024, "threads");
  static_assert(kIn == LogitsOut::f32, "FP32 rows (16-bit ones stay on the resident selector)");
  using In = TopkInput<kIn>;
  using Raw = typename In::Raw;
  constexpr int kPer = 4;  // logits per 16-byte vector
  constexpr int kVec = kColumns / kPer;
  static_assert(kVec == 4, "four 16-byte vectors per thread: the counts pack 16 bits each into one 64-bit word");
  constexpr int kBinsPer = kTopkFineBins / kThreads;  // 8 or 4: whole selector bins per thread
  constexpr int kDigits = 1 << kRegisterDigitBits;
  static_assert(kDigits == kTopkFineBins, "a digit round uses a fine-bin buffer");
  using Packed = unsigned long long;
  __shared__ TopkRegisterSmem<kThreads> sm;

  const int r = blockIdx.x;
  const int t = static_cast<int>(threadIdx.x);
  const Raw* row = reinterpret_cast<const Raw*>(static_cast<const char*>(p.logits) +
                                                static_cast<long long>(r) * p.logits_stride * sizeof(Raw));
  const bool aligned = (reinterpret_cast<unsigned long long>(row) & 15u) == 0;
  uint4 x[kVec];
  // Columns [from, from + kVec * kThreads * kPer) of the row that lie below the width (the host checked
  // that the width fits); what lies past it reads as NaN.
  auto load = [&](int from) {
    const Raw nan = In::nan();
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      const int s = from + (v * kThreads + t) * kPer;
      if (aligned && s + kPer <= p.width) {
        x[v] = __ldg(reinterpret_cast<const uint4*>(row + s));
      } else {
#pragma unroll
        for (int e = 0; e < kPer; ++e) set_vector_element(x[v], e, s + e < p.width ? In::load(row, s + e) : nan);
      }
    }
  };
  int start = 0, from = 0;
  if (p.row_starts == nullptr) load(0);  // before the length arrives: the two latencies overlap
  // Zeroed while the loads fly; the barrier below orders it before the counts.
#pragma unroll
  for (int j = 0; j < kBinsPer / 4; ++j) {
    reinterpret_cast<uint4*>(sm.hist[0])[kBinsPer / 4 * t + j] = make_uint4(0, 0, 0, 0);
    reinterpret_cast<uint4*>(sm.hist[1])[kBinsPer / 4 * t + j] = make_uint4(0, 0, 0, 0);
  }
  if (t < 2 * 64 / 4) reinterpret_cast<uint4*>(sm.groups)[t] = make_uint4(0, 0, 0, 0);
  // The bins' barrier before the length is used: it passes while the length and the row are in flight.
  const int entry = topk_length_entry(p, r);
  __syncthreads();
  const int len = topk_row_length(p, r, entry);
  if (p.row_starts != nullptr) {
    start = topk_row_start(p, r, len);
    from = aligned_start<kPer>(start);
    load(from);
  }
  {
    const Raw nan = In::nan();
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      const int s = from + (v * kThreads + t) * kPer;
      if (s < start || s + kPer > len) {
#pragma unroll
        for (int e = 0; e < kPer; ++e)
          if (s + e < start || s + e >= len) set_vector_element(x[v], e, nan);
      }
    }
  }

  // 1. Fine-bin counts and the threshold bin.
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const Raw y = vector_element(x[v], e);
      if (!In::is_nan(y)) atomicAdd(&sm.hist[0][In::fine_bin_of(y)], 1u);  // not one contended slot for a short row's tail
    }
  }
  __syncthreads();
  {  // the counts of the 64 groups of 64 fine bins (a group is 64 / kBinsPer consecutive threads' bins)
    int own = 0;
#pragma unroll
    for (int j = 0; j < kBinsPer / 4; ++j) {
      const uint4 a = reinterpret_cast<const uint4*>(sm.hist[0])[kBinsPer / 4 * t + j];
      own += static_cast<int>(a.x + a.y + a.z + a.w);
    }
    constexpr int kGroupThreads = 64 / kBinsPer;
#pragma unroll
    for (int d = 1; d < kGroupThreads; d <<= 1) own += __shfl_xor_sync(0xffffffffu, own, d);
    if (t % kGroupThreads == 0) sm.groups[0][t / kGroupThreads] = static_cast<unsigned int>(own);
  }
  __syncthreads();
  const FoundBin f = find_in_groups(sm.hist[0], sm.groups[0], p.k);
  if (t == 0) {  // the row report, now: its values need no registers later
    int* out = p.report + static_cast<long long>(r) * kTopkReportInts;
    const bool found = f.bin < kTopkFineBins;
    const uint4 group = found ? reinterpret_cast<const uint4*>(sm.hist[0])[f.bin >> 2] : make_uint4(0, 0, 0, 0);
    out[0] = 0;                                              // counted here
    out[1] = found ? f.bin >> 2 : kTopkSelectorBins;         // its selector bin
    out[2] = static_cast<int>(group.x + group.y + group.z + group.w);
    out[3] = found && f.count > kTopkResidentCandidates ? 1 : 0;  // what the resident selector reports
  }

  // 2. The threshold bin as keys [lo, hi), narrowed by 12-bit digits while more keys are in it than
  // needed and it holds more than one key. Keys >= hi win; of [lo, hi), all (all_in) or the first
  // `need` by column (a single key).
  ThresholdKeys th = threshold_keys_of_fine_bin<In>(f, p.k, kTopkFineBins);
  int round = 1;
#pragma unroll 1
  while (th.count > th.need && th.hi - th.lo > 1) {
    unsigned int* counts = sm.hist[round & 1];
    unsigned int* groups = sm.groups[round & 1];
    if (round > 1) {  // about 1 % of randn rows: its buffers zeroed once every warp has read them
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kBinsPer / 4; ++j) reinterpret_cast<uint4*>(counts)[kBinsPer / 4 * t + j] = make_uint4(0, 0, 0, 0);
      if (t < 64 / 4) reinterpret_cast<uint4*>(groups)[t] = make_uint4(0, 0, 0, 0);
      __syncthreads();
    }
    const int shift = digit_shift<kRegisterDigitBits>(th.lo, th.hi);
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const Raw y = vector_element(x[v], e);
        const unsigned int key = In::key(y);
        if (!In::is_nan(y) && key >= th.lo && key < th.hi) {
          const int digit = kDigits - 1 - static_cast<int>((key - th.lo) >> shift);  // best first
          atomicAdd(&counts[digit], 1u);
          atomicAdd(&groups[digit >> 6], 1u);
        }
      }
    }
    __syncthreads();
    const FoundBin g = find_in_groups(counts, groups, th.need);
    narrow_to_digit<kDigits>(th, g, shift);
    ++round;
  }
  const bool all_in = th.count == th.need;  // block-uniform

  // 3. Which columns win, per vector a bit mask; placed by one scan of packed per-vector counts.
  // Bit e of mask[v]: element e of vector v has a key >= bound, compared as values (a float compare;
  // NaN never passes).
  auto at_least = [&](unsigned int bound, unsigned int(&mask)[kVec]) {
    const float at = bound_value<In>(bound);
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      mask[v] = 0;
#pragma unroll
      for (int e = 0; e < kPer; ++e) mask[v] |= In::value(vector_element(x[v], e)) >= at ? 1u << e : 0u;
    }
  };
  unsigned int win[kVec];
  at_least(all_in ? th.lo : th.hi, win);
  auto packed_counts = [&](const unsigned int(&m)[kVec]) {
    Packed w = 0;
#pragma unroll
    for (int v = 0; v < kVec; ++v) w |= static_cast<Packed>(__popc(m[v])) << (16 * v);
    return w;
  };
  // Field v of `before`: the columns of vector v of the threads before this one; the vectors before v
  // come first (field sums of `total`).
  auto position_base = [&](Packed before, Packed total, int(&base)[kVec]) {
    int offset = 0;
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      base[v] = offset + static_cast<int>((before >> (16 * v)) & 0xffffu);
      offset += static_cast<int>((total >> (16 * v)) & 0xffffu);
    }
    return offset;
  };
  if (!all_in) {  // only the first `need` columns of the single key lo win
    unsigned int tie[kVec];
    at_least(th.lo, tie);
#pragma unroll
    for (int v = 0; v < kVec; ++v) tie[v] &= ~win[v];
    Packed total;
    const Packed before = BlockScan<kThreads>::exclusive(packed_counts(tie), sm.scan, total);
    int base[kVec];
    position_base(before, total, base);
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      const int keep = min(max(th.need - base[v], 0), __popc(tie[v]));  // the lowest `keep` bits of tie[v]
      unsigned int m = tie[v];
      for (int i = 0; i < keep; ++i) m &= m - 1;
      win[v] |= tie[v] & ~m;
    }
  }
  Packed total;
  const Packed before = BlockScan<kThreads>::exclusive_last(packed_counts(win), sm.scan, total);  // sm.scan's last use
  int base[kVec];
  const int selected = position_base(before, total, base);
  const int k = p.k;
  int* indices = p.indices + static_cast<long long>(r) * k;
  float* values = p.values != nullptr ? p.values + static_cast<long long>(r) * k : nullptr;
  // Where an index is its column (decode rows: no window-relative, DCP or slot-table mapping) and no
  // values are asked for, each element's store is predicated on its bit, unrolled: a few instructions a
  // winner. The general loop maps every winner through output_index, whose mode branches and parameter
  // loads run per winner; with every warp of the CTA in this phase at once, its instructions are what the
  // write-out costs (about a fifth of an 8K row's cycles).
  if (values == nullptr && !p.relative && p.dcp_ranks <= 1 && p.slot_table == nullptr) {  // block-uniform
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      int at = base[v];
      const int s = from + (v * kThreads + t) * kPer;
#pragma unroll
      for (int e = 0; e < kPer; ++e)
        if ((win[v] >> e) & 1u) indices[at++] = s + e;
    }
  } else {
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      int at = base[v];
      const int s = from + (v * kThreads + t) * kPer;
      for (unsigned int m = win[v]; m != 0; m &= m - 1, ++at) {  // e is not a constant: selects, not local memory
        const int e = __ffs(static_cast<int>(m)) - 1;
        indices[at] = output_index(p, r, s + e, start);
        if (values != nullptr) values[at] = In::value(vector_element(x[v], e));
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
