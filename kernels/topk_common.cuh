#pragma once
// Building blocks of the exact top-k selector (contract §4), shared by its kernels: the stored dtype's
// order-preserving keys, the threshold search over bin counts, the radix refinement of the threshold bin
// and the output stage. The select passes themselves live in the selectors (topk_split.cuh,
// topk_filter.cuh, topk_resident.cuh, topk_register.cuh).
#include "block_scan.cuh"
#include "coarse_bins.hpp"
#include "dcp.hpp"
#include "numeric.cuh"
#include "topk_params.cuh"
#include "topk_selector_bins.cuh"

namespace flash_indexer {
namespace kernels {

// A logit as stored: NaN test, the widened value (what the coarse bin and the values output use) and
// an order-preserving unsigned key (larger score, larger key; -0 and +0 share a key).
template <LogitsOut kIn>
struct TopkInput;

template <>
struct TopkInput<LogitsOut::f32> {
  using Raw = float;
  __device__ __forceinline__ static Raw load(const void* row, int s) { return __ldg(static_cast<const float*>(row) + s); }
  __device__ __forceinline__ static bool is_nan(Raw x) { return x != x; }
  __device__ __forceinline__ static float value(Raw x) { return x; }
  // x + 0 turns -0 into +0 (and leaves every other value, NaN aside, as it is): three instructions.
  __device__ __forceinline__ static unsigned int key(Raw x) {
    const unsigned int b = float_bits(x + 0.0f);
    return b ^ (static_cast<unsigned int>(static_cast<int>(b) >> 31) | 0x80000000u);
  }
  __device__ __forceinline__ static int bin(Raw x) { return coarse_bin(x); }
  __device__ __forceinline__ static int selector_bin(unsigned int key) { return selector_bin_of_key32(key); }
  __device__ __forceinline__ static int selector_bin_of(Raw x) { return selector_bin_of_bits32(float_bits(x)); }
  __device__ __forceinline__ static unsigned int lowest_key_of_selector_bin(int b) { return lowest_key32_of_selector_bin(b); }
  __device__ __forceinline__ static int fine_bin_of(Raw x) { return fine_bin_of_bits32(float_bits(x)); }
  __device__ __forceinline__ static unsigned int lowest_key_of_fine_bin(int b) { return lowest_key32_of_fine_bin(b); }
  // Fills the columns past a segment's end, so they drop out wherever NaN does.
  __device__ __forceinline__ static Raw nan() { return quiet_nan(); }
  __device__ __forceinline__ static Raw from_bits(unsigned int b) { return float_from_bits(b); }
  static constexpr unsigned int kMinKey = 0x007fffffu;  // key(-inf); smaller keys are NaNs
  static constexpr unsigned int kMaxKey = 0xff800000u;  // key(+inf); larger keys are NaNs
  __device__ __forceinline__ static Raw from_key(unsigned int k) {
    return float_from_bits((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
  }
};

template <LogitsOut kIn>
struct TopkInput16 {
  using Raw = unsigned short;
  static constexpr unsigned int kInfinity = kIn == LogitsOut::f16 ? 0x7c00u : 0x7f80u;
  __device__ __forceinline__ static Raw load(const void* row, int s) {
    return __ldg(static_cast<const unsigned short*>(row) + s);
  }
  __device__ __forceinline__ static bool is_nan(Raw x) { return (x & 0x7fffu) > kInfinity; }
  __device__ __forceinline__ static float value(Raw x) {
    return kIn == LogitsOut::f16 ? f16_bits_to_float(x) : bf16_bits_to_float(x);
  }
  __device__ __forceinline__ static unsigned int key(Raw x) {
    unsigned int b = x;
    if ((b & 0x7fffu) == 0u) b = 0u;
    return b ^ ((b & 0x8000u) ? 0xffffu : 0x8000u);
  }
  __device__ __forceinline__ static int bin(Raw x) {
    if (kIn == LogitsOut::f16) {
      // Below 16 the bin is the FP16 exponent and top mantissa bits, read straight off the stored bits
      // (what coarse_bin computes after its round trip through FP32).
      const int code = static_cast<int>((x & 0x7fffu) >> 6);
      if (code < 304) return ((x & 0x8000u) != 0 && (x & 0x7fffu) != 0) ? 512 + code : 511 - code;
    }
    return coarse_bin(value(x));
  }
  __device__ __forceinline__ static int selector_bin(unsigned int key) {
    return kIn == LogitsOut::f16 ? selector_bin_of_key16(key) : selector_bin_of_key32(key << 16);
  }
  __device__ __forceinline__ static unsigned int lowest_key_of_selector_bin(int b) {
    return kIn == LogitsOut::f16 ? lowest_key16_of_selector_bin(b) : lowest_key32_of_selector_bin(b) >> 16;
  }
  __device__ __forceinline__ static int selector_bin_of(Raw x) {
    return kIn == LogitsOut::f16 ? selector_bin_of_bits16(x) : selector_bin_of_bits32(static_cast<unsigned int>(x) << 16);
  }
  __device__ __forceinline__ static int fine_bin_of(Raw x) {
    return kIn == LogitsOut::f16 ? fine_bin_of_bits16(x) : fine_bin_of_bits32(static_cast<unsigned int>(x) << 16);
  }
  __device__ __forceinline__ static unsigned int lowest_key_of_fine_bin(int b) {
    return kIn == LogitsOut::f16 ? lowest_key16_of_fine_bin(b) : lowest_key32_of_fine_bin(b) >> 16;
  }
  __device__ __forceinline__ static Raw nan() { return kIn == LogitsOut::f16 ? 0x7e00u : 0x7fc0u; }
  __device__ __forceinline__ static Raw from_bits(unsigned int b) { return static_cast<Raw>(b & 0xffffu); }
  static constexpr unsigned int kMinKey = ~(kInfinity | 0x8000u) & 0xffffu;  // key(-inf)
  static constexpr unsigned int kMaxKey = kInfinity | 0x8000u;               // key(+inf)
  __device__ __forceinline__ static Raw from_key(unsigned int k) {
    return static_cast<Raw>(((k & 0x8000u) ? (k ^ 0x8000u) : ~k) & 0xffffu);
  }
};

template <>
struct TopkInput<LogitsOut::f16> : TopkInput16<LogitsOut::f16> {};
template <>
struct TopkInput<LogitsOut::bf16> : TopkInput16<LogitsOut::bf16> {};

// The largest score of a vector (NaN only if every element is NaN): packed 16-bit max for FP16 and
// BF16 (PTX max without .NaN returns the other operand of a NaN), a chain of fmaxf for FP32.
template <LogitsOut kIn>
__device__ __forceinline__ float vector_max(const uint4& v) {
  using In = TopkInput<kIn>;
  if constexpr (kIn == LogitsOut::f32) {
    return fmaxf(fmaxf(__uint_as_float(v.x), __uint_as_float(v.y)), fmaxf(__uint_as_float(v.z), __uint_as_float(v.w)));
  } else {
    unsigned int a, b, m;
    if constexpr (kIn == LogitsOut::f16) {
      asm("max.f16x2 %0, %1, %2;" : "=r"(a) : "r"(v.x), "r"(v.y));
      asm("max.f16x2 %0, %1, %2;" : "=r"(b) : "r"(v.z), "r"(v.w));
      asm("max.f16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
    } else {
      asm("max.bf16x2 %0, %1, %2;" : "=r"(a) : "r"(v.x), "r"(v.y));
      asm("max.bf16x2 %0, %1, %2;" : "=r"(b) : "r"(v.z), "r"(v.w));
      asm("max.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
    }
    return fmaxf(In::value(In::from_bits(m & 0xffffu)), In::value(In::from_bits(m >> 16)));
  }
}

// The fine (selector) bin of x, or the slot past the bins for NaN. The bin is computed first so that the
// choice is a select: `is_nan(x) ? slot : fine_bin_of(x)` compiles to a branch around the bin
// arithmetic (BSSY / BRA / BSYNC, three instructions more per logit of a count pass).
template <class In>
__device__ __forceinline__ int fine_bin_or_nan_slot(typename In::Raw x) {
  const int bin = In::fine_bin_of(x);
  return In::is_nan(x) ? kTopkFineBins : bin;
}
template <class In>
__device__ __forceinline__ int selector_bin_or_nan_slot(typename In::Raw x) {
  const int bin = In::selector_bin_of(x);
  return In::is_nan(x) ? kTopkSelectorBins : bin;
}

// The split selector's static shared memory. Its selected columns (bins above T, then bin T's winners:
// up to k) follow the staging ring in dynamic shared memory, sized per call, so that k <= 2048 keeps two
// CTAs per SM (a static out[kMaxTopk] would not fit twice).
struct TopkSmem {
  // Bin counts of this CTA's columns (selector bins, contract bins never: those come from global
  // memory); later the narrowing and refinement digit counts.
  int hist[kCoarseBins];
  union {
    struct {
      int candidate_index[kTopkCandidates];
      unsigned int candidate_key[kTopkCandidates];
    };
    int row_hist[kCoarseBins];  // the cluster's summed counts (read before any candidate is kept)
  };
  long long scan[kTopkThreads / 32];
  long long found[3];  // threshold search result: bin, count above it, count in it
  alignas(
      16) unsigned int warp_runs[2][kTopkThreads / 32];  // per-warp select counts of a tile (two, so a tile needs one barrier)
  int published[4];  // this CTA's select counts, read by the cluster: valid, above, candidates, candidates kept
  unsigned int key_bounds[2];  // lowest key of bins <= T, of bins <= T - 1 (KeyBounds)
  unsigned int kth_key;        // the k-th score's key, for the report of a sampled row (atomicMin)
};
static_assert(kTopkSelectorBins == kCoarseBins, "selector and contract counts share sm.hist");

// A row's live length from its lengths entry's value `len` (its MTP offset applied): clamped to [0,
// width], under DCP this rank's share of it.
__device__ __forceinline__ int clamped_row_length(const TopkParams& p, long long len) {
  if (len < 0) len = 0;
  if (p.dcp_ranks > 1) len = dcp_local_length(static_cast<int>(len), DcpLayout{p.dcp_ranks, p.dcp_rank, p.dcp_interleave});
  if (len > p.width) len = p.width;
  return static_cast<int>(len);
}

// Row r's live length (contract §1; under DCP this rank's share of it), clamped to [0, width].
__device__ __forceinline__ int topk_row_length(const TopkParams& p, int r) {
  return clamped_row_length(p, p.lengths_next_n == 0 ? p.lengths[r]
                                                     : static_cast<long long>(p.lengths[r / p.lengths_next_n]) -
                                                           p.lengths_next_n + r % p.lengths_next_n + 1);
}

// The same in two steps, so that a kernel can issue the load early and use it after a barrier: the
// lengths entry of row r, then the length from it. (The one-step form above stays as it is: written as
// these two, the resident selector's clusters of 16 spilled 8 bytes more.)
__device__ __forceinline__ int topk_length_entry(const TopkParams& p, int r) {
  return p.lengths_next_n == 0 ? p.lengths[r] : p.lengths[r / p.lengths_next_n];
}
__device__ __forceinline__ int topk_row_length(const TopkParams& p, int r, int entry) {
  return clamped_row_length(
      p, p.lengths_next_n == 0 ? entry : static_cast<long long>(entry) - p.lengths_next_n + r % p.lengths_next_n + 1);
}

// Counts saturate at INT_MAX (only a broken given histogram sums past it; no real count equals it, as
// a row has fewer than 2^31 columns), so the whole result stays in 32-bit registers.
struct Threshold {
  int bin;       // 0..kBins-1; kBins: fewer than k counted, every one is taken
  int above;     // count in bins before `bin`
  int count;     // count in `bin`
  int total;
  bool negative;  // some count < 0 (only a broken given histogram)
};
__device__ __forceinline__ int saturated(long long x) { return x > 0x7fffffffll ? 0x7fffffff : static_cast<int>(x); }

// Finds the bin where the running count (bin 0 first) reaches k, over kBins counts in shared or global
// memory. `check_negative`: the counts may be negative (a given histogram), which gives bin kBins and
// `negative`. Every thread of the block must call it. sm.found is free again once another barrier has
// passed (the next writer of it is this function, after its scan's barriers).
template <int kBins, class Smem>
__device__ Threshold find_threshold(const int* counts, long long k, bool check_negative, Smem& sm) {
  using Scan = BlockScan<kTopkThreads>;
  constexpr int kPer = kBins / kTopkThreads;
  static_assert(kPer * kTopkThreads == kBins, "whole bins per thread");
  long long c[kPer];
  long long own = 0;
  bool negative = false;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    c[i] = counts[threadIdx.x * kPer + i];
    negative |= c[i] < 0;
    own += c[i];
  }
  if (check_negative) negative = __syncthreads_or(negative) != 0;  // block-uniform branch
  long long total;
  long long before = Scan::exclusive(own, sm.scan, total);
  if (negative || total < k) {
    if (threadIdx.x == 0) {
      sm.found[0] = kBins;
      sm.found[1] = total;
      sm.found[2] = 0;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (before < k && k <= before + c[i]) {  // counts are >= 0, so exactly one bin matches
        sm.found[0] = threadIdx.x * kPer + i;
        sm.found[1] = before;
        sm.found[2] = c[i];
      }
      before += c[i];
    }
  }
  __syncthreads();
  Threshold t;
  t.bin = static_cast<int>(sm.found[0]);
  t.above = saturated(sm.found[1]);
  t.count = saturated(sm.found[2]);
  t.total = saturated(total);
  t.negative = negative;
  return t;
}

// The smallest key in [kMinKey, kMaxKey] whose value has a coarse bin <= b (bins fall as keys rise).
// Warp-collective: 32 probes per step, so a 32-bit key space takes 7 steps.
template <class In>
__device__ unsigned int lowest_key_of_bins_to(int b) {
  const int lane = threadIdx.x & 31;
  unsigned long long lo = In::kMinKey, hi = In::kMaxKey;  // the answer is in [lo, hi]; bin(hi) = 0 <= b
  while (lo < hi) {
    const unsigned long long step = (hi - lo + 31) / 32;
    const unsigned long long probe = lo + step * lane;
    const bool ok = probe >= hi || In::bin(In::from_key(static_cast<unsigned int>(probe))) <= b;
    const unsigned int mask = __ballot_sync(0xffffffffu, ok);
    if (mask == 0) {
      lo += step * 31 + 1;
    } else {
      const int first = __ffs(mask) - 1;
      if (first == 0) {
        hi = lo;
      } else {
        hi = min(hi, lo + step * first);
        lo += step * (first - 1) + 1;
      }
    }
  }
  return static_cast<unsigned int>(lo);
}

// Threshold bin T as a key interval, so a select pass compares keys instead of computing bins: a
// non-NaN logit is in a bin before T iff key >= above, in bin T iff candidate <= key < above.
struct KeyBounds {
  unsigned int above;
  unsigned int candidate;
};

// A key bound as a value: for a score x, key(x) >= b iff x >= bound_value(b), -0 and +0 alike, and NaN
// is never >= anything. A bound past +inf's key reads as NaN (nothing qualifies); one at or below
// -inf's key as -inf (every score does). So a logit costs two float compares.
template <class In>
__device__ __forceinline__ float bound_value(unsigned int b) {
  if (b > In::kMaxKey) return __int_as_float(0x7fc00000);
  return b <= In::kMinKey ? -__int_as_float(0x7f800000) : In::value(In::from_key(b));
}

// For a contract coarse bin (§3): two warps search the key -> bin map.
template <class In, class Smem>
__device__ KeyBounds coarse_key_bounds(int bin_t, Smem& sm) {
  const int warp = threadIdx.x >> 5;
  if (warp == 0) {
    const unsigned int v = bin_t == 0 ? In::kMaxKey + 1 : lowest_key_of_bins_to<In>(bin_t - 1);
    if ((threadIdx.x & 31) == 0) sm.key_bounds[1] = v;
  } else if (warp == 1) {
    const unsigned int v = bin_t >= kCoarseBins ? 0u : lowest_key_of_bins_to<In>(bin_t);
    if ((threadIdx.x & 31) == 0) sm.key_bounds[0] = v;
  }
  __syncthreads();
  KeyBounds k;
  k.above = sm.key_bounds[1];
  k.candidate = bin_t >= kCoarseBins ? k.above : sm.key_bounds[0];
  __syncthreads();
  return k;
}

// For a selector bin: closed-form, no barrier.
template <class In>
__device__ __forceinline__ KeyBounds selector_key_bounds(int bin_t) {
  KeyBounds k;
  k.above = bin_t == 0 ? In::kMaxKey + 1 : In::lowest_key_of_selector_bin(bin_t - 1);
  k.candidate = bin_t >= kTopkSelectorBins ? k.above : In::lowest_key_of_selector_bin(bin_t);
  return k;
}

// A sampled cutoff: the key at or above which about `want` sampled logits lie, where the running count
// (best bin first) reaches `want` in selector bin `bin`, with `above` counted before it and `count` in it.
// Placed inside the bin by linear interpolation from its top (keys are linear in the value within a
// selector bin).
template <class In>
__device__ __forceinline__ unsigned int interpolated_selector_key(int bin, int above, int count, int want) {
  const unsigned long long lo = In::lowest_key_of_selector_bin(bin);
  const unsigned long long hi = bin == 0 ? In::kMaxKey + 1ull : In::lowest_key_of_selector_bin(bin - 1);
  const unsigned long long share =
      static_cast<unsigned long long>(static_cast<float>(want - above) / static_cast<float>(count) * static_cast<float>(hi - lo));
  return static_cast<unsigned int>(max(lo, hi - min(share + 1, hi - lo)));
}

// Chooses `need` of the first `size` (1..kTopkCandidates) candidates in shared memory (largest keys;
// equal keys by ascending position, which is ascending column) and writes them in candidate order to
// out[first ...]. Every candidate's key is in [lo, hi). Each round counts kRefineBits-bit digits of
// (key - lo) over the candidates still in the running and narrows [lo, hi) to the digit where the count
// reaches what is still needed. It stops when the interval holds one key, or when every candidate in it
// is needed (the usual end after one round: a selector bin's few hundred keys spread over 1024 digits).
constexpr int kRefineBits = 10;  // 1024 digits: sm.hist
__device__ void refine(int size, int need, int first, unsigned long long lo, unsigned long long hi, int* out, TopkSmem& sm) {
  using Scan = BlockScan<kTopkThreads>;
  constexpr int kDigits = 1 << kRefineBits;
  static_assert(kDigits <= kCoarseBins, "the digit counts live in sm.hist");
  int ties = need;  // how many of the candidates with a key in [lo, hi) are still to be taken
#pragma unroll 1
  while (hi - lo > 1) {
    const int shift = max(0, 64 - __clzll(static_cast<long long>(hi - 1 - lo)) - kRefineBits);
    for (int i = threadIdx.x; i < kDigits; i += kTopkThreads) sm.hist[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < size; i += kTopkThreads) {
      const unsigned long long key = sm.candidate_key[i];
      if (key >= lo && key < hi) atomicAdd(&sm.hist[kDigits - 1 - static_cast<int>((key - lo) >> shift)], 1);  // best first
    }
    __syncthreads();
    const Threshold d = find_threshold<kDigits>(sm.hist, ties, false, sm);
    const unsigned long long digit = static_cast<unsigned long long>(kDigits - 1 - d.bin);
    ties -= static_cast<int>(d.above);
    lo += digit << shift;
    hi = min(hi, lo + (1ull << shift));
    if (d.count == ties) break;
  }
  // Keys >= hi are all taken (need - ties of them); of the keys in [lo, hi), the first `ties`. Each
  // thread takes a run of consecutive candidates, as few as `size` allows: one pass counts, the scan
  // places the runs, a second pass writes. The k-th key is the smallest key in [lo, hi) (sm.kth_key).
  const int per = (size + kTopkThreads - 1) / kTopkThreads;
  const int from = min(size, static_cast<int>(threadIdx.x) * per), to = min(size, from + per);
  int greater = 0, equal = 0;
  unsigned int smallest = ~0u;
  for (int i = from; i < to; ++i) {
    const unsigned int key = sm.candidate_key[i];
    greater += key >= hi;
    const bool in = key >= lo && key < hi;
    equal += in;
    if (in) smallest = min(smallest, key);
  }
  if (smallest != ~0u) atomicMin(&sm.kth_key, smallest);
  int total;
  const int before = Scan::exclusive(greater | (equal << 16), reinterpret_cast<int*>(sm.scan), total);
  int g = before & 0xffff;
  int q = before >> 16;
  for (int i = from; i < to; ++i) {
    const unsigned int key = sm.candidate_key[i];
    if (key >= hi) {
      out[first + g + min(q, ties)] = sm.candidate_index[i];
      ++g;
    } else if (key >= lo) {
      if (q < ties) out[first + g + q] = sm.candidate_index[i];
      ++q;
    }
  }
  __syncthreads();
}

// Number of elements of the ascending run a[0, n) below x.
__device__ __forceinline__ int count_below(const int* a, int n, int x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (a[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Row r's window start (contract §4 with row_starts): clamped to [0, len], so a start at or past the
// row's end leaves an empty window.
__device__ __forceinline__ int topk_row_start(const TopkParams& p, int r, int len) {
  return p.row_starts == nullptr ? 0 : min(max(p.row_starts[r], 0), len);
}

// The first column of the aligned vector of kPer logits that holds column `start`.
template <int kPer>
__device__ __forceinline__ int aligned_start(int start) {
  return start & ~(kPer - 1);
}

// The segment of row r's window [start, len) that CTA `rank` of the kCluster sharing the row takes:
// whole vectors of kPer logits from the one holding `start` (at `from`), per_cta columns per CTA in
// rank order, [begin, end) clamped to the row.
struct TopkSegment {
  int start, from, begin, end;
  long long per_cta;
};
template <int kPer, int kCluster>
__device__ __forceinline__ TopkSegment topk_segment(const TopkParams& p, int r, int len, int rank) {
  TopkSegment g;
  g.start = topk_row_start(p, r, len);
  g.from = aligned_start<kPer>(g.start);
  g.per_cta = ((static_cast<long long>(len - g.from) + kCluster - 1) / kCluster + kPer - 1) / kPer * kPer;
  g.begin = static_cast<int>(min(static_cast<long long>(len), g.from + rank * g.per_cta));
  g.end = static_cast<int>(min(static_cast<long long>(len), g.begin + g.per_cta));
  return g;
}

// What the output holds for a selected column: the column (relative to the window `start` with
// p.relative), its slot through the table (blocks of 1 << p.slot_block_shift), or under DCP its global
// position (the host allows neither of the others with DCP). The register selector's write-out skips it where none of
// the three modes is on (topk_register.cuh): a new mode must be added to that condition too.
__device__ __forceinline__ int output_index(const TopkParams& p, int r, int column, int start) {
  if (p.relative) return column - start;
  if (p.dcp_ranks > 1) return dcp_global_position(column, DcpLayout{p.dcp_ranks, p.dcp_rank, p.dcp_interleave});
  if (p.slot_table == nullptr) return column;
  const int block = column >> p.slot_block_shift;
  if (block >= p.slot_table_blocks) return -1;
  const long long b = r / p.slot_rows_per_request;
  return p.slot_table[b * p.slot_table_stride + block] * (1 << p.slot_block_shift) + (column & ((1 << p.slot_block_shift) - 1));
}

// The output stage: out holds two ascending runs of columns, [0, above) (bins before T) and
// [above, selected) (bin T's winners), merged into ascending column order. Then the row report.
template <class In>
__device__ void write_output(const TopkParams& p, int r, const void* row, int start, int above, int selected, const int* out,
                             const int (&report)[kTopkReportInts]) {
  const int k = p.k;
  int* indices = p.indices + static_cast<long long>(r) * k;
  float* values = p.values != nullptr ? p.values + static_cast<long long>(r) * k : nullptr;
  for (int i = threadIdx.x; i < k; i += kTopkThreads) {
    if (i >= selected) {
      indices[i] = -1;
      if (values != nullptr) values[i] = negative_infinity();
      continue;
    }
    // Always merged, `sorted` or not: the paths (per split, sampled or counted) list the winners in
    // different runs, and every path must give the same bytes.
    const int column = out[i];
    const int position =
        i < above ? i + count_below(out + above, selected - above, column) : (i - above) + count_below(out, above, column);
    indices[position] = output_index(p, r, column, start);
    if (values != nullptr) values[position] = In::value(In::load(row, column));
  }
  if (threadIdx.x == 0) {  // one thread, constant indices: the report stays in registers
    int* out = p.report + static_cast<long long>(r) * kTopkReportInts;
#pragma unroll
    for (int i = 0; i < kTopkReportInts; ++i) out[i] = report[i];
  }
}

}  // namespace kernels
}  // namespace flash_indexer
