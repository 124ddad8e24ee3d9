#pragma once
// Exact top-k (contract §4) of rows whose segment per CTA is too long for shared memory, one row per
// cluster of kCluster CTAs (kCluster = 1: no cluster features, the form for large batches and sm_80).
// Such a row is read from global memory, so its time is the passes over it: this selector usually makes
// one, at few instructions per logit.
//   1. A cutoff before any pass: the given contract §3 histogram's threshold bin as a key interval
//      [lo, hi); without one, a sample of the row (the cluster's samples summed) places lo so that about
//      k + max((C - k) / 2, C / 4) columns pass (C = kFilterCandidates: (k + C) / 2 up to k = C / 2), and
//      hi so that about k - min(k / 2, C / 4) do: both clear of k, about C / 2 columns between them.
//   2. The filter pass streams the segment with 16-byte loads, four in flight per thread. A vector
//      whose largest score is below lo (nearly all of them) costs a max and one compare. A column with a
//      key >= hi is marked in a bitmap of the segment (dynamic shared memory); one in [lo, hi) goes to
//      the candidate buffer (key, column) in arrival order, or, when [lo, hi) is a single key, to a
//      second bitmap as a tie.
//   3. The pass checks itself, so no histogram can make the answer wrong: the interval holds the k-th
//      score when above < k <= above + inside (or every selectable column was seen). With a histogram
//      the counts must also be what it promised (else the row report says 2). Otherwise the segment's
//      fine bins are counted in another pass and the threshold found exactly; an interval with more
//      candidates than the buffer is first narrowed by 10-bit digit passes over its keys.
//   4. Ranking and output as in the resident selector (topk_resident.cuh): the candidates' keys, the
//      cluster's sent to the leader, ranked by digits (a single CTA's few each against all); each CTA
//      marks its winners, and the bitmaps read in column order give ascending, deterministic bytes.
#include "cluster.cuh"
#include "grid_dependency.cuh"
#include "topk_common.cuh"
#include "topk_resident.cuh"
#include "topk_threshold_scan.cuh"
#include "topk_tile.cuh"

namespace flash_indexer {
namespace kernels {

constexpr int kFilterCandidates = kTopkCandidates;
static_assert(kMaxTopk <= kFilterCandidates, "the winners' staging shares the candidate columns' storage");

// A 16-byte load that bypasses L1: the row is read once (or once per pass, from L2 at best).
__device__ __forceinline__ uint4 ld_global_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// A count of bins per thread, as a type (the threshold scans size their arrays with it).
template <int N>
struct BinsPerThread {
  static constexpr int value = N;
};

struct TopkFilterSmem {
  union {
    alignas(16) unsigned int hist[kTopkFineBins + 4];  // a count pass's fine bins, or a sample's selector bins; NaNs past them
    struct {
      unsigned int candidate_key[kFilterCandidates];  // the leader's holds the cluster's keys when ranking
      union {
        int candidate_index[kFilterCandidates];  // column in the segment
        int out[kMaxTopk];                       // this CTA's winners (columns of the segment), in output order
      };
    };
  };
  unsigned int digits[1 << kRefineBits];  // narrowing and ranking digit counts, largest digit first
  struct {                                // find_threshold and coarse_key_bounds (topk_common.cuh)
    long long scan[kTopkThreads / 32];
    long long found[3];
    unsigned int key_bounds[2];
  } coarse;
  alignas(16) unsigned int warp_sums[kTopkThreads / 32];
  unsigned long long scan64[kTopkThreads / 32];
  int found[4];
  int candidates;
  int report[2];         // the threshold bin and its count, as the row report gives them
  unsigned int kth_key;  // the smallest winning candidate key (the report of a sampled row)
  // Written by the cluster's CTAs (each its own slot), read after a cluster barrier.
  int peer_above[8];
  int peer_candidates[8];
  int peer_selected_above[8];
  int peer_tied[8];
  unsigned int peer_kth[8];
  unsigned int decision[4];  // from the leader, as rank_candidates writes it
  unsigned long long exchange[2];  // mbarriers (cluster.cuh): [0] the keys at the leader or its decision, [1] the output counts
};

template <LogitsOut kIn, int kCluster>
__device__ void topk_filter(const TopkParams& p) {
  await_previous_kernel();  // before this kernel's first global memory access
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8, "a portable cluster size");
  constexpr int kThreads = kTopkThreads;
  using In = TopkInput<kIn>;
  using Raw = typename In::Raw;
  using Tile = TopkTile<In, kThreads>;
  constexpr int kPer = Tile::kPer;
  constexpr int kDigits = 1 << kRefineBits;
  constexpr int kFinePer = kTopkFineBins / kThreads;  // fine bins per thread in a threshold scan
  constexpr int kDigitsPer = kDigits / kThreads;
  __shared__ TopkFilterSmem sm;
  extern __shared__ uint4 topk_stages[];  // two bitmaps of kFilterColumns bits
  unsigned int* const above_bits = reinterpret_cast<unsigned int*>(topk_stages);
  unsigned int* const tied_bits = above_bits + kFilterColumns / 32;

  const int rank = kCluster > 1 ? static_cast<int>(cluster::rank()) : 0;
  const int r = blockIdx.x / kCluster;
  const int len = topk_row_length(p, r);
  const int k = p.k;
  const void* row = static_cast<const char*>(p.logits) + static_cast<long long>(r) * p.logits_stride * sizeof(Raw);
  const bool aligned = (reinterpret_cast<unsigned long long>(row) & 15u) == 0;

  // This CTA's segment of the window [start, len): whole vectors from the one holding `start`, in rank
  // order (the host checked that the widest row's segment fits the bitmaps); columns before `start`
  // read as NaN.
  const TopkSegment segment = topk_segment<kPer, kCluster>(p, r, len, rank);
  const int start = segment.start, from = segment.from, begin = segment.begin, end = segment.end;
  const long long per_cta = segment.per_cta;
  const int vectors = (end - begin + kPer - 1) / kPer;
  const int words = (end - begin + 31) >> 5;
  if constexpr (kCluster > 1) {
    if (threadIdx.x == 0) {  // published by the first cluster barrier (every path has one before any send)
      cluster::mbarrier_init(&sm.exchange[0]);
      cluster::mbarrier_init(&sm.exchange[1]);
    }
  }

  // The bin of the cluster's counts (per_thread::value per thread from `counts`) where the running count reaches
  // `want`. The counts are free again when it returns (the cluster has read them).
  auto cluster_threshold = [&](const unsigned int* counts, auto per_thread, int want) {
    constexpr int kBinsPer = decltype(per_thread)::value;
    cluster::sync_all<kCluster>();
    int d[kBinsPer];
#pragma unroll
    for (int i = 0; i < kBinsPer; ++i)
      d[i] = static_cast<int>(cluster::sum<kCluster>(counts, kBinsPer * static_cast<int>(threadIdx.x) + i));
    if constexpr (kCluster > 1) cluster::sync();
    return scan_threshold<kThreads, kBinsPer>(d, want, sm);
  };

  // Vector v of the segment (columns begin + v * kPer ...); columns outside [start, end) read as NaN.
  auto load_slow = [&](int v) {
    uint4 out;
    Raw* x = reinterpret_cast<Raw*>(&out);
    const int c = begin + v * kPer;
#pragma unroll
    for (int e = 0; e < kPer; ++e) x[e] = c + e >= start && c + e < end ? In::load(row, c + e) : In::nan();
    return out;
  };
  auto load_fast = [&](int v) {
    return ld_global_stream(reinterpret_cast<const uint4*>(static_cast<const Raw*>(row) + begin + v * kPer));
  };
  auto load_any = [&](int v) {
    const int c = begin + v * kPer;
    return aligned && c >= start && c + kPer <= end ? load_fast(v) : load_slow(v);
  };
  // Calls body(vector, v) for every vector v of the segment, kUnroll loads in flight per thread
  // (consecutive threads read consecutive vectors).
  auto stream = [&](auto&& body) {
    constexpr int kUnroll = 4;
    constexpr int kStep = kUnroll * kThreads;  // vectors per iteration (32 KiB)
    // (An L2 bulk prefetch two iterations ahead is slower: docs/benchmarks/topk.md.)
    int v = threadIdx.x;
#pragma unroll 1
    for (; v + (kUnroll - 1) * kThreads < vectors; v += kStep) {
      uint4 x[kUnroll];
      const int first = begin + v * kPer, last = begin + (v + (kUnroll - 1) * kThreads) * kPer;
      if (aligned && first >= start && last + kPer <= end) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) x[u] = load_fast(v + u * kThreads);
      } else {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) x[u] = load_slow(v + u * kThreads);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) body(x[u], v + u * kThreads);
    }
#pragma unroll 1
    for (; v < vectors; v += kThreads) body(load_slow(v), v);
  };

  // 1. The first interval: from the given histogram, a sample (no histogram, or its bin too coarse:
  // report 3), or (neither) a count pass.
  int histogram_use = p.histogram != nullptr ? 1 : 0;
  ThresholdKeys th{};
  bool sampled = false, counted = false, need_count = false, stale = false;
  int passes = 0;
  if (histogram_use == 1) {
    const Threshold given =
        find_threshold<kCoarseBins>(p.histogram + static_cast<long long>(r) * kCoarseBins, k, true, sm.coarse);
    if (threadIdx.x == 0) {  // the row report's bin, while the histogram holds
      sm.report[0] = given.bin;
      sm.report[1] = given.count;
    }
    if (given.negative) {
      histogram_use = 2;
      need_count = true;
    } else {
      const KeyBounds b = coarse_key_bounds<In>(given.bin, sm.coarse);
      th = {b.candidate, b.above, k - given.above, given.count};
      // A bin that would take digit passes over a row long enough to sample (the same for every CTA
      // of a cluster: the counts and length are the row's): the row is selected as without it (3).
      if (given.bin < kCoarseBins && len - from >= kCluster * kTopkFilterSampleColumns &&
          histogram_bin_too_coarse(given.count, b.candidate, b.above, kFilterCandidates))
        histogram_use = 3;
    }
  }
  if ((histogram_use == 0 || histogram_use == 3) && len - from >= kCluster * kTopkFilterSampleColumns) {
    // The cutoff: the key at or above which about `target` of the row's columns lie (see the top),
    // estimated from a sample spread evenly over the segment: rounds of 8 logits per thread, one per 64K
    // columns (at most 4), so that about 200 sampled logits pass (with 48, 1-3 rows in 128 miss the
    // interval and take another pass). Counted in selector bins (1024: two per thread, so that a cluster
    // sums them with one 8-byte remote load per thread and CTA; summing 4096 fine bins costs 4096 remote
    // loads per CTA and makes a sampled row in a cluster of 4 or 8 several times slower than one with a
    // histogram), and placed inside the threshold bin by linear interpolation (keys are linear in the
    // value within a bin); kMinKey when the sample holds fewer.
    // Every CTA of a cluster must reach the same cutoff, so the sample's size comes from the row
    // (per_cta), not from this CTA's segment (the last one may be shorter and cross a 64K boundary).
    const int rounds = static_cast<int>(min(4ll, max(1ll, (per_cta + 65535) / 65536)));
    const int per_thread = (8 / kPer) * rounds;
    // The sample is read in runs of 8 vectors (128 bytes, whole memory sectors) spread evenly: single
    // 16-byte vectors spread as widely cost the DRAM bursts around them too (a sampled row then takes
    // 40 % longer than one with a histogram).
    constexpr int kRun = 8;
    const int runs = kThreads * per_thread / kRun;
    const int step = max(kRun, vectors / runs / kRun * kRun);  // vectors from one run to the next
    auto sample_vector = [&](int j) {
      const int i = j * kThreads + static_cast<int>(threadIdx.x);
      return i / kRun * step + i % kRun;
    };
    for (int i = threadIdx.x; i < kTopkSelectorBins + 4; i += kThreads) sm.hist[i] = 0;
    __syncthreads();
    // Every sample load is issued before any is counted: one memory latency, not one per vector.
    constexpr int kMaxSample = 4 * (8 / kPer);
    uint4 x[kMaxSample];
#pragma unroll
    for (int j = 0; j < kMaxSample; ++j) {
      const int v = sample_vector(j);
      if (j < per_thread && v < vectors) x[j] = load_any(v);
    }
#pragma unroll
    for (int j = 0; j < kMaxSample; ++j) {
      const int v = sample_vector(j);
      if (j < per_thread && v < vectors) {
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
          const Raw raw = Tile::element(x[j], e);
          atomicAdd(&sm.hist[selector_bin_or_nan_slot<In>(raw)], 1u);
        }
      }
    }
    // Scaled to the sample: the sampled share of the row's columns.
    const long long sample = static_cast<long long>(runs) * kRun * kPer;  // the nominal sample (a short last segment reads less)
    // Both targets stay C / 4 or more from k, so that sampling noise rarely puts k outside [lo, hi) (a miss
    // costs two more passes), and the interval about C / 2 wide, so that it rarely overflows the buffer.
    const int target = k + max((kFilterCandidates - k) / 2, kFilterCandidates / 4);
    const int want = max(1, static_cast<int>((target * sample * kCluster + (len - from) - 1) / (len - from)));
    // Keys at or above `high` are winners outright, marked in the bitmap instead of kept as candidates:
    // about half the buffer's work and the ranking's.
    const int target_high = k - min(k / 2, kFilterCandidates / 4);
    const int want_high = static_cast<int>(static_cast<long long>(target_high) * sample * kCluster / (len - from));
    static_assert(kTopkSelectorBins == 2 * kThreads, "two selector bins per thread");
    cluster::sync_all<kCluster>();
    int d[2];
    {
      const int i = 2 * static_cast<int>(threadIdx.x);
      if constexpr (kCluster == 1) {
        d[0] = static_cast<int>(sm.hist[i]);
        d[1] = static_cast<int>(sm.hist[i + 1]);
      } else {
        uint2 v[kCluster];
#pragma unroll
        for (int q = 0; q < kCluster; ++q) v[q] = cluster::load2(cluster::map(&sm.hist[i], q));
        d[0] = d[1] = 0;
#pragma unroll
        for (int q = 0; q < kCluster; ++q) {
          d[0] += static_cast<int>(v[q].x);
          d[1] += static_cast<int>(v[q].y);
        }
        cluster::sync();
      }
    }
    const FoundBin s = scan_threshold<kThreads, 2>(d, want, sm);
    unsigned int high = In::kMaxKey + 1;
    if (want_high >= 1) {
      // Interpolated like the cutoff: a bin's edge would leave up to a whole bin more candidates, past
      // the buffer at k near C.
      const FoundBin h = scan_threshold<kThreads, 2>(d, want_high, sm);
      if (h.bin < kTopkSelectorBins) high = interpolated_selector_key<In>(h.bin, h.above, h.count, want_high);
    }
    const unsigned int cutoff =
        s.bin < kTopkSelectorBins ? interpolated_selector_key<In>(s.bin, s.above, s.count, want) : In::kMinKey;
    th = {cutoff, max(high, cutoff), k, 0};
    sampled = true;
  } else if (histogram_use == 0) {
    need_count = true;
  }

  // 2-3. Filter, until the interval is known to hold the k-th score.
  int above_all = 0, candidates_all = 0, above_mine = 0, candidates_mine = 0;
  int round = 0;
#pragma unroll 1
  for (;; ++round) {
    if (kCluster > 1 && round > 0) cluster::sync();  // the cluster has read the previous round's counts
    if (need_count) {
      for (int i = threadIdx.x; i < kTopkFineBins + 4; i += kThreads) sm.hist[i] = 0;
      __syncthreads();
      stream([&](const uint4& x, int) {
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
          const Raw raw = Tile::element(x, e);
          atomicAdd(&sm.hist[fine_bin_or_nan_slot<In>(raw)], 1u);
        }
      });
      const FoundBin f = cluster_threshold(sm.hist, BinsPerThread<kFinePer>{}, k);
      if (threadIdx.x == 0) {  // the report: the fine bin's selector bin
        sm.report[0] = f.bin >> 2;
        sm.report[1] = f.group;
      }
      th = f.bin < kTopkFineBins ? threshold_keys_of_fine_bin<In>(f, k, kTopkFineBins)
                                 : ThresholdKeys{In::kMinKey, In::kMinKey, k - f.total, 0};
      counted = true;
      sampled = need_count = false;
      passes = 0;  // the report counts the passes the counted bin needed
    }
    // A counted fine bin is narrowed past the resident selector's buffer (the row report's rule), a
    // given histogram's bin past this one's.
    const int narrow_above = counted ? kTopkResidentCandidates : kFilterCandidates;
#pragma unroll 1
    while (!sampled && th.count > narrow_above && th.hi - th.lo > 1) {
      const int shift = digit_shift<kRefineBits>(th.lo, th.hi);
      for (int i = threadIdx.x; i < kDigits; i += kThreads) sm.digits[i] = 0;
      __syncthreads();
      const unsigned int lo = th.lo, hi = th.hi;
      stream([&](const uint4& x, int) {
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
          const Raw raw = Tile::element(x, e);
          const unsigned int key = In::key(raw);
          if (!In::is_nan(raw) && key >= lo && key < hi)
            atomicAdd(&sm.digits[kDigits - 1 - static_cast<int>((key - lo) >> shift)], 1u);
        }
      });
      const FoundBin g = cluster_threshold(sm.digits, BinsPerThread<kDigitsPer>{}, th.need);
      // The first digit pass counts the histogram's threshold bin: it must hold what it promised.
      if (g.bin >= kDigits || (passes == 0 && g.total != th.count)) {
        stale = true;
        break;
      }
      narrow_to_digit<kDigits>(th, g, shift);
      ++passes;
    }
    if (stale) {  // only a given histogram's bin can be stale
      stale = false;
      histogram_use = 2;
      need_count = true;
      continue;
    }

    // The filter pass.
    const bool single = th.hi - th.lo <= 1;
    for (int i = threadIdx.x; i < words; i += kThreads) {
      above_bits[i] = 0;
      tied_bits[i] = 0;
    }
    if (threadIdx.x == 0) {
      sm.candidates = 0;
      sm.kth_key = ~0u;
    }
    __syncthreads();
    const float above_at = bound_value<In>(th.hi), candidate_at = bound_value<In>(th.lo);
    stream([&](const uint4& x, int v) {
      if (!(vector_max<kIn>(x) >= candidate_at)) return;
      const int c = v * kPer;  // a vector lies within one bitmap word
      unsigned int a = 0, b = 0;
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const float value = In::value(Tile::element(x, e));
        a |= value >= above_at ? 1u << e : 0u;
        b |= value >= candidate_at ? 1u << e : 0u;
      }
      b &= ~a;
      if (a != 0) atomicOr(&above_bits[c >> 5], a << (c & 31));
      if (b == 0) return;
      if (single) {
        atomicOr(&tied_bits[c >> 5], b << (c & 31));
        return;
      }
      for (unsigned int m = b; m != 0; m &= m - 1) {
        const int e = __ffs(static_cast<int>(m)) - 1;
        const int slot = atomicAdd(&sm.candidates, 1);  // past the buffer it still counts
        if (slot < kFilterCandidates) {
          sm.candidate_key[slot] = In::key(Tile::element(x, e));
          sm.candidate_index[slot] = c + e;
        }
      }
    });
    // The counts from the bitmaps and the buffer's counter, not per vector: the pass stays lean.
    __syncthreads();
    unsigned long long bits = 0;  // above | tied << 32
    for (int i = threadIdx.x; i < words; i += kThreads)
      bits += static_cast<unsigned long long>(__popc(above_bits[i])) | static_cast<unsigned long long>(__popc(tied_bits[i]))
                                                                           << 32;
    const unsigned long long sums = BlockScan<kThreads>::sum(bits, sm.scan64);
    above_mine = static_cast<int>(sums & 0xffffffffu);
    candidates_mine = single ? static_cast<int>(sums >> 32) : sm.candidates;
    above_all = above_mine;
    candidates_all = candidates_mine;
    if constexpr (kCluster > 1) {
      if (threadIdx.x < kCluster) {
        cluster::store(cluster::map(&sm.peer_above[rank], threadIdx.x), above_mine);
        cluster::store(cluster::map(&sm.peer_candidates[rank], threadIdx.x), candidates_mine);
      }
      cluster::sync();
      above_all = candidates_all = 0;
#pragma unroll
      for (int q = 0; q < kCluster; ++q) {
        above_all += sm.peer_above[q];
        candidates_all += sm.peer_candidates[q];
      }
    }
    // The interval holds the k-th score (or every selectable column was seen), and its candidates fit.
    const bool seen_all = th.lo <= In::kMinKey;
    const bool holds =
        above_all <= k && (above_all + candidates_all >= k || seen_all) && (single || candidates_all <= kFilterCandidates);
    if (sampled) {
      if (holds && above_all < k) break;
      need_count = true;  // the cutoff missed: count the row
      continue;
    }
    // What the histogram or the counts promised for this interval.
    const bool adds_up = above_all == k - th.need && candidates_all == th.count;
    if (holds && adds_up) break;
    if (counted) break;  // counted in this launch: only logits changing under it could differ
    histogram_use = 2;
    need_count = true;
  }

  // 4. Which candidates win: all of them when exactly `need` are in the interval, else they are ranked:
  // a single CTA's few each against all, more (and a cluster's) by digit rounds on the leader.
  const bool single = th.hi - th.lo <= 1;
  const int need = max(0, k - above_all);
  const int mine = min(candidates_mine, kFilterCandidates);
  int candidates_before = 0;
  if constexpr (kCluster > 1) {
#pragma unroll
    for (int q = 0; q < kCluster; ++q) candidates_before += q < rank ? sm.peer_candidates[q] : 0;
  }
  // Ranks the first `size` candidate keys, of which `need` win, into sm.decision. A sampled interval
  // reaches past every key: its candidates are first counted in selector bins (a few hundred share the
  // threshold bin) rather than in digits of that whole span (three or four rounds).
  auto rank_keys = [&](int size, int want) {
    unsigned long long lo = th.lo, hi = static_cast<unsigned long long>(th.hi);
    if (sampled) {
      for (int i = threadIdx.x; i < kTopkSelectorBins; i += kThreads) sm.digits[i] = 0;
      __syncthreads();
      for (int i = threadIdx.x; i < size; i += kThreads) atomicAdd(&sm.digits[In::selector_bin(sm.candidate_key[i])], 1u);
      __syncthreads();
      constexpr int kBinsPer = kTopkSelectorBins / kThreads;
      int d[kBinsPer];
#pragma unroll
      for (int i = 0; i < kBinsPer; ++i) d[i] = static_cast<int>(sm.digits[kBinsPer * threadIdx.x + i]);
      const FoundBin g = scan_threshold<kThreads, kBinsPer>(d, want, sm);  // size >= want: the bin exists
      hi = min(hi, g.bin == 0 ? In::kMaxKey + 1ull : static_cast<unsigned long long>(In::lowest_key_of_selector_bin(g.bin - 1)));
      lo = max(lo, static_cast<unsigned long long>(In::lowest_key_of_selector_bin(g.bin)));
      want -= g.above;
      if (g.count == want) {  // the whole bin wins
        if (threadIdx.x == 0) {
          sm.decision[0] = static_cast<unsigned int>(lo);
          sm.decision[1] = static_cast<unsigned int>(lo);
          sm.decision[2] = 0;
          sm.decision[3] = 1;
        }
        __syncthreads();
        return;
      }
    }
    rank_candidates<kThreads>(size, want, lo, hi, sm);
  };
  unsigned int win_at = th.hi, tie_from = th.lo;
  int tie_slots = single ? need : 0;
  bool all_in = true, ranked = false;  // ranked: the winners are already marked
  if (!single && need == 0) {  // only logits changing under the launch: nothing from the interval
    win_at = tie_from = In::kMaxKey + 1;
    all_in = false;
  } else if (!single && candidates_all > need) {
    if constexpr (kCluster > 1) {
      rank_on_leader<kThreads, kCluster>(sm, rank, mine, candidates_before, candidates_all,
                                         [&] { rank_keys(candidates_all, need); });
    } else if (candidates_all <= kThreads / kPairwiseGroup) {
      rank_pairwise<kThreads>(candidates_all, need, sm, above_bits);
      ranked = true;
    } else {
      rank_keys(candidates_all, need);
    }
    if (!ranked) {
      win_at = sm.decision[0];
      tie_from = sm.decision[1];
      tie_slots = static_cast<int>(sm.decision[2]);
      all_in = sm.decision[3] != 0;
    }
  }
  if (!single) {
    unsigned int smallest = ~0u;  // winning candidate keys, for the report of a sampled row
    for (int i = threadIdx.x; i < mine; i += kThreads) {
      const unsigned int key = sm.candidate_key[i];
      const int s = sm.candidate_index[i];
      if (ranked) {
        if ((above_bits[s >> 5] >> (s & 31)) & 1u) smallest = min(smallest, key);
      } else if (key >= win_at || (all_in && key >= tie_from)) {
        atomicOr(&above_bits[s >> 5], 1u << (s & 31));
        smallest = min(smallest, key);
      } else if (key >= tie_from) {
        atomicOr(&tied_bits[s >> 5], 1u << (s & 31));
      }
    }
    if (smallest != ~0u) atomicMin(&sm.kth_key, smallest);
  }
  __syncthreads();

  // 5. Output positions from the bitmaps: each thread counts a run of words, one scan places them.
  const int per_thread = (words + kThreads - 1) / kThreads;
  const int w0 = min(words, static_cast<int>(threadIdx.x) * per_thread), w1 = min(words, w0 + per_thread);
  unsigned long long counts = 0;  // winners | ties << 32
  for (int w = w0; w < w1; ++w)
    counts += static_cast<unsigned long long>(__popc(above_bits[w])) | static_cast<unsigned long long>(__popc(tied_bits[w]))
                                                                           << 32;
  unsigned long long cta_total;
  const unsigned long long before = BlockScan<kThreads>::exclusive(counts, sm.scan64, cta_total);
  int above_before = 0, tied_before = 0, selected_above = static_cast<int>(cta_total & 0xffffffffu),
      tied_all = static_cast<int>(cta_total >> 32);
  unsigned int kth = sm.kth_key;
  if constexpr (kCluster > 1) {
    // Sent after this CTA's last access to another CTA's shared memory and awaited from every other
    // CTA (no fence, unlike a cluster barrier): so no CTA leaves while another may still reach it.
    const void* const slots[3] = {sm.peer_selected_above, sm.peer_tied, sm.peer_kth};
    cluster::send_to_all<kCluster>(&sm.exchange[1], rank, slots,
                                   {static_cast<unsigned int>(selected_above), static_cast<unsigned int>(tied_all), kth});
    const int own_above = selected_above, own_tied = tied_all;
    const unsigned int own_kth = kth;
    selected_above = tied_all = 0;
#pragma unroll
    for (int q = 0; q < kCluster; ++q) {
      const bool own = q == rank;
      above_before += q < rank ? sm.peer_selected_above[q] : 0;
      tied_before += q < rank ? sm.peer_tied[q] : 0;
      selected_above += own ? own_above : sm.peer_selected_above[q];
      tied_all += own ? own_tied : sm.peer_tied[q];
      kth = min(kth, own ? own_kth : sm.peer_kth[q]);
    }
  }
  // This CTA's winners hold a contiguous range of output positions from `base`, placed in shared memory
  // first so that the global writes are coalesced.
  const int base = above_before + min(tied_before, tie_slots);
  int na = above_before + static_cast<int>(before & 0xffffffffu), nt = tied_before + static_cast<int>(before >> 32);
  for (int w = w0; w < w1; ++w) place_word(sm.out, 32 * w, above_bits[w], tied_bits[w], na, nt, tie_slots, base);
  __syncthreads();
  const int cta_selected =
      static_cast<int>(cta_total & 0xffffffffu) + min(max(tie_slots - tied_before, 0), static_cast<int>(cta_total >> 32));
  int* indices = p.indices + static_cast<long long>(r) * k;
  float* values = p.values != nullptr ? p.values + static_cast<long long>(r) * k : nullptr;
  for (int i = threadIdx.x; i < cta_selected; i += kThreads) {
    const int s = begin + sm.out[i];
    indices[base + i] = output_index(p, r, s, start);
    if (values != nullptr) values[base + i] = In::value(In::load(row, s));
  }
  if (rank == 0) {
    const int selected = selected_above + min(tied_all, tie_slots);
    for (int i = selected + static_cast<int>(threadIdx.x); i < k; i += kThreads) {
      indices[i] = -1;
      if (values != nullptr) values[i] = negative_infinity();
    }
    if (threadIdx.x == 0) {
      // The k-th score's bin: the histogram's, the counted fine bin's selector bin, or (sampled) the
      // selector bin of the smallest winning key.
      const bool all = selected < k;
      if (tied_all > 0 && tie_slots > 0) kth = tie_from;  // a tie is the smallest winner
      int* out = p.report + static_cast<long long>(r) * kTopkReportInts;
      out[0] = histogram_use;
      out[1] = all ? kTopkSelectorBins : sampled ? In::selector_bin(kth) : sm.report[0];
      out[2] = all ? 0 : sampled ? -1 : sm.report[1];
      out[3] = passes;
    }
  }
}

}  // namespace kernels
}  // namespace flash_indexer
