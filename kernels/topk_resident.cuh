#pragma once
// Exact top-k (contract §4) of rows whose segment per CTA stays in shared memory (kStages *
// kStageVectors vectors: 16K FP32 or 32K FP16/BF16 logits per CTA with 512 threads, twice that in the
// 1024-thread form), one row per cluster of kCluster CTAs. A short row's time is its fixed cost, so this selector spends few instructions per logit and
// few barriers (topk_split.cuh streams longer rows):
//   1. The segment arrives by bulk copies on sm_90, else by cp.async (TopkResidentTile), and the CTA
//      counts its fine bins (4096) as each row of the tile lands. The threshold
//      bin is found over the cluster's counts in two steps, so that few counts cross CTAs (distributed
//      shared memory): the totals of groups of bins (eight, or four with 1024 threads: one group per
//      thread; in a cluster summed by a reduce-scatter and an all-gather) find the group, then its bins
//      (which every CTA sends to every other) the bin.
//   2. The threshold fine bin is a key interval [lo, hi): the columns above it are marked in a bitmap of
//      the segment, those inside it kept as candidates (key, column) in arrival order. A bin with more
//      candidates than the buffer is first narrowed by 10-bit digits of its keys (one more pass over the
//      resident segment per step) until it fits or holds a single key, whose columns are marked as ties.
//   3. The candidates' keys are ranked by 10-bit digits until the winners are known: in a cluster,
//      every CTA sends its keys to every other (each knows its place in the cluster's list from the
//      bin counts) and ranks the whole list itself, or, after a narrowing pass, the leader ranks them
//      and sends the decision back. Each CTA marks its own: a winner in the bitmap, or, when only some
//      columns of the last key are needed, a tie in a second bitmap. A single CTA with at most
//      kThreads / 4 candidates ranks them each against all instead, by key and then column.
//   4. The output is the bitmaps read in column order: one scan of per-word counts places every winner,
//      and the first ties by column fill what the winners leave. The bytes are therefore ascending by
//      column and deterministic whatever order the candidates arrived in, for every cluster size.
// Data crosses CTAs only through st.async exchanges (cluster.cuh), which carry no GPU-scope fence; the
// one cluster barrier (where no narrowing pass runs) is relaxed and split, and only publishes the
// mbarriers' initialisation.
// A given histogram is not read: counting a resident segment costs less than checking one (the row
// report says histogram_use 0).
#include "cluster.cuh"
#include "grid_dependency.cuh"
#include "topk_common.cuh"
#include "topk_threshold_scan.cuh"
#include "topk_tile.cuh"

namespace flash_indexer {
namespace kernels {

constexpr int kResidentCandidates = kTopkResidentCandidates;
// The output scan packs a thread's winners (low bits) and ties (high bits) into one word.
constexpr int kWinnerBits = 15;
constexpr unsigned int kWinnerMask = (1u << kWinnerBits) - 1u;

template <int kThreads>
struct TopkResidentSmem {
  // Bitmap words of the largest segment (kMaxLive vectors of eight 16-bit logits per thread).
  static constexpr int kWords = kMaxLive * kThreads * 8 / 32;
  // The counts are last read before the narrowing passes, the winners first written after them, so the
  // two share storage (a separate out[4096] would cost the 512-thread form its second CTA per SM).
  union {
    alignas(16) unsigned int hist[kTopkFineBins + 4];  // fine-bin counts; NaNs are counted past the end, in hist[kTopkFineBins]
    int out[kMaxTopk];  // this CTA's winners (columns of the segment), in output order
  };
  // Narrowing and ranking digit counts, largest digit first; before them, in a cluster, the cluster's
  // group totals (the all-gather's).
  unsigned int digits[1 << kRefineBits];
  unsigned int candidate_key[kResidentCandidates];  // the leader's holds the whole cluster's keys when ranking
  int candidate_index[kResidentCandidates];  // column in the segment
  unsigned int above[kWords];  // bit per column of the segment: a winner
  unsigned int tied[kWords];  // bit per column: holds the last key, lowest columns first
  // The counts of each thread's fine bins; in a cluster, [q * kSlice + j]: CTA q's totals of this CTA's
  // slice of the groups (the reduce-scatter's).
  unsigned int group_total[kThreads];
  alignas(16) unsigned int warp_sums[kThreads / 32];
  int found[4];  // scan_threshold: bin, count before it, count in it, count in its aligned group of four
  int found_bin[4];  // the threshold fine bin: bin, count before it, count in it, count in its selector bin
  int candidates;
  // Written by the cluster's CTAs (each its own slot): through st.async, or before a cluster barrier
  // (peer_candidates, after a narrowing pass).
  int peer_candidates[16];
  int peer_above[16];
  int peer_tied[16];
  unsigned int decision[4];  // the ranking's: keys >= [0] win, [1] lowest key in the running, [2] tie slots, [3] all in
  int peer_bin[16 * 8];  // [q * kGroup + j]: CTA q's count of fine bin j of the threshold's group
  // mbarriers: [0] the candidate keys (or the leader's decision), [1] the output counts, [2] this CTA's
  // slice of every CTA's group totals, [3] the cluster's group totals, [4] the threshold group's bins.
  unsigned long long exchange[5];
  unsigned long long loaded[kMaxLive];  // the segment's rows of kThreads vectors (TopkResidentTile::load)
};

// Ranks the first `size` keys of sm.candidate_key (every one in [lo, hi)), of which `need` win, by
// 10-bit digits of key - lo: writes the decision to sm.decision. Keys >= decision[0] win; keys in
// [decision[1], decision[0]) all win if decision[3], else the first decision[2] of them by column.
// Every thread of the CTA calls it.
template <int kThreads, class Smem>
__device__ void rank_candidates(int size, int need, unsigned long long lo, unsigned long long hi, Smem& sm) {
  constexpr int kDigits = 1 << kRefineBits;
  constexpr int kPer = kDigits / kThreads;
  int ties = need;
  bool all = false;
#pragma unroll 1
  while (hi - lo > 1) {
    const int shift = max(0, 64 - __clzll(static_cast<long long>(hi - 1 - lo)) - kRefineBits);
    for (int i = threadIdx.x; i < kDigits; i += kThreads) sm.digits[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < size; i += kThreads) {
      const unsigned long long key = sm.candidate_key[i];
      if (key >= lo && key < hi) atomicAdd(&sm.digits[kDigits - 1 - static_cast<int>((key - lo) >> shift)], 1u);
    }
    __syncthreads();
    int d[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) d[i] = static_cast<int>(sm.digits[kPer * threadIdx.x + i]);
    const FoundBin g = scan_threshold<kThreads, kPer>(d, ties, sm);
    const unsigned long long digit = static_cast<unsigned long long>(kDigits - 1 - g.bin);
    ties -= g.above;
    lo += digit << shift;
    hi = min(hi, lo + (1ull << shift));
    if (g.count == ties) {
      all = true;
      break;
    }
  }
  if (threadIdx.x == 0) {
    sm.decision[0] = static_cast<unsigned int>(hi);
    sm.decision[1] = static_cast<unsigned int>(lo);
    sm.decision[2] = static_cast<unsigned int>(ties);
    sm.decision[3] = all ? 1u : 0u;
  }
  __syncthreads();
}

// A single CTA's few candidates (at most kThreads / kPairwiseGroup) are ranked each against all, by
// key and then column, a group of at least kPairwiseGroup threads per candidate: one barrier, where
// digit rounds (rank_candidates) cost four each and a one-warp ranking is a long dependent chain (a
// fifth of an 8K FP32 row's cycles). Clusters keep the digit rounds: a pairwise ranking on the leader
// after gathering keys and columns, or each CTA ranking its own against the others' buffers through
// distributed shared memory (remote loads in a dependent loop), are both slower
// (docs/benchmarks/topk.md, "Tried and not kept").
constexpr int kPairwiseGroup = 4;

// Marks in the bitmap `above` each of the first `size` (need < size <= kThreads / kPairwiseGroup)
// candidates of sm.candidate_key / sm.candidate_index with fewer than `need` ahead of it (the columns
// are distinct, so the ranks are a permutation). Every thread of the CTA calls it; it ends with a barrier.
template <int kThreads, class Smem>
__device__ void rank_pairwise(int size, int need, Smem& sm, unsigned int* above) {
  int group = 32;  // a power of two, so a group never straddles a warp
  while (size * group > kThreads) group >>= 1;
  const int shift = 31 - __clz(group);
  const int t = static_cast<int>(threadIdx.x), i = t >> shift, sub = t & (group - 1);
  if (((t & ~31) >> shift) < size) {  // warp-uniform
    const bool has = i < size;
    // An empty slot has key 0 (below every score's key) and the last column: never ahead of a candidate.
    const unsigned int key = has ? sm.candidate_key[i] : 0u;
    const int column = has ? sm.candidate_index[i] : 0x7fffffff;
    int ahead = 0;
#pragma unroll 4
    for (int j = sub; j < size; j += group) {
      const unsigned int kj = sm.candidate_key[j];
      const int cj = sm.candidate_index[j];
      ahead += static_cast<int>(kj > key || (kj == key && cj < column));
    }
    for (int d = 1; d < group; d <<= 1) ahead += __shfl_xor_sync(0xffffffffu, ahead, d);
    if (has && sub == 0 && ahead < need) atomicOr(&above[column >> 5], 1u << (column & 31));
  }
  __syncthreads();
}

// Places one bitmap word's winners (bits of `a`) and ties (bits of `t`), columns from + bit, at their
// output positions in out[position - base]: na winners and nt ties come before them, and only the
// first tie_slots ties are taken. Shared by the selectors that read bitmaps (resident, filter).
__device__ __forceinline__ void place_word(int* out, int from, unsigned int a, unsigned int t, int& na, int& nt, int tie_slots,
                                           int base) {
  for (unsigned int m = a | t; m != 0; m &= m - 1) {
    const int bit = __ffs(static_cast<int>(m)) - 1;
    int position;
    if ((a >> bit) & 1u) {
      position = na + min(nt, tie_slots);
      ++na;
    } else {
      position = nt < tie_slots ? na + nt : -1;
      ++nt;
    }
    if (position >= 0) out[position - base] = from + bit;
  }
}

// A cluster's candidates ranked on its leader (rank 0): every other CTA (`me`, its cluster rank)
// sends its `mine` keys to the leader's buffer after `before` keys (the cluster's `total`), the leader
// runs rank() (which writes sm.decision, as rank_candidates does) and sends the decision to every CTA.
// Both through sm.exchange[0] (the leader counts the keys on it, the others the decision), so no
// cluster barrier. Every thread of every CTA calls it.
template <int kThreads, int kCluster, class Smem, class Rank>
__device__ __forceinline__ void rank_on_leader(Smem& sm, int me, int mine, int before, int total, Rank&& rank) {
  if (me != 0) {
    if (threadIdx.x == 0) cluster::expect_bytes(&sm.exchange[0], 16u);
    const unsigned int bar = cluster::map(&sm.exchange[0], 0);
    for (int i = threadIdx.x; i < mine; i += kThreads)
      cluster::send(cluster::map(&sm.candidate_key[before + i], 0), sm.candidate_key[i], bar);
    cluster::wait_received(&sm.exchange[0]);
  } else {
    if (threadIdx.x == 0) cluster::expect_bytes(&sm.exchange[0], 4u * static_cast<unsigned int>(total - mine));
    cluster::wait_received(&sm.exchange[0]);
    rank();
    if (threadIdx.x >= 1 && threadIdx.x < kCluster) {
      const unsigned int bar = cluster::map(&sm.exchange[0], threadIdx.x);
      for (int j = 0; j < 4; ++j) cluster::send(cluster::map(&sm.decision[j], threadIdx.x), sm.decision[j], bar);
    }
  }
}

// Row r on the kCluster CTAs of its cluster (this one is `rank`); sm is the kernel's static part.
// kPreloaded: the caller has already written this CTA's segment into shared memory (the sparse decode
// step computes it there: sparse_decode_step_sm90.cuh), NaN past the window, and synchronized the block;
// p.logits is not read.
template <LogitsOut kIn, int kCluster, int kStages, int kThreads, bool kPreloaded = false>
__device__ __forceinline__ void topk_resident_row(const TopkParams& p, const int r, const int rank,
                                                  TopkResidentSmem<kThreads>& sm) {
  // 16: a non-portable cluster size (sm_90; the host allows it per kernel).
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8 || kCluster == 16, "a cluster size");
  static_assert(kStages * kStageVectors <= kMaxLive * kThreads, "stages");
  static_assert(kThreads == 512 || kThreads == 1024, "threads");
  using In = TopkInput<kIn>;
  using Tile = TopkResidentTile<In, kThreads>;
  constexpr int kPer = Tile::kPer;
  constexpr int kDigits = 1 << kRefineBits;
  static_assert(kMaxLive * kPer <= 64, "a thread's logits fit a 64-bit mask");
  extern __shared__ uint4 topk_stages[];  // kStages * kStageVectors

  const int len = topk_row_length(p, r);
  const int k = p.k;
  const void* row = static_cast<const char*>(p.logits) + static_cast<long long>(r) * p.logits_stride * sizeof(typename In::Raw);
  const bool aligned = (reinterpret_cast<unsigned long long>(row) & 15u) == 0;

  // This CTA's segment of the window [start, len): whole vectors from the one holding `start`, in rank
  // order (the host checked that the widest row fits); columns before `start` read as NaN.
  const TopkSegment segment = topk_segment<kPer, kCluster>(p, r, len, rank);
  const int start = segment.start, begin = segment.begin, end = segment.end;
  const int vectors = (end - begin + kPer - 1) / kPer;
  const int live = Tile::live_for(max(vectors, 1));
  const int spans = vectors > 0 ? live : 0;  // vectors this thread reads
  const Tile tile{topk_stages, begin, live};
  if (vectors > 0 && !kPreloaded) tile.load(row, start, end, aligned, sm.loaded);
  const int words = (end - begin + 31) >> 5;
  constexpr int kGroup = kTopkFineBins / kThreads;  // fine bins per thread: 8 or 4
  static_assert(kGroup == 4 || kGroup == 8, "whole vectors of fine bins per thread");
#pragma unroll
  for (int j = 0; j < kGroup / 4; ++j) reinterpret_cast<uint4*>(sm.hist)[kGroup / 4 * threadIdx.x + j] = make_uint4(0, 0, 0, 0);
  for (int i = threadIdx.x; i < words; i += kThreads) {
    sm.above[i] = 0;
    sm.tied[i] = 0;
  }
  if (threadIdx.x == 0) sm.candidates = 0;
  constexpr int kSlice = kThreads / kCluster;  // group totals summed by each CTA of a cluster
  if constexpr (kCluster > 1) {
    if (threadIdx.x == 0) {  // published to the cluster by the barrier that arrives here, before any CTA sends
#pragma unroll
      for (int i = 0; i < 5; ++i) cluster::mbarrier_init(&sm.exchange[i]);
      cluster::expect_bytes(&sm.exchange[2], 4u * (kThreads - kSlice));
      cluster::expect_bytes(&sm.exchange[3], 4u * (kThreads - kSlice));
    }
    cluster::arrive_relaxed();
  }
  __syncthreads();  // the counts are zero and the load's mbarriers initialised before any thread uses them

  // 1. Fine-bin counts, and the threshold bin over the cluster's. Each thread counts its vector of a
  // row of the tile as soon as that row has landed.
#pragma unroll 1
  for (int u = 0; u < spans; ++u) {
    if constexpr (!kPreloaded) tile.wait_row(u, aligned, sm.loaded);
    const uint4 v = tile.vector(u);
#pragma unroll
    for (int e = 0; e < kPer; ++e) atomicAdd(&sm.hist[fine_bin_or_nan_slot<In>(Tile::element(v, e))], 1u);
  }
  // The threshold bin over the cluster's counts in two steps, so that few counts cross CTAs: the totals
  // of the groups of kGroup bins (one group per thread) find the group, then its bins the bin.
  __syncthreads();
  {
    unsigned int total = 0;
#pragma unroll
    for (int j = 0; j < kGroup / 4; ++j) {
      const uint4 a = reinterpret_cast<const uint4*>(sm.hist)[kGroup / 4 * threadIdx.x + j];
      total += a.x + a.y + a.z + a.w;
    }
    if constexpr (kCluster == 1) {
      sm.group_total[threadIdx.x] = total;
    } else {
      // A reduce-scatter, then an all-gather, both through st.async: CTA q sums the totals of groups
      // [q * kSlice, (q + 1) * kSlice) over the cluster and sends the sums to every CTA. Each CTA reads
      // 2 * kThreads words remotely where every CTA reading every total takes kCluster * kThreads (4.9K
      // cycles at 16 CTAs, bound by the request rate of distributed shared memory, against 1.6K).
      const int j = static_cast<int>(threadIdx.x) % kSlice, owner = static_cast<int>(threadIdx.x) / kSlice;
      cluster::wait();  // every CTA's mbarriers are initialised
      if (owner == rank) sm.group_total[rank * kSlice + j] = total;
      else cluster::send(cluster::map(&sm.group_total[rank * kSlice + j], owner), total, cluster::map(&sm.exchange[2], owner));
      cluster::wait_received(&sm.exchange[2]);
      __syncthreads();
      unsigned int sum = 0;  // of group rank * kSlice + j; this thread sends it to CTA `owner`
#pragma unroll
      for (int q = 0; q < kCluster; ++q) sum += sm.group_total[q * kSlice + j];
      if (owner == rank) sm.digits[rank * kSlice + j] = sum;
      else cluster::send(cluster::map(&sm.digits[rank * kSlice + j], owner), sum, cluster::map(&sm.exchange[3], owner));
      cluster::wait_received(&sm.exchange[3]);
    }
  }
  __syncthreads();
  const int group_count[1] = {static_cast<int>(kCluster == 1 ? sm.group_total[threadIdx.x] : sm.digits[threadIdx.x])};
  const FoundBin group = scan_threshold<kThreads, 1>(group_count, k, sm);
  if constexpr (kCluster > 1) {
    // Every CTA sends its bins of the threshold group to every other (the group is the same in all).
    if (group.bin < kThreads) {
      if (threadIdx.x == 0) cluster::expect_bytes(&sm.exchange[4], 4u * kGroup * (kCluster - 1));
      const int q = static_cast<int>(threadIdx.x) / kGroup, j = static_cast<int>(threadIdx.x) % kGroup;
      if (q < kCluster && q != rank)
        cluster::send(cluster::map(&sm.peer_bin[rank * kGroup + j], q), sm.hist[kGroup * group.bin + j],
                      cluster::map(&sm.exchange[4], q));
      if (threadIdx.x < 32) cluster::wait_received(&sm.exchange[4]);
    }
  }
  if (group.bin < kThreads && threadIdx.x < 32) {
    // Lane l takes bin l % kGroup of the group in CTA l / kGroup (and every 32 / kGroup CTAs after it);
    // the lanes of a bin sum over the CTAs.
    const int lane = threadIdx.x;
    int count = 0;
#pragma unroll
    for (int q = lane / kGroup; q < kCluster; q += 32 / kGroup) {
      const int own = static_cast<int>(sm.hist[kGroup * group.bin + lane % kGroup]);
      const int c = q == rank ? own : sm.peer_bin[q * kGroup + lane % kGroup];
      if constexpr (kCluster > 1) {
        if (q == rank) sm.peer_bin[q * kGroup + lane % kGroup] = c;
      }
      count += c;
    }
#pragma unroll
    for (int d = kGroup; d < 32; d <<= 1) count += __shfl_xor_sync(0xffffffffu, count, d);
    int b[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) b[j] = __shfl_sync(0xffffffffu, count, j);
    if (lane == 0) {
      int before = group.above;
#pragma unroll
      for (int i = 0; i < kGroup; ++i) {
        if (before < k && k <= before + b[i]) {
          sm.found_bin[0] = kGroup * group.bin + i;
          sm.found_bin[1] = before;
          sm.found_bin[2] = b[i];
          sm.found_bin[3] = b[i & ~3] + b[(i & ~3) + 1] + b[(i & ~3) + 2] + b[(i & ~3) + 3];
        }
        before += b[i];
      }
    }
  }
  __syncthreads();
  FoundBin f;
  f.total = group.total;
  if (group.bin < kThreads) {
    f.bin = sm.found_bin[0];
    f.above = sm.found_bin[1];
    f.count = sm.found_bin[2];
    f.group = sm.found_bin[3];
  } else {
    f.bin = kTopkFineBins;
    f.above = group.total;
    f.count = f.group = 0;
  }

  // 2. The threshold bin as keys [lo, hi), narrowed while it outgrows the candidate buffer.
  ThresholdKeys th = threshold_keys_of_fine_bin<In>(f, k, kTopkFineBins);
  int passes = 0;
#pragma unroll 1
  while (th.count > kResidentCandidates && th.hi - th.lo > 1) {
    if (kCluster > 1 && passes > 0) cluster::sync();  // the other CTAs have read this CTA's digits
    const int shift = digit_shift<kRefineBits>(th.lo, th.hi);
    for (int i = threadIdx.x; i < kDigits; i += kThreads) sm.digits[i] = 0;
    __syncthreads();
#pragma unroll 1
    for (int u = 0; u < spans; ++u) {
      const uint4 v = tile.vector(u);
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const typename In::Raw x = Tile::element(v, e);
        const unsigned int key = In::key(x);
        if (!In::is_nan(x) && key >= th.lo && key < th.hi)
          atomicAdd(&sm.digits[kDigits - 1 - static_cast<int>((key - th.lo) >> shift)], 1u);
      }
    }
    cluster::sync_all<kCluster>();
    constexpr int kDigitsPer = kDigits / kThreads;
    int d[kDigitsPer];
#pragma unroll
    for (int i = 0; i < kDigitsPer; ++i)
      d[i] = static_cast<int>(cluster::sum<kCluster>(sm.digits, kDigitsPer * static_cast<int>(threadIdx.x) + i));
    const FoundBin g = scan_threshold<kThreads, kDigitsPer>(d, th.need, sm);
    narrow_to_digit<kDigits>(th, g, shift);
    ++passes;
  }

  // 3. Select: above the interval into the bitmap, inside it as candidates (or ties, for a single key).
  const bool single = th.hi - th.lo <= 1;
  // Where no narrowing pass ran, every CTA's candidates are its count of the threshold fine bin (the
  // classification's value bounds are that bin's keys), read with the bin: each CTA then knows where
  // its keys go in the cluster's list before it finds them, sends each to every other CTA as it finds
  // it, and ranks the whole list itself (the ranking depends on the keys alone, so every CTA decides
  // the same), with no cluster barrier: no exchange of counts, no gather to the leader and no decision
  // sent back. Otherwise (narrowed rows) the counts are exchanged and the leader ranks.
  const bool gathered = kCluster > 1 && passes == 0 && !single;
  int predicted = 0, gathered_before = 0, gathered_total = 0;
  if (gathered) {
#pragma unroll
    for (int q = 0; q < kCluster; ++q) {
      const int c = sm.peer_bin[q * kGroup + f.bin % kGroup];
      gathered_total += c;
      gathered_before += q < rank ? c : 0;
      predicted += q == rank ? c : 0;
    }
    if (threadIdx.x == 0) cluster::expect_bytes(&sm.exchange[0], 4u * static_cast<unsigned int>(gathered_total - predicted));
  }
  auto send_key = [&](int at, unsigned int key) {  // to position `at` of every other CTA's list
#pragma unroll
    for (int q = 1; q < kCluster; ++q) {
      const unsigned int to = static_cast<unsigned int>((rank + q) % kCluster);
      cluster::send(cluster::map(&sm.candidate_key[at], to), key, cluster::map(&sm.exchange[0], to));
    }
  };
  {
    const float above_at = bound_value<In>(th.hi), candidate_at = bound_value<In>(th.lo);
    unsigned long long inside = 0;  // bit u * kPer + e: element e of this thread's vector u
    // A vector's kPer columns lie in one bitmap word; most vectors hold no winner, so the words are
    // marked by atomics where they do.
    auto classify = [&](const uint4& v, int u) {
      unsigned int a = 0, b = 0;
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const float x = In::value(Tile::element(v, e));
        a |= x >= above_at ? 1u << e : 0u;
        b |= x >= candidate_at ? 1u << e : 0u;
      }
      b &= ~a;
      const int column = tile.own_column(u, 0);
      if (a != 0) atomicOr(&sm.above[column >> 5], a << (column & 31));
      if (single) {
        if (b != 0) atomicOr(&sm.tied[column >> 5], b << (column & 31));
      } else {
        inside |= static_cast<unsigned long long>(b) << (u * kPer);
      }
    };
    if (spans == 1) classify(tile.vector(0), 0);
#pragma unroll 1
    for (int u = 0; u + 1 < spans; u += 2) {
      const uint4 v0 = tile.vector(u), v1 = tile.vector(u + 1);
      classify(v0, u);
      classify(v1, u + 1);
    }
    for (unsigned long long m = inside; m != 0; m &= m - 1) {
      const int i = __ffsll(static_cast<long long>(m)) - 1, u = i / kPer, e = i % kPer;
      const int slot = atomicAdd(&sm.candidates, 1);
      const unsigned int key = In::key(Tile::element(tile.vector(u), e));
      if (gathered) {
        if (slot < predicted) {  // always
          sm.candidate_key[gathered_before + slot] = key;
          sm.candidate_index[slot] = tile.own_column(u, e);
          send_key(gathered_before + slot, key);
        }
      } else if (slot < kResidentCandidates) {  // always: the cluster's count in [lo, hi) is at most the buffer
        sm.candidate_key[slot] = key;
        sm.candidate_index[slot] = tile.own_column(u, e);
      }
    }
  }
  __syncthreads();
  int mine = min(sm.candidates, kResidentCandidates);
  int total_candidates = mine, candidates_before = 0;
  if (gathered) {
    // Had fewer keys come than the bin counted (they cannot), the missing ones go as keys outside [lo,
    // hi), which no ranking counts, so that every CTA still receives what it expects.
    for (int slot = mine + static_cast<int>(threadIdx.x); slot < predicted; slot += kThreads)
      send_key(gathered_before + slot, th.hi);
    mine = min(mine, predicted);
    total_candidates = gathered_total;
    candidates_before = gathered_before;
    cluster::wait_received(&sm.exchange[0]);
  } else if constexpr (kCluster > 1) {
    if (threadIdx.x < kCluster) cluster::store(cluster::map(&sm.peer_candidates[rank], threadIdx.x), mine);
    cluster::sync();
    total_candidates = 0;
#pragma unroll
    for (int q = 0; q < kCluster; ++q) {
      total_candidates += sm.peer_candidates[q];
      candidates_before += q < rank ? sm.peer_candidates[q] : 0;
    }
  }

  // 4. Which candidates win: all of them when exactly `need` are in the interval, else they are ranked:
  // a single CTA's few each against all, more (and a cluster's) by digit rounds on the leader.
  unsigned int win_at = th.hi, tie_from = th.lo;
  int tie_slots = single ? th.need : 0;
  bool all_in = true, ranked = false;  // ranked: the winners are already marked
  if (!single && total_candidates > th.need) {
    if (gathered) {
      rank_candidates<kThreads>(total_candidates, th.need, th.lo, static_cast<unsigned long long>(th.hi), sm);
    } else if constexpr (kCluster > 1) {
      rank_on_leader<kThreads, kCluster>(sm, rank, mine, candidates_before, total_candidates, [&] {
        rank_candidates<kThreads>(total_candidates, th.need, th.lo, static_cast<unsigned long long>(th.hi), sm);
      });
    } else if (total_candidates <= kThreads / kPairwiseGroup) {
      rank_pairwise<kThreads>(total_candidates, th.need, sm, sm.above);
      ranked = true;
    } else {
      rank_candidates<kThreads>(total_candidates, th.need, th.lo, static_cast<unsigned long long>(th.hi), sm);
    }
    if (!ranked) {
      win_at = sm.decision[0];
      tie_from = sm.decision[1];
      tie_slots = static_cast<int>(sm.decision[2]);
      all_in = sm.decision[3] != 0;
    }
  }
  if (!single && !ranked) {
    const int own = gathered ? candidates_before : 0;  // where this CTA's keys are in its list
    for (int i = threadIdx.x; i < mine; i += kThreads) {
      const unsigned int key = sm.candidate_key[own + i];
      const int s = sm.candidate_index[i];
      if (key >= win_at || (all_in && key >= tie_from)) atomicOr(&sm.above[s >> 5], 1u << (s & 31));
      else if (key >= tie_from) atomicOr(&sm.tied[s >> 5], 1u << (s & 31));
    }
  }
  __syncthreads();

  // 5. Output positions from the bitmaps. Each thread takes the columns it selected from (live * kPer
  // from `first`), so the work is balanced: counted, scanned, placed in shared memory, then written.
  const int span = live * kPer, first = static_cast<int>(threadIdx.x) * span, w = first >> 5;
  unsigned int a0 = 0, a1 = 0, t0 = 0, t1 = 0;  // bit i: column first + i, and first + 32 + i
  if (w < words) {
    a0 = sm.above[w];
    t0 = sm.tied[w];
    if (span < 32) {
      const unsigned int mask = (1u << span) - 1u;
      a0 = (a0 >> (first & 31)) & mask;
      t0 = (t0 >> (first & 31)) & mask;
    } else if (span == 64 && w + 1 < words) {
      a1 = sm.above[w + 1];
      t1 = sm.tied[w + 1];
    }
  }
  // Winners < k <= 4096 < 2^15 and ties <= 65536 < 2^17 per CTA (the wide FP16 form holds 64K columns, all
  // of which may tie), so both fit one word.
  static_assert(kMaxTopk < (1 << kWinnerBits) && kMaxLive * kThreads * 8 < (1 << (32 - kWinnerBits)), "packed counts");
  const unsigned int counts =
      static_cast<unsigned int>(__popc(a0) + __popc(a1)) | static_cast<unsigned int>(__popc(t0) + __popc(t1)) << kWinnerBits;
  unsigned int cta_total;
  const unsigned int before = BlockScan<kThreads>::exclusive(counts, sm.warp_sums, cta_total);
  int above_before = 0, tied_before = 0, above_all = static_cast<int>(cta_total & kWinnerMask),
      tied_all = static_cast<int>(cta_total >> kWinnerBits);
  if constexpr (kCluster > 1) {
    // Sent after this CTA's last access to another CTA's shared memory, and awaited from every other
    // CTA: so no CTA leaves while another may still read or write its shared memory.
    const void* const slots[2] = {sm.peer_above, sm.peer_tied};
    cluster::send_to_all<kCluster>(&sm.exchange[1], rank, slots,
                                   {static_cast<unsigned int>(above_all), static_cast<unsigned int>(tied_all)});
    const int own_above = above_all, own_tied = tied_all;
    above_all = tied_all = 0;
#pragma unroll
    for (int q = 0; q < kCluster; ++q) {
      const int a = q == rank ? own_above : sm.peer_above[q], t = q == rank ? own_tied : sm.peer_tied[q];
      above_before += q < rank ? a : 0;
      tied_before += q < rank ? t : 0;
      above_all += a;
      tied_all += t;
    }
  }
  // This CTA's winners hold a contiguous range of output positions from `base`: placed in shared
  // memory first, so that the global writes are coalesced.
  const int base = above_before + min(tied_before, tie_slots);
  int na = above_before + static_cast<int>(before & kWinnerMask), nt = tied_before + static_cast<int>(before >> kWinnerBits);
  auto place = [&](int from, unsigned int a, unsigned int t) {
    if (t == 0) {  // no ties here (the usual case): the winners go one after the other
      int at = na + min(nt, tie_slots) - base;
      na += __popc(a);
      for (unsigned int m = a; m != 0; m &= m - 1) sm.out[at++] = from + __ffs(static_cast<int>(m)) - 1;
      return;
    }
    place_word(sm.out, from, a, t, na, nt, tie_slots, base);
  };
  place(first, a0, t0);
  place(first + 32, a1, t1);
  __syncthreads();
  const int cta_selected = static_cast<int>(cta_total & kWinnerMask) +
                           min(max(tie_slots - tied_before, 0), static_cast<int>(cta_total >> kWinnerBits));
  int* indices = p.indices + static_cast<long long>(r) * k;
  float* values = p.values != nullptr ? p.values + static_cast<long long>(r) * k : nullptr;
  for (int i = threadIdx.x; i < cta_selected; i += kThreads) {
    const int s = sm.out[i];
    indices[base + i] = output_index(p, r, begin + s, start);
    if (values != nullptr) values[base + i] = In::value(tile.at_column(s));
  }
  if (rank == 0) {
    const int selected = above_all + min(tied_all, tie_slots);
    for (int i = selected + static_cast<int>(threadIdx.x); i < k; i += kThreads) {
      indices[i] = -1;
      if (values != nullptr) values[i] = negative_infinity();
    }
    if (threadIdx.x == 0) {
      int* out = p.report + static_cast<long long>(r) * kTopkReportInts;
      out[0] = 0;  // counted here
      out[1] = f.bin < kTopkFineBins ? f.bin >> 2 : kTopkSelectorBins;  // its selector bin
      out[2] = f.bin < kTopkFineBins ? f.group : 0;
      out[3] = passes;
    }
  }
}

// One row per cluster of kCluster CTAs. A row whose window holds at most 12K FP32 or 16K 16-bit
// logits runs on the cluster's first CTA alone (the others leave at once): a graph captured at the
// widest row a batch may have (the engines capture at the model's longest context) then costs what its
// live rows cost, not the cluster's barriers and exchanges. The choice is the row's, so it is the same in every CTA of the
// cluster, and the bytes are those of a single CTA (every split gives the same bytes).
template <LogitsOut kIn, int kCluster, int kStages, int kThreads>
__device__ void topk_resident(const TopkParams& p) {
  await_previous_kernel();  // before this kernel's first global memory access
  __shared__ TopkResidentSmem<kThreads> sm;
  const int r = blockIdx.x / kCluster;
  if constexpr (kCluster > 1) {
    const int rank = static_cast<int>(cluster::rank());
    constexpr int kPer = TopkTile<TopkInput<kIn>, kThreads>::kPer;
    // The crossover at a 256K width, one CTA against the cluster: FP32 1 row 12K 11.6 / 12.1 µs, 16K
    // 12.6 / 12.1; FP16 1 row 16K 11.0 / 12.8, 24K 12.9 / 12.8. So up to 12K FP32 or 16K 16-bit logits
    // (docs/benchmarks/topk.md, "One CTA inside a cluster launch").
    constexpr int kBuffer = kStages * kStageVectors * kPer;
    constexpr int kLimit = kIn == LogitsOut::f32 ? 12288 : 16384;
    constexpr int kOneCta = kBuffer < kLimit ? kBuffer : kLimit;
    const int len = topk_row_length(p, r);
    if (len - aligned_start<kPer>(topk_row_start(p, r, len)) <= kOneCta) {
      if (rank == 0) topk_resident_row<kIn, 1, kStages, kThreads>(p, r, 0, sm);
      return;
    }
    topk_resident_row<kIn, kCluster, kStages, kThreads>(p, r, rank, sm);
  } else {
    topk_resident_row<kIn, 1, kStages, kThreads>(p, r, 0, sm);
  }
}

}  // namespace kernels
}  // namespace flash_indexer
