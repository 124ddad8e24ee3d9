#pragma once
// Exact top-k of one logits row per CTA (CONTRACT 4): a radix select, coarse bins first, then the
// exact key bits of the stored dtype. Portable (sm_80 or newer); the fast H200 selector comes later.
//
//   1. Coarse counts: the row's 1024-bin histogram (CONTRACT 3), either counted here (one pass) or taken
//      from the logits kernel. The threshold bin T is the bin where the running count reaches k.
//   2. Select pass: columns in bins above T go straight to the output buffer; bin T's columns go to a
//      candidate buffer. Both keep ascending column order (positions come from block-wide prefix sums,
//      never from atomic arrival), so the output bytes are deterministic. The pass also recounts what
//      the histogram promised; if a given histogram does not add up, the row starts over from step 1
//      with its own counts.
//   3. Refinement of bin T on the remaining key bits, 8 bits per round, to the exact k-th key; equal
//      keys go to the lower columns. A bin T larger than the candidate buffer is refined by reading
//      the row again each round instead (never truncated).
#include "block_scan.cuh"
#include "coarse_bins.hpp"
#include "numeric.cuh"
#include "topk_params.cuh"

namespace flash_indexer {
namespace kernels {

// A logit as stored: NaN test, the widened value (what the coarse bin and the values output use) and
// an order-preserving unsigned key (larger score, larger key; -0 and +0 share a key).
template <LogitsOut kIn>
struct TopkInput;

template <>
struct TopkInput<LogitsOut::f32> {
  using Raw = float;
  static constexpr int kKeyBits = 32;
  __device__ __forceinline__ static Raw load(const void* row, int s) { return __ldg(static_cast<const float*>(row) + s); }
  __device__ __forceinline__ static bool is_nan(Raw x) { return x != x; }
  __device__ __forceinline__ static float value(Raw x) { return x; }
  __device__ __forceinline__ static unsigned int key(Raw x) {
    unsigned int b = float_bits(x);
    if ((b << 1) == 0u) b = 0u;
    return b ^ ((b >> 31) ? 0xffffffffu : 0x80000000u);
  }
};

template <LogitsOut kIn>
struct TopkInput16 {
  using Raw = unsigned short;
  static constexpr int kKeyBits = 16;
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
};

template <>
struct TopkInput<LogitsOut::f16> : TopkInput16<LogitsOut::f16> {};
template <>
struct TopkInput<LogitsOut::bf16> : TopkInput16<LogitsOut::bf16> {};

// Elements per thread per chunk: 16 bytes of logits.
template <LogitsOut kIn>
constexpr int topk_per_thread() {
  return kIn == LogitsOut::f32 ? 4 : 8;
}

struct TopkSmem {
  int out[kMaxTopk];                   // selected columns: bins above T, then bin T's winners
  int hist[kCoarseBins];               // coarse counts, then 256-bin digit counts
  int candidate_index[kTopkCandidates];
  unsigned int candidate_key[kTopkCandidates];
  long long scan[kTopkThreads / 32 + 1];
  long long found[3];                  // threshold search result: bin, count above it, total
};

// Row r's live length (CONTRACT 1), clamped to [0, width].
__device__ __forceinline__ int topk_row_length(const TopkParams& p, int r) {
  long long len = p.lengths_next_n == 0
                      ? p.lengths[r]
                      : static_cast<long long>(p.lengths[r / p.lengths_next_n]) - p.lengths_next_n + r % p.lengths_next_n + 1;
  if (len < 0) len = 0;
  if (len > p.width) len = p.width;
  return static_cast<int>(len);
}

struct Threshold {
  int bin;          // 0..1023; 1024: fewer than k selectable, every one is taken
  long long above;  // count in bins before `bin`
  long long count;  // count in `bin`
  long long total;
  bool negative;    // some count < 0 (only a broken given histogram)
};

// Finds the coarse bin where the running count (bin 0 first) reaches k. `counts` is in shared or
// global memory; every thread of the block must call it.
__device__ Threshold find_coarse_threshold(const int* counts, int k, TopkSmem& sm) {
  using Scan = BlockScan<kTopkThreads>;
  constexpr int kPer = kCoarseBins / kTopkThreads;
  long long c[kPer];
  long long own = 0;
  bool negative = false;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    c[i] = counts[threadIdx.x * kPer + i];
    negative |= c[i] < 0;
    own += c[i];
  }
  negative = __syncthreads_or(negative) != 0;
  long long total;
  long long before = Scan::exclusive(own, sm.scan, total);
  if (threadIdx.x == 0) {
    sm.found[0] = kCoarseBins;
    sm.found[1] = total;
    sm.found[2] = 0;
  }
  __syncthreads();
  if (!negative) {
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
  t.above = sm.found[1];
  t.count = sm.found[2];
  t.total = total;
  t.negative = negative;
  __syncthreads();
  return t;
}

// The digit (0..255, larger first) of sm.hist where the running count reaches `need`, and the count
// of larger digits.
__device__ void find_digit(int need, TopkSmem& sm, int& digit, int& above) {
  using Scan = BlockScan<kTopkThreads>;
  const int count = threadIdx.x < 256 ? sm.hist[255 - threadIdx.x] : 0;
  long long total;
  const long long before = Scan::exclusive(static_cast<long long>(count), sm.scan, total);
  if (threadIdx.x < 256 && before < need && need <= before + count) {
    sm.found[0] = 255 - threadIdx.x;
    sm.found[1] = before;
  }
  __syncthreads();
  digit = static_cast<int>(sm.found[0]);
  above = static_cast<int>(sm.found[1]);
  __syncthreads();
}

// Candidate sources for the refinement: the shared-memory buffer, or the row itself filtered to bin T.
struct SmemCandidates {
  const TopkSmem* sm;
  int size;
  __device__ __forceinline__ bool get(int i, unsigned int& key, int& column) const {
    key = sm->candidate_key[i];
    column = sm->candidate_index[i];
    return true;
  }
};

template <class In>
struct RowCandidates {
  const void* row;
  int size;  // the row length
  int bin;
  __device__ __forceinline__ bool get(int i, unsigned int& key, int& column) const {
    const typename In::Raw x = In::load(row, i);
    if (In::is_nan(x) || coarse_bin(In::value(x)) != bin) return false;
    key = In::key(x);
    column = i;
    return true;
  }
};

// Chooses `need` candidates of `source` (largest keys; equal keys by ascending position, which is
// ascending column) and writes them in source order to sm.out[first ...].
template <int kPer, int kKeyBits, class Source>
__device__ void refine(const Source& source, int need, int first, TopkSmem& sm) {
  using Scan = BlockScan<kTopkThreads>;
  constexpr int kChunk = kTopkThreads * kPer;
  unsigned int prefix = 0, mask = 0;
  int ties = need;  // how many of the keys equal to `prefix` are still to be taken
#pragma unroll 1
  for (int shift = kKeyBits - 8; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kTopkThreads) sm.hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < source.size; base += kChunk) {
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int i = base + threadIdx.x * kPer + e;
        unsigned int key;
        int column;
        if (i < source.size && source.get(i, key, column) && (key & mask) == prefix)
          atomicAdd(&sm.hist[(key >> shift) & 0xffu], 1);
      }
    }
    __syncthreads();
    int digit, above;
    find_digit(ties, sm, digit, above);
    ties -= above;
    prefix |= static_cast<unsigned int>(digit) << shift;
    mask |= 0xffu << shift;
  }
  // Keys above `prefix` are all taken (need - ties of them); of the keys equal to it, the first `ties`.
  int greater_run = 0, equal_run = 0;
  for (int base = 0; base < source.size; base += kChunk) {
    unsigned int keys[kPer];
    int columns[kPer];
    int greater = 0, equal = 0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int i = base + threadIdx.x * kPer + e;
      columns[e] = -1;
      if (i < source.size && source.get(i, keys[e], columns[e])) {
        greater += keys[e] > prefix;
        equal += keys[e] == prefix;
      } else {
        columns[e] = -1;
      }
    }
    int total;
    const int before = Scan::exclusive(greater | (equal << 16), reinterpret_cast<int*>(sm.scan), total);
    int g = greater_run + (before & 0xffff);
    int q = equal_run + (before >> 16);
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      if (columns[e] < 0) continue;
      if (keys[e] > prefix) {
        sm.out[first + g + min(q, ties)] = columns[e];
        ++g;
      } else if (keys[e] == prefix) {
        if (q < ties) sm.out[first + g + q] = columns[e];
        ++q;
      }
    }
    greater_run += total & 0xffff;
    equal_run += total >> 16;
  }
  __syncthreads();
}

struct SelectCounts {
  int above;       // columns in bins before T
  int candidates;  // columns in bin T
  int valid;       // non-NaN live columns
};

// One pass over the row: bins before T to sm.out, bin T to the candidate buffer (as far as it goes),
// both in column order.
template <class In, int kPer>
__device__ SelectCounts select_pass(const void* row, int len, int bin_t, int k, TopkSmem& sm) {
  using Scan = BlockScan<kTopkThreads>;
  constexpr int kChunk = kTopkThreads * kPer;
  int above_run = 0, candidate_run = 0, valid = 0;
  for (int base = 0; base < len; base += kChunk) {
    unsigned char kind[kPer];  // 0 skip, 1 above, 2 candidate
    unsigned int keys[kPer];
    int above = 0, candidates = 0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int s = base + threadIdx.x * kPer + e;
      kind[e] = 0;
      keys[e] = 0;
      if (s < len) {
        const typename In::Raw x = In::load(row, s);
        if (!In::is_nan(x)) {
          ++valid;
          const int bin = coarse_bin(In::value(x));
          if (bin < bin_t) {
            kind[e] = 1;
            ++above;
          } else if (bin == bin_t) {
            kind[e] = 2;
            keys[e] = In::key(x);
            ++candidates;
          }
        }
      }
    }
    int total;
    const int before = Scan::exclusive(above | (candidates << 16), reinterpret_cast<int*>(sm.scan), total);
    int a = above_run + (before & 0xffff);
    int c = candidate_run + (before >> 16);
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int s = base + threadIdx.x * kPer + e;
      if (kind[e] == 1) {
        if (a < k) sm.out[a] = s;  // more than k only when a given histogram lied: detected below
        ++a;
      } else if (kind[e] == 2) {
        if (c < kTopkCandidates) {
          sm.candidate_index[c] = s;
          sm.candidate_key[c] = keys[e];
        }
        ++c;
      }
    }
    above_run += total & 0xffff;
    candidate_run += total >> 16;
  }
  SelectCounts counts;
  counts.above = above_run;
  counts.candidates = candidate_run;
  counts.valid = Scan::sum(valid, reinterpret_cast<int*>(sm.scan));
  return counts;
}

template <class In, int kPer>
__device__ void count_coarse_bins(const void* row, int len, TopkSmem& sm) {
  constexpr int kChunk = kTopkThreads * kPer;
  for (int i = threadIdx.x; i < kCoarseBins; i += kTopkThreads) sm.hist[i] = 0;
  __syncthreads();
  for (int base = 0; base < len; base += kChunk) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int s = base + threadIdx.x * kPer + e;
      if (s < len) {
        const typename In::Raw x = In::load(row, s);
        if (!In::is_nan(x)) atomicAdd(&sm.hist[coarse_bin(In::value(x))], 1);
      }
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

// What the output holds for a selected column: the column, or its physical KV slot (64-token blocks).
__device__ __forceinline__ int output_index(const TopkParams& p, int r, int column) {
  if (p.slot_table == nullptr) return column;
  const int block = column / 64;
  if (block >= p.slot_table_blocks) return -1;
  const long long b = r / p.slot_rows_per_request;
  return p.slot_table[b * p.slot_table_stride + block] * 64 + column % 64;
}

template <LogitsOut kIn>
__device__ void topk_radix(const TopkParams& p) {
  using In = TopkInput<kIn>;
  constexpr int kPer = topk_per_thread<kIn>();
  __shared__ TopkSmem sm;

  const int r = blockIdx.x;
  const int len = topk_row_length(p, r);
  const int k = p.k;
  const void* row = static_cast<const char*>(p.logits) + static_cast<long long>(r) * p.logits_stride * sizeof(typename In::Raw);

  // 0: counted here (no histogram given), 1: the given histogram was used, 2: it did not add up.
  int histogram_use = 0;
  Threshold t;
  SelectCounts c;
  if (p.histogram != nullptr) {
    histogram_use = 1;
    t = find_coarse_threshold(p.histogram + static_cast<long long>(r) * kCoarseBins, k, sm);
    if (!t.negative) {
      c = select_pass<In, kPer>(row, len, t.bin, k, sm);
      const bool adds_up = c.valid == t.total && c.above == t.above && (t.bin == kCoarseBins || c.candidates == t.count);
      if (!adds_up) histogram_use = 2;
    } else {
      histogram_use = 2;
    }
  }
  if (histogram_use != 1) {
    count_coarse_bins<In, kPer>(row, len, sm);
    t = find_coarse_threshold(sm.hist, k, sm);
    c = select_pass<In, kPer>(row, len, t.bin, k, sm);
  }

  const int above = c.above;  // == t.above now
  const int selected = min(k, c.valid);
  int row_passes = 0;
  if (t.bin < kCoarseBins) {
    const int need = k - above;
    if (c.candidates <= kTopkCandidates) {
      if (need == c.candidates) {
        for (int i = threadIdx.x; i < need; i += kTopkThreads) sm.out[above + i] = sm.candidate_index[i];
        __syncthreads();
      } else {
        refine<kPer, In::kKeyBits>(SmemCandidates{&sm, c.candidates}, need, above, sm);
      }
    } else {
      refine<kPer, In::kKeyBits>(RowCandidates<In>{row, len, t.bin}, need, above, sm);
      row_passes = In::kKeyBits / 8 + 1;
    }
  }
  __syncthreads();

  // sm.out holds two ascending runs: [0, above) and [above, selected). Sorted output merges them.
  int* indices = p.indices + static_cast<long long>(r) * k;
  float* values = p.values != nullptr ? p.values + static_cast<long long>(r) * k : nullptr;
  for (int i = threadIdx.x; i < k; i += kTopkThreads) {
    if (i >= selected) {
      indices[i] = -1;
      if (values != nullptr) values[i] = negative_infinity();
      continue;
    }
    const int column = sm.out[i];
    int position = i;
    if (p.sorted)
      position = i < above ? i + count_below(sm.out + above, selected - above, column)
                           : (i - above) + count_below(sm.out, above, column);
    indices[position] = output_index(p, r, column);
    if (values != nullptr) values[position] = In::value(In::load(row, column));
  }
  if (threadIdx.x == 0) {
    int* report = p.report + static_cast<long long>(r) * kTopkReportInts;
    report[0] = histogram_use;
    report[1] = t.bin;
    report[2] = static_cast<int>(t.bin < kCoarseBins ? t.count : 0);
    report[3] = row_passes;
  }
}

}  // namespace kernels
}  // namespace flash_indexer
