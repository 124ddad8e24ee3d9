#pragma once
// The decode indexer step in one kernel: the Hopper paged logits kernel (paged_mqa_logits_sm90.cuh),
// with the fused coarse histogram, followed in the same launch by the exact top-k (contract §4) of each
// row, selected by the CTA that completes the row. docs/design/decode-step.md has the design.
//
// A row of the logits grid (a request, or a query row where the call runs flattened) is covered by
// several CTAs. Each CTA, once its logits are stored and its histogram counts added, adds the number of
// KV blocks it covered to the row's arrival counter (release). The CTA whose addition completes the row
// (acquire) is the last: every logit and count of the row is then in L2, and its consumer warpgroups
// select the row's query rows while the other CTAs of the grid go on with their own rows. No CTA ever
// waits for another, so any grid (several waves, other work on the GPU) is safe.
//
// The spread form (StepForm::spread, its own kernel), where the host launches the grid cooperatively
// (every CTA resident at once): every CTA of the row waits for the row's last arrival, marks its own
// columns against the threshold interval in its bitmap words, kept in shared memory (step 3 on its
// columns only: the interval's columns into the row's candidate list), and waits for the row's other
// CTAs to do the same. Then every CTA ranks the whole list alike (step 4), marks its listed columns
// against the cut, and writes its selected columns at their positions (step 5 on its words, after the
// winners and ties the other CTAs' counts put before them). A row the form cannot take (a
// threshold bin of more than kStepCandidates columns of several keys, or counts that do not add up) is
// selected as above by the row's first CTA.
//
// The selection of one row, by the consumer threads (named barrier 2; the producer warpgroup has left):
//   1. The threshold bin T of the row's histogram: the bin where the running count reaches k.
//   2. T as a key interval [lo, hi) (a table the host computes per dtype); a bin with more than
//      kStepCandidates columns is first narrowed by 10-bit digit passes over the row.
//   3. One pass over the row from L2: a column with a key >= hi is marked in the winners' bitmap, one
//      in [lo, hi) kept as a candidate (key, column), or, when [lo, hi) is a single key, marked in the
//      ties' bitmap. The pass checks the histogram's promise (the counts above and in T); a row whose
//      counts differ is counted again from its logits (it cannot happen in the step, whose histogram is
//      counted from the same stored values, but no histogram content may give a wrong answer).
//   4. The candidates ranked by digit rounds: keys above the k-th win, the k-th key's columns are ties.
//   5. The bitmaps read in column order give each winner its position: ascending columns, the lowest
//      columns of the k-th key first, -1 padding; the same bytes as topk() writes.
#include "decode_step_params.cuh"
#include "paged_mqa_logits_sm90.cuh"
#include "topk_common.cuh"
#include "topk_resident.cuh"  // place_word
#include "topk_threshold_scan.cuh"

namespace flash_indexer {
namespace kernels {

// The selection's shared memory: the fixed part (kStepFixedBytes), then the two bitmaps.
struct StepSmem {
  unsigned int digits[1024];  // a count pass's coarse bins, or a round's digits, best first
  unsigned int candidate_key[kStepCandidates];
  int candidate_column[kStepCandidates];
  alignas(16) unsigned int warp_sums[32];  // scan_threshold
  unsigned long long scan64[32];           // BlockScan
  int found[4];                            // scan_threshold
  int candidates;                          // the filter pass's counter (it counts past the buffer)
  int spread_base;                         // the spread form: a step's first slot in the row's list
  FoundBin spread_found[4];                // the spread form: each query row's coarse threshold
  int spread_negative[4];
};
static_assert(sizeof(StepSmem) <= kStepFixedBytes, "kStepFixedBytes holds the fixed part");
static_assert(sizeof(DecodeStepParams::coarse_lowest_key) == kCoarseBins * 4, "one key per coarse bin");

// 16 bytes of logits through L2 only: they were written by other CTAs of this launch, after the
// acquire that made them visible (a non-coherent load could serve stale lines).
__device__ __forceinline__ uint4 ld_global_l2(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ int ld_global_l2(const int* p) {
  int v;
  asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned int ld_global_l2(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned long long ld_global_l2(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}

// Adds `blocks` to a row's arrival counter after the CTA's writes (release) and returns the count
// before (acquire where it completes the row): the pattern of a split-K semaphore.
__device__ __forceinline__ unsigned int arrive_on_row(unsigned int* counter, unsigned int blocks) {
  unsigned int before;
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], %2;" : "=r"(before) : "l"(counter), "r"(blocks) : "memory");
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  return before;
}

// Spins until a row's arrival counter reaches `target` (the spread form: every CTA of the launch is
// resident, so every arrival comes), then acquires what the arrivals released.
__device__ __forceinline__ void wait_for_row(const unsigned int* counter, unsigned int target) {
  unsigned int seen;
#pragma unroll 1
  for (;;) {
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    if (seen >= target) break;
    __nanosleep(32);
  }
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// What a row's selection knows once its winners, ties and candidates are marked (StepRowSelect).
struct RowMarks {
  ThresholdKeys th;     // the interval of the candidates
  bool all;             // fewer than k selectable: every one wins
  int above_all;        // winners above the interval
  int candidates_all;   // columns in the interval
  int histogram_use;    // the report: 1 the histogram held, 2 it did not and the row was counted
  int report_bin, report_count, passes;
};

template <LogitsOut kOut, int kThreads>
struct StepRowSelect {
  using In = TopkInput<kOut>;
  using Raw = typename In::Raw;
  using Sync = NamedSync<2, kThreads>;
  static constexpr int kPer = 16 / static_cast<int>(sizeof(Raw));  // logits per 16-byte vector
  static constexpr int kBinsPer = 1024 / kThreads;
  static constexpr int kDigitBits = 10;
  // The spread form's loads in flight per thread: its vectors of a CTA's columns, the list's entries.
  static constexpr int kSpreadAhead = 2;
  static_assert(kThreads == 256 || kThreads == 512, "the consumer warpgroups of a logits kernel");

  const TopkParams& t;
  const unsigned int* lowest_key;  // DecodeStepParams::coarse_lowest_key
  StepSmem& sm;
  unsigned int* win_bits;
  unsigned int* tie_bits;

  // body(x, v) for every 16-byte vector v of columns [0, len), eight loads in flight per thread. Every
  // lane of a warp takes part in every call (a vector past the row reads as NaN: nothing to count or
  // keep), so that the bodies may aggregate their shared-memory updates per warp.
  template <class Body>
  __device__ __forceinline__ static void stream(const Raw* row, int len, Body&& body) {
    constexpr int kUnroll = 8;
    const int vectors = (len + kPer - 1) / kPer;
    const int full = len / kPer;  // vectors wholly inside the row
    const int last_lane = (static_cast<int>(threadIdx.x) | 31) - static_cast<int>(threadIdx.x);  // lanes after this one
    int v = threadIdx.x;
#pragma unroll 1
    for (; v + last_lane + (kUnroll - 1) * kThreads < full; v += kUnroll * kThreads) {
      uint4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u] = ld_global_l2(row + static_cast<long long>(v + u * kThreads) * kPer);
      // The bodies rolled, the vectors shifted down a register each step, so that the body is compiled
      // once (with the count passes merged, the step's code is half the size; the time did not change).
#pragma unroll 1
      for (int u = 0; u < kUnroll; ++u) {
        body(x[0], v + u * kThreads);
#pragma unroll
        for (int w = 0; w + 1 < kUnroll; ++w) x[w] = x[w + 1];
      }
    }
#pragma unroll 1
    for (; v - static_cast<int>(threadIdx.x & 31) < vectors; v += kThreads) {  // the warp's first lane decides
      uint4 x;
      if (v < full) {
        x = ld_global_l2(row + static_cast<long long>(v) * kPer);
      } else {
        Raw* e = reinterpret_cast<Raw*>(&x);
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const long long c = static_cast<long long>(v) * kPer + i;
          e[i] = c < len ? load(row + c) : In::nan();
        }
      }
      body(x, v);
    }
  }

  // Adds one to counts[slot] for every lane whose slot is >= 0, one atomic per distinct slot of the warp
  // (rows repeat keys: ties, and digits of a narrow interval). All 32 lanes call it.
  __device__ __forceinline__ static void count_warp(unsigned int* counts, int slot) {
    const unsigned int peers = __match_any_sync(0xffffffffu, slot);
    if (slot >= 0 && static_cast<int>(threadIdx.x & 31u) == __ffs(peers) - 1) atomicAdd(counts + slot, __popc(peers));
  }

  __device__ __forceinline__ static Raw element(const uint4& x, int e) { return reinterpret_cast<const Raw*>(&x)[e]; }
  // The same for an index known only at run time, by selects (an indexed vector would go to local memory).
  __device__ __forceinline__ static Raw element_at(const uint4& x, int e) {
    const int word = e / (kPer / 4);
    const unsigned int w = word == 0 ? x.x : word == 1 ? x.y : word == 2 ? x.z : x.w;
    if constexpr (sizeof(Raw) == 4) return __uint_as_float(w);
    else return static_cast<Raw>((e & 1) != 0 ? w >> 16 : w & 0xffffu);
  }
  // One logit through L2 (as ld_global_l2).
  __device__ __forceinline__ static Raw load(const Raw* p) {
    if constexpr (sizeof(Raw) == 4) {
      float v;
      asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
      return v;
    } else {
      unsigned short v;
      asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p));
      return v;
    }
  }

  // Row r of the logits.
  __device__ __forceinline__ const Raw* row_of(int r) const {
    return reinterpret_cast<const Raw*>(static_cast<const char*>(t.logits) +
                                        static_cast<long long>(r) * t.logits_stride * static_cast<long long>(sizeof(Raw)));
  }

  // A vector's marks against the threshold interval: bit e of `above` where element e is at or above
  // above_at (a winner), of `in` where it is in [candidate_at, above_at) (a candidate or a tie).
  __device__ __forceinline__ static void mark_vector(const uint4& x, float above_at, float candidate_at, unsigned int& above,
                                                     unsigned int& in) {
    unsigned int a = 0, b = 0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const float value = In::value(element(x, e));
      a |= value >= above_at ? 1u << e : 0u;
      b |= value >= candidate_at ? 1u << e : 0u;
    }
    above = a;
    in = b & ~a;
  }

  // Whether `x` holds on any of the selecting threads (a barrier on named barrier 2).
  __device__ __forceinline__ static bool any_thread(bool x) {
    unsigned int r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, 2, %2, p;\nselp.u32 %0, 1, 0, q;\n}"
                 : "=r"(r)
                 : "r"(static_cast<unsigned int>(x)), "n"(kThreads)
                 : "memory");
    return r != 0;
  }

  // The threshold of the counts in sm.digits or in the row's global histogram (kBinsPer per thread).
  __device__ __forceinline__ FoundBin threshold(const int* global_counts, int want, bool& negative) {
    int c[kBinsPer];
    bool neg = false;
#pragma unroll
    for (int i = 0; i < kBinsPer; ++i) {
      const int bin = static_cast<int>(threadIdx.x) * kBinsPer + i;
      c[i] = global_counts != nullptr ? ld_global_l2(global_counts + bin) : static_cast<int>(sm.digits[bin]);
      neg |= c[i] < 0;
      c[i] = max(c[i], 0);
    }
    // Whether any thread saw a negative count, alike on every thread: callers branch on it around barriers.
    negative = global_counts != nullptr && any_thread(neg);
    return scan_threshold<kThreads, kBinsPer, StepSmem, Sync>(c, want, sm);
  }

  // The key interval of coarse bin `bin`, from the host's table (DecodeStepParams::coarse_lowest_key).
  __device__ __forceinline__ ThresholdKeys coarse_interval(int bin, int above, int count, int k) const {
    return {lowest_key[bin], bin == 0 ? In::kMaxKey + 1 : lowest_key[bin - 1], k - above, count};
  }

  // One 16-byte vector of the row (columns past len read as NaN).
  __device__ __forceinline__ static uint4 vector_at(const Raw* row, int len, int v) {
    const int full = len / kPer;
    if (v < full) return ld_global_l2(row + static_cast<long long>(v) * kPer);
    uint4 x;
    Raw* e = reinterpret_cast<Raw*>(&x);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const long long c = static_cast<long long>(v) * kPer + i;
      e[i] = c < len ? load(row + c) : In::nan();
    }
    return x;
  }

  // The filter pass (select, step 3): every lane of a warp takes part in every step (vectors past the
  // row read as NaN), so that the step's candidate slots come from one warp scan and one atomic.
  __device__ __forceinline__ void filter_pass(const Raw* row, int len, bool single, float above_at, float candidate_at) {
    constexpr int kUnroll = 8;
    const int vectors = (len + kPer - 1) / kPer;
    const int full = len / kPer;
    const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll 1
    for (int v = threadIdx.x; v - lane < vectors; v += kUnroll * kThreads) {
      uint4 x[kUnroll];
      if (v - lane + 31 + (kUnroll - 1) * kThreads < full) {  // the warp's vectors all whole
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) x[u] = ld_global_l2(row + static_cast<long long>(v + u * kThreads) * kPer);
      } else {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) x[u] = vector_at(row, len, v + u * kThreads);
      }
      unsigned int cand[kUnroll];
      int n = 0;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        cand[u] = 0;
        if (!(vector_max<kOut>(x[u]) >= candidate_at)) continue;
        const int c = (v + u * kThreads) * kPer;
        unsigned int a, b;
        mark_vector(x[u], above_at, candidate_at, a, b);
        if (a != 0) atomicOr(&win_bits[c >> 5], a << (c & 31));
        if (single) {
          if (b != 0) atomicOr(&tie_bits[c >> 5], b << (c & 31));
        } else {
          cand[u] = b;
          n += __popc(b);
        }
      }
      if (!__any_sync(0xffffffffu, n != 0)) continue;
      const int through = warp_inclusive_sum(n);
      int base = 0;
      if (lane == 31) base = atomicAdd(&sm.candidates, through);
      int slot = __shfl_sync(0xffffffffu, base, 31) + through - n;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = (v + u * kThreads) * kPer;
        for (unsigned int m = cand[u]; m != 0; m &= m - 1, ++slot) {
          const int e = __ffs(static_cast<int>(m)) - 1;
          if (slot < kStepCandidates) {
            sm.candidate_key[slot] = In::key(element_at(x[u], e));
            sm.candidate_column[slot] = c + e;
          }
        }
      }
    }
  }

  // A pass over the row counting into sm.digits: each logit's coarse bin (`coarse`), or the digit
  // (key - lo) >> shift of the keys in [lo, hi), best first. One function for both, so that the
  // selection's code stays small (the recount is rare).
  __device__ __forceinline__ void count_pass(const Raw* row, int len, bool coarse, unsigned int lo, unsigned int hi, int shift) {
    for (int i = threadIdx.x; i < 1024; i += kThreads) sm.digits[i] = 0;
    Sync::sync();
    stream(row, len, [&](const uint4& x, int) {
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const Raw raw = element(x, e);
        const unsigned int key = In::key(raw);
        const bool in = !In::is_nan(raw) && (coarse || (key >= lo && key < hi));
        count_warp(sm.digits, !in ? -1 : coarse ? In::bin(raw) : 1023 - static_cast<int>((key - lo) >> shift));
      }
    });
    Sync::sync();
  }

  // Row r's marks from its logits: its threshold interval from the histogram (or, where the histogram does
  // not add up, from its logits), its winners above the interval (and, where the interval is one key, its
  // ties) in the bitmaps and its candidates in the interval in sm.
  __device__ __forceinline__ RowMarks search(int r, const int* histogram) {
    const int k = t.k;
    const int len = topk_row_length(t, r);
    const Raw* row = row_of(r);
    const int words = (len + 31) >> 5;
    int histogram_use = 1;  // the report: 1 the histogram held, 2 it did not and the row was counted
    int report_bin = 0, report_count = 0, passes = 0;
    ThresholdKeys th{};
    bool all = false;  // fewer than k selectable: every one wins
    int above_all = 0, candidates_all = 0;
#pragma unroll 1
    for (int attempt = 0;; ++attempt) {
      const bool counted = attempt > 0;
      if (counted) {  // the row's coarse bins from its logits
        histogram_use = 2;
        count_pass(row, len, true, 0, 0, 0);
      }
      bool negative = false;
      const FoundBin f = threshold(counted ? nullptr : histogram, k, negative);
      if (negative) continue;  // (only a histogram that is not this row's)
      report_bin = f.bin;
      report_count = f.count;
      all = f.bin >= 1024;
      th = all ? ThresholdKeys{In::kMinKey, In::kMinKey, 0, 0} : coarse_interval(f.bin, f.above, f.count, k);
      // Narrowing: a threshold bin larger than the candidate buffer, by digit passes over the row.
      passes = 0;
      bool short_count = false;
#pragma unroll 1
      while (th.count > kStepCandidates && th.hi - th.lo > 1) {
        const int shift = digit_shift<kDigitBits>(th.lo, th.hi);
        count_pass(row, len, false, th.lo, th.hi, shift);
        bool unused = false;
        const FoundBin g = threshold(nullptr, th.need, unused);
        if (g.bin >= 1024 || (passes == 0 && g.total != th.count)) {  // the bin holds less than promised
          short_count = true;
          break;
        }
        narrow_to_digit<1024>(th, g, shift);
        ++passes;
      }
      if (short_count) {
        if (counted) break;  // (cannot happen: counted from the same logits)
        continue;
      }

      // The filter pass, eight vectors per thread and step: each marks its winners (and ties) in the
      // zeroed bitmaps (a vector lies within one word); the step's candidates take their slots with one
      // atomic per warp.
      const bool single = th.hi - th.lo <= 1;
      for (int i = threadIdx.x; i < words; i += kThreads) {
        win_bits[i] = 0;
        tie_bits[i] = 0;
      }
      if (threadIdx.x == 0) sm.candidates = 0;
      Sync::sync();
      const float above_at = bound_value<In>(th.hi), candidate_at = bound_value<In>(th.lo);
      filter_pass(row, len, single, above_at, candidate_at);
      Sync::sync();
      unsigned long long bits = 0;  // winners | ties << 32
      for (int i = threadIdx.x; i < words; i += kThreads)
        bits += static_cast<unsigned long long>(__popc(win_bits[i])) | static_cast<unsigned long long>(__popc(tie_bits[i])) << 32;
      const unsigned long long sums = BlockScan<kThreads, Sync>::sum(bits, sm.scan64);
      above_all = static_cast<int>(sums & 0xffffffffu);
      candidates_all = single ? static_cast<int>(sums >> 32) : sm.candidates;
      // What the histogram (and the narrowing passes) promised for the interval.
      const int promised_above = all ? f.total : k - th.need;
      const bool holds =
          above_all == promised_above && (all || candidates_all == th.count) && (single || candidates_all <= kStepCandidates);
      if (holds || counted) break;
    }

    return {th, all, above_all, candidates_all, histogram_use, report_bin, report_count, passes};
  }

  // Each thread's run [w0, w1) of the bitmaps' first `words` words, and the winners | ties << 32 in the
  // runs before it (one block scan; `total` over all of them).
  __device__ __forceinline__ unsigned long long word_runs(const unsigned int* win, const unsigned int* tie, int words, int& w0,
                                                          int& w1, unsigned long long& total) {
    const int per_thread = (words + kThreads - 1) / kThreads;
    w0 = min(words, static_cast<int>(threadIdx.x) * per_thread);
    w1 = min(words, w0 + per_thread);
    unsigned long long counts = 0;
    for (int w = w0; w < w1; ++w)
      counts += static_cast<unsigned long long>(__popc(win[w])) | static_cast<unsigned long long>(__popc(tie[w])) << 32;
    return BlockScan<kThreads, Sync>::exclusive(counts, sm.scan64, total);
  }

  // Which of a threshold interval's candidates (sm.candidate_key, `size` of them) are among the `need`
  // best: digit rounds narrow [lo, hi) until it holds exactly the ones still needed (all_in) or one key,
  // whose lowest `ties` columns are taken.
  struct Cut {
    unsigned long long lo, hi;
    int ties;
    bool all_in;
    __device__ __forceinline__ bool wins(unsigned long long key) const { return key >= hi || (all_in && key >= lo); }
    // The marks' bounds as keys: keys >= above win, keys in [tie, above) are ties.
    __device__ __forceinline__ unsigned long long above() const { return all_in ? lo : hi; }
  };
  __device__ __forceinline__ Cut cut(const ThresholdKeys& th, int need, int size) {
    Cut c{th.lo, th.hi, need, size <= need};
#pragma unroll 1
    while (!c.all_in && c.hi - c.lo > 1) {
      const int shift = max(0, 64 - __clzll(static_cast<long long>(c.hi - 1 - c.lo)) - kDigitBits);
      for (int i = threadIdx.x; i < 1024; i += kThreads) sm.digits[i] = 0;
      Sync::sync();
      for (int i0 = threadIdx.x & ~31; i0 < size; i0 += kThreads) {  // whole warps: count_warp
        const int i = i0 + static_cast<int>(threadIdx.x & 31);
        const unsigned long long key = i < size ? sm.candidate_key[i] : 0ull;
        count_warp(sm.digits, i < size && key >= c.lo && key < c.hi ? 1023 - static_cast<int>((key - c.lo) >> shift) : -1);
      }
      Sync::sync();
      bool unused = false;
      const FoundBin g = threshold(nullptr, c.ties, unused);
      c.ties -= g.above;
      c.lo += static_cast<unsigned long long>(1023 - g.bin) << shift;
      c.hi = min(c.hi, c.lo + (1ull << shift));
      c.all_in = g.count == c.ties;
    }
    return c;
  }

  // The rest of row r's selection from its marks: which candidates win, then its k best columns into
  // indices (and values), and its report.
  __device__ __forceinline__ void finish(int r, const RowMarks& m) {
    const int k = t.k;
    const int len = topk_row_length(t, r);
    const int words = (len + 31) >> 5;
    const ThresholdKeys& th = m.th;
    const bool all = m.all;
    const int above_all = m.above_all, candidates_all = m.candidates_all;
    const bool single = th.hi - th.lo <= 1;
    const int need = all ? 0 : max(0, k - above_all);
    int tie_slots = single ? need : 0;
    if (!single && !all) {
      const int size = min(candidates_all, kStepCandidates);
      const Cut c = cut(th, need, size);
      tie_slots = c.all_in ? 0 : c.ties;
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const unsigned long long key = sm.candidate_key[i];
        const int s = sm.candidate_column[i];
        if (c.wins(key)) atomicOr(&win_bits[s >> 5], 1u << (s & 31));
        else if (key >= c.lo) atomicOr(&tie_bits[s >> 5], 1u << (s & 31));
      }
      Sync::sync();
    }

    // Output positions from the bitmaps: each thread a run of words, one scan places the runs.
    int w0, w1;
    unsigned long long total;
    const unsigned long long before = word_runs(win_bits, tie_bits, words, w0, w1, total);
    int na = static_cast<int>(before & 0xffffffffu), nt = static_cast<int>(before >> 32);
    // The winners' columns by position in shared memory first (the candidates' columns are done with),
    // then coalesced global writes.
    int* const out = sm.candidate_column;
    static_assert(kStepCandidates >= kMaxTopk, "a row's winners fit the candidates' columns");
    for (int w = w0; w < w1; ++w) place_word(out, 32 * w, win_bits[w], tie_bits[w], na, nt, tie_slots, 0);
    Sync::sync();
    const int selected = static_cast<int>(total & 0xffffffffu) + min(static_cast<int>(total >> 32), tie_slots);
    write_selected(r, out, 0, selected);
    write_padding(r, selected);
    if (threadIdx.x == 0) write_report(r, m.histogram_use, all ? 1024 : m.report_bin, all ? 0 : m.report_count, m.passes);
    Sync::sync();  // the bitmaps and sm free for the next row
  }

  // Row r's output positions [first, first + n): the columns out[0, n) (indices, and values where asked).
  __device__ __forceinline__ void write_selected(int r, const int* out, int first, int n) const {
    const Raw* row = row_of(r);
    int* indices = t.indices + static_cast<long long>(r) * t.k + first;
    float* values = t.values != nullptr ? t.values + static_cast<long long>(r) * t.k + first : nullptr;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int column = out[i];
      indices[i] = output_index(t, r, column, 0);
      if (values != nullptr) values[i] = In::value(load(row + column));
    }
  }
  // Row r's output positions past its `selected` ones: -1, and -inf values.
  __device__ __forceinline__ void write_padding(int r, int selected) const {
    int* indices = t.indices + static_cast<long long>(r) * t.k;
    float* values = t.values != nullptr ? t.values + static_cast<long long>(r) * t.k : nullptr;
    for (int i = selected + static_cast<int>(threadIdx.x); i < t.k; i += kThreads) {
      indices[i] = -1;
      if (values != nullptr) values[i] = negative_infinity();
    }
  }
  __device__ __forceinline__ void write_report(int r, int histogram_use, int bin, int count, int passes) const {
    int* report = t.report + static_cast<long long>(r) * kTopkReportInts;
    report[0] = histogram_use;
    report[1] = bin;
    report[2] = count;
    report[3] = passes;
  }

  // The threshold interval of a row's coarse threshold (the whole row where fewer than k are selectable).
  __device__ __forceinline__ ThresholdKeys interval_of(const FoundBin& f) const {
    return f.bin >= 1024 ? ThresholdKeys{In::kMinKey, In::kMinKey, 0, 0} : coarse_interval(f.bin, f.above, f.count, t.k);
  }
  // Whether the spread form can take a row of this threshold: its interval's candidates fit the list (one
  // key's columns go to the ties' bitmap, any number of them), and the histogram is whole.
  __device__ __forceinline__ static bool spreads(const FoundBin& f, const ThresholdKeys& th, bool negative) {
    return !negative && (f.bin >= 1024 || th.hi - th.lo <= 1 || f.count <= kStepCandidates);
  }

  // Vector v of a CTA's columns, vectors [.., v1): past v1 NaN, which nothing marks.
  __device__ __forceinline__ static uint4 range_vector(const Raw* row, int len, int v, int v1) {
    if (v < v1) return vector_at(row, len, v);
    uint4 x;
    Raw* e = reinterpret_cast<Raw*>(&x);
#pragma unroll
    for (int i = 0; i < kPer; ++i) e[i] = In::nan();
    return x;
  }

  // The spread form's first part (StepForm::spread), on every CTA of row r's grid row: columns [c0, c1)
  // of the row (multiples of 64) against its coarse threshold interval, all of them loaded at once where
  // they fit kSpreadAhead vectors per thread. Their winners go to the CTA's bitmap words `win` (word w:
  // columns c0 + 32 w on), where the interval is one key its columns to `tie`; else the interval's
  // columns are appended to the row's candidate list (one block scan and one atomic per CTA and step),
  // and the cut decides them (spread_place). Returns the CTA's winners | ties << 32 (on every thread).
  __device__ __forceinline__ unsigned long long spread_count(int r, int len, int c0, int c1, const ThresholdKeys& th, int* count,
                                                             unsigned long long* list, unsigned int* win, unsigned int* tie) {
    constexpr int kLanesPerWord = 32 / kPer;
    const Raw* row = row_of(r);
    const bool single = th.hi - th.lo <= 1;
    const float above_at = bound_value<In>(th.hi), candidate_at = bound_value<In>(th.lo);
    const int lane = static_cast<int>(threadIdx.x & 31);
    const int v1 = c1 / kPer;
    unsigned long long marks = 0;  // winners | ties << 32
#pragma unroll 1
    for (int v0 = c0 / kPer; v0 < v1; v0 += kSpreadAhead * kThreads) {  // alike on every thread: barriers inside
      uint4 x[kSpreadAhead];
#pragma unroll
      for (int u = 0; u < kSpreadAhead; ++u) x[u] = range_vector(row, len, v0 + u * kThreads + static_cast<int>(threadIdx.x), v1);
      unsigned int in[kSpreadAhead];
      int n = 0;
#pragma unroll
      for (int u = 0; u < kSpreadAhead; ++u) {
        const int v = v0 + u * kThreads + static_cast<int>(threadIdx.x);
        unsigned int a, b;
        mark_vector(x[u], above_at, candidate_at, a, b);
        marks += static_cast<unsigned long long>(__popc(a)) | (single ? static_cast<unsigned long long>(__popc(b)) << 32 : 0ull);
        // The vector's bits in its bitmap word, which kLanesPerWord neighbouring lanes share.
        const int shift = (v * kPer) & 31;
        unsigned int word_a = a << shift, word_t = single ? b << shift : 0u;
#pragma unroll
        for (int o = 1; o < kLanesPerWord; o <<= 1) {
          word_a |= __shfl_xor_sync(0xffffffffu, word_a, o);
          word_t |= __shfl_xor_sync(0xffffffffu, word_t, o);
        }
        if (v < v1 && lane % kLanesPerWord == 0) {
          win[(v * kPer - c0) >> 5] = word_a;
          tie[(v * kPer - c0) >> 5] = word_t;
        }
        in[u] = single ? 0u : b;
        n += __popc(in[u]);
      }
      if (single) continue;
      unsigned long long listed_here;
      const int before =
          static_cast<int>(BlockScan<kThreads, Sync>::exclusive(static_cast<unsigned long long>(n), sm.scan64, listed_here));
      if (listed_here == 0) continue;
      // (every thread read sm.spread_base of the step before: the scan's barriers came since)
      if (threadIdx.x == 0) sm.spread_base = atomicAdd(count, static_cast<int>(listed_here));
      Sync::sync();
      int slot = sm.spread_base + before;
#pragma unroll
      for (int u = 0; u < kSpreadAhead; ++u) {
        const int v = v0 + u * kThreads + static_cast<int>(threadIdx.x);
        for (unsigned int m = in[u]; m != 0; m &= m - 1, ++slot) {
          const int e = __ffs(static_cast<int>(m)) - 1;
          if (slot < kStepCandidates)
            list[slot] =
                static_cast<unsigned long long>(In::key(element_at(x[u], e))) << 32 | static_cast<unsigned int>(v * kPer + e);
        }
      }
    }
    return BlockScan<kThreads, Sync>::sum(marks, sm.scan64);
  }

  // The spread form's second part, on CTA `me` of the `ctas` of row r's grid row (columns [c0, c1), its
  // bitmap words `win` and `tie` as spread_count left them), once every CTA of the row has counted its
  // columns (`counts`, one entry per CTA) and listed its candidates (`count`, `list` of `capacity`
  // entries). Every CTA ranks the whole list the same way, so all find the same cut. Each then marks its
  // own listed columns against the cut, adds up the winners and ties in the columns before its own, and
  // writes its own selected columns at their positions: ascending columns, the lowest columns of the
  // k-th key first, the same bytes as finish(). Returns false on every CTA alike where the counts do not
  // add up to the histogram's; the caller then selects the row from its logits on one CTA.
  __device__ __forceinline__ bool spread_place(int r, const FoundBin& f, int me, int ctas, int c0, int c1,
                                               const unsigned long long* counts, const int* count, const unsigned long long* list,
                                               int capacity, unsigned int* win, unsigned int* tie) {
    const int k = t.k;
    const ThresholdKeys th = interval_of(f);
    const bool all = f.bin >= 1024;
    const bool single = th.hi - th.lo <= 1;
    // The row's shared state in one round trip: the list's size, the CTAs' counts and the list's first
    // entries (past its size they are not read below).
    const int listed = single ? 0 : ld_global_l2(count);
    const unsigned long long my_count = static_cast<int>(threadIdx.x) < ctas ? ld_global_l2(counts + threadIdx.x) : 0ull;
    unsigned long long entry[kSpreadAhead];
#pragma unroll
    for (int u = 0; u < kSpreadAhead; ++u) {
      const int i = static_cast<int>(threadIdx.x) + u * kThreads;
      entry[u] = !single && i < capacity ? ld_global_l2(list + i) : 0ull;
    }
    unsigned long long row_part = my_count,
                       before_part = static_cast<int>(threadIdx.x) < me ? my_count : 0ull;  // winners | ties << 32
    for (int i = threadIdx.x + kThreads; i < ctas; i += kThreads) {
      const unsigned long long c = ld_global_l2(counts + i);
      row_part += c;
      before_part += i < me ? c : 0ull;
    }
    const unsigned long long row_marks = BlockScan<kThreads, Sync>::sum(row_part, sm.scan64);
    unsigned long long before = BlockScan<kThreads, Sync>::sum(before_part, sm.scan64);
    const int above_all = static_cast<int>(row_marks & 0xffffffffu);
    const int candidates_all = single ? static_cast<int>(row_marks >> 32) : listed;
    const int promised_above = all ? f.total : k - th.need;
    if (above_all != promised_above || !(all || candidates_all == th.count) || !(single || candidates_all <= kStepCandidates))
      return false;

    const int need = all ? 0 : max(0, k - above_all);
    int tie_slots = single ? need : 0;
    if (!single) {
#pragma unroll
      for (int u = 0; u < kSpreadAhead; ++u) {
        const int i = static_cast<int>(threadIdx.x) + u * kThreads;
        if (i < listed) {
          sm.candidate_key[i] = static_cast<unsigned int>(entry[u] >> 32);
          sm.candidate_column[i] = static_cast<int>(entry[u] & 0xffffffffu);
        }
      }
      for (int i = static_cast<int>(threadIdx.x) + kSpreadAhead * kThreads; i < listed; i += kThreads) {
        const unsigned long long e = ld_global_l2(list + i);
        sm.candidate_key[i] = static_cast<unsigned int>(e >> 32);
        sm.candidate_column[i] = static_cast<int>(e & 0xffffffffu);
      }
      Sync::sync();
      const Cut c = cut(th, need, listed);
      tie_slots = c.all_in ? 0 : c.ties;
      // The list's winners and ties: counted where they lie before c0, marked where they are this CTA's.
      unsigned long long list_before = 0;  // winners | ties << 32
      for (int i = threadIdx.x; i < listed; i += kThreads) {
        const unsigned long long key = sm.candidate_key[i];
        const int column = sm.candidate_column[i];
        const bool wins = c.wins(key), ties = !wins && key >= c.lo;
        if (column < c0) list_before += wins ? 1ull : ties ? 1ull << 32 : 0ull;
        else if (column < c1 && (wins || ties)) atomicOr(&(wins ? win : tie)[(column - c0) >> 5], 1u << (column & 31));
      }
      before += BlockScan<kThreads, Sync>::sum(list_before, sm.scan64);  // (its barrier orders the marks)
    }
    // With the histogram's counts holding, exactly k are selectable unless fewer are (`all`).
    const int selected = all ? above_all : k;

    // Positions: each thread a run of words, one scan over the CTA after the columns before it.
    int w0, w1;
    unsigned long long cta_marks;
    const unsigned long long local = word_runs(win, tie, (c1 - c0) >> 5, w0, w1, cta_marks);
    const int na0 = static_cast<int>(before & 0xffffffffu), nt0 = static_cast<int>(before >> 32);
    const int first = na0 + min(nt0, tie_slots);
    int na = na0 + static_cast<int>(local & 0xffffffffu), nt = nt0 + static_cast<int>(local >> 32);
    int* const out = sm.candidate_column;  // the list is done with (the scans' barriers)
    for (int w = w0; w < w1; ++w) place_word(out, c0 + 32 * w, win[w], tie[w], na, nt, tie_slots, first);
    Sync::sync();
    const int mine_selected =
        static_cast<int>(cta_marks & 0xffffffffu) + min(max(tie_slots - nt0, 0), static_cast<int>(cta_marks >> 32));
    write_selected(r, out, first, mine_selected);
    if (me == ctas - 1) write_padding(r, selected);
    if (me == 0 && threadIdx.x == 0) write_report(r, 1, all ? 1024 : f.bin, all ? 0 : f.count, 0);
    Sync::sync();  // the bitmaps and sm free for the next row
    return true;
  }
};

// The tail of the step's logits kernel, called by every thread of a CTA of grid row b that covered
// `covered` KV blocks, after its logits and histogram counts are issued (or at once, for a CTA past
// every live block). kSelectThreads: the consumer threads, which select; the others leave.
template <int kNextN, LogitsOut kOut, int kSelectThreads, StepForm kStepForm>
struct DecodeStepTail {
  static constexpr bool kActive = true;
  const DecodeStepParams& s;

  __device__ __forceinline__ void operator()(int b, int covered, unsigned char* smem) const {
    unsigned int before = 0;
    __syncthreads();  // every thread's stores and counts precede the arrival
    if (threadIdx.x == 0) before = arrive_on_row(s.arrivals + b, static_cast<unsigned int>(covered));
    Select select = selector(smem);
    // The query rows (bit j) that this CTA selects from their logits, inline: as a call the last-CTA form
    // measured 6-8 % slower and the spread form 4 % (docs/design/decode-step.md).
    unsigned int rows;
    if constexpr (kStepForm == StepForm::spread) {
      rows = spread(select, b, covered);
    } else {
      const bool last = __syncthreads_or(threadIdx.x == 0 && before + static_cast<unsigned int>(covered) ==
                                                                 static_cast<unsigned int>(s.width_blocks)) != 0;
      rows = last ? (1u << kNextN) - 1u : 0u;
    }
    if (rows == 0 || threadIdx.x >= kSelectThreads) return;
#pragma unroll 1
    for (int j = 0; j < kNextN; ++j) {
      if (((rows >> j) & 1u) == 0) continue;
      const int r = b * kNextN + j;
      select.finish(r, select.search(r, s.logits.p.histogram + static_cast<long long>(r) * kCoarseBins));
    }
    // The selection above ended with a barrier: its reads of the histograms are done.
    if constexpr (kStepForm == StepForm::last_cta) clear_row(b, static_cast<int>(threadIdx.x), kSelectThreads, rows);
    else clear_histograms(b, static_cast<int>(threadIdx.x), kSelectThreads, rows);  // the rest is cleared in spread()
  }

 private:
  using Select = StepRowSelect<kOut, kSelectThreads>;

  // The selection reuses the kernel's shared memory from its start: the ring, the query and the barriers
  // are done with (every consumer has passed its last block).
  __device__ __forceinline__ Select selector(unsigned char* smem) const {
    unsigned int* win_bits = reinterpret_cast<unsigned int*>(smem + kStepFixedBytes);
    return Select{s.topk, s.coarse_lowest_key, *reinterpret_cast<StepSmem*>(smem), win_bits,
                  win_bits + (s.topk.width + 63) / 64 * 2};
  }

  // The spread form (StepForm::spread): after the row's last arrival every CTA of the row counts
  // and lists its own columns of each query row (spread_count), arrives on the row's `filtered` counter
  // and waits for the row's other CTAs; then each writes its own selected columns (spread_place). A
  // query row the form cannot take is selected from its logits by the row's first CTA: returns those
  // rows (bit j) there, none elsewhere (and none for the producer warpgroup, which leaves).
  __device__ __forceinline__ unsigned int spread(Select& select, int b, int covered) const {
    if (threadIdx.x == 0) wait_for_row(s.arrivals + b, static_cast<unsigned int>(s.width_blocks));
    __syncthreads();
    if (threadIdx.x >= kSelectThreads) return 0u;
    StepSmem& sm = select.sm;
    const int me = static_cast<int>(blockIdx.x), ctas = static_cast<int>(gridDim.x);
    const int c0 = me * s.logits.blocks_per_split * 64;
    const int c1 = max(c0, min(c0 + covered * 64, s.topk.width));
    // Each query row's bitmap words of this CTA's columns, from the first part to the second (the host
    // takes this form only where kNextN rows of them fit the bitmaps).
    const int own_words = s.logits.blocks_per_split * 2;
#pragma unroll 1
    for (int j = 0; j < kNextN; ++j) {
      const int r = b * kNextN + j;
      bool negative = false;
      const FoundBin f = select.threshold(s.logits.p.histogram + static_cast<long long>(r) * kCoarseBins, s.topk.k, negative);
      if (threadIdx.x == 0) {
        sm.spread_found[j] = f;
        sm.spread_negative[j] = negative;
      }
      const ThresholdKeys th = select.interval_of(f);
      if (!Select::spreads(f, th, negative)) continue;
      const unsigned long long marks =
          select.spread_count(r, topk_row_length(s.topk, r), c0, c1, th, s.spread_candidates_count + r, list_of(r),
                              select.win_bits + j * own_words, select.tie_bits + j * own_words);
      if (threadIdx.x == 0) s.spread_counts[static_cast<long long>(r) * s.spread_slots + me] = marks;
    }
    Select::Sync::sync();  // every thread's list entries precede the arrival
    if (threadIdx.x == 0) {
      arrive_on_row(s.filtered + b, 1u);
      wait_for_row(s.filtered + b, static_cast<unsigned int>(ctas));
    }
    Select::Sync::sync();
    unsigned int rows = 0;
#pragma unroll 1
    for (int j = 0; j < kNextN; ++j) {
      const int r = b * kNextN + j;
      const FoundBin f = sm.spread_found[j];
      const bool placed =
          Select::spreads(f, select.interval_of(f), sm.spread_negative[j]) &&
          select.spread_place(r, f, me, ctas, c0, c1, s.spread_counts + static_cast<long long>(r) * s.spread_slots,
                              s.spread_candidates_count + r, list_of(r), s.spread_list, select.win_bits + j * own_words,
                              select.tie_bits + j * own_words);
      if (!placed) rows |= 1u << j;
    }
    // The row's last CTA to get here clears the row but the histograms of the query rows selected from
    // their logits, which the row's first CTA reads and then clears: every CTA of the row passed the
    // first wait before any gets here, so the arrival counter counts on from width_blocks. Relaxed:
    // this CTA's reads of the row's words have returned (their values decided its writes) before the
    // barrier.
    Select::Sync::sync();
    if (threadIdx.x < 32) {
      unsigned int before = 0;
      if (threadIdx.x == 0)
        asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(s.arrivals + b) : "memory");
      before = __shfl_sync(0xffffffffu, before, 0);
      if (before == static_cast<unsigned int>(s.width_blocks + ctas) - 1u)
        clear_row(b, static_cast<int>(threadIdx.x), 32, ((1u << kNextN) - 1u) & ~rows);
    }
    return me == 0 ? rows : 0u;
  }

  // Zeroes what grid row b's step accumulated (the histograms of its query rows in `histograms`, bit j,
  // and its counters) once no CTA of the launch reads them any more: the next launch finds them zero
  // without a memset (about 1.5 us at B 1, docs/design/decode-step.md). Called by `threads` threads from
  // 0 of the CTA that clears.
  __device__ __forceinline__ void clear_histograms(int b, int thread, int threads, unsigned int histograms) const {
#pragma unroll 1
    for (int j = 0; j < kNextN; ++j) {
      if (((histograms >> j) & 1u) == 0) continue;
      int4* histogram = reinterpret_cast<int4*>(s.logits.p.histogram + (static_cast<long long>(b) * kNextN + j) * kCoarseBins);
      for (int i = thread; i < kCoarseBins / 4; i += threads) histogram[i] = make_int4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void clear_row(int b, int thread, int threads, unsigned int histograms) const {
    clear_histograms(b, thread, threads, histograms);
    if (thread == 0) {
      s.arrivals[b] = 0;
      if constexpr (kStepForm == StepForm::spread) {
        s.filtered[b] = 0;
        for (int j = 0; j < kNextN; ++j) s.spread_candidates_count[b * kNextN + j] = 0;
      }
    }
  }

  __device__ __forceinline__ unsigned long long* list_of(int r) const {
    return s.spread_candidates + static_cast<long long>(r) * s.spread_list;
  }
};

// The step's entry: the sm90 paged logits kernel of the configuration with the fused histogram and the
// tail above.
template <int kNextN, int kHeads, int kHeadDim, LogitsOut kOut, bool kMxfp4, StepForm kStepForm>
__device__ void decode_step_sm90(const DecodeStepParams& s) {
  constexpr Sm90PagedForm kForm = sm90_paged_form(kNextN, kHeads, kMxfp4);
  const DecodeStepTail<kNextN, kOut, kForm.consumers * 128, kStepForm> tail{s};
  paged_mqa_logits_sm90<kNextN, kHeads, kHeadDim, true, kOut, kMxfp4>(s.logits, tail);
}

}  // namespace kernels
}  // namespace flash_indexer
