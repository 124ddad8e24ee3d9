#pragma once
// Exact top-k of a logits row (contract §4), one row per cluster of kCluster CTAs (kCluster = 1: one
// CTA per row, no cluster features, the form for large batches and for sm_80). A radix select: bin
// counts first, then the stored dtype's exact key bits.
//
//   The row is split into kCluster segments, one per CTA. A CTA's segment passes through shared memory
//   by cp.async (TopkTile): resident when it fits kStages stages, else streamed through the buffer's two
//   halves.
//   1. Bin counts: the row's contract §3 histogram from the logits kernel, or the selector's own bins
//      (topk_selector_bins.cuh: a shift of the key) counted here and summed over the cluster through
//      distributed shared memory. The threshold bin T is the bin where the running count reaches k.
//   2. Select pass: T becomes a key interval (closed-form for a selector bin, a 32-way warp search over
//      the monotone key -> bin map for a contract bin), so the pass compares keys. Columns above the
//      interval are listed, those in it are kept with their keys as candidates, both in column order.
//      Positions come from warp and block prefix sums, never from atomic arrival order, so the output
//      bytes are deterministic, and the same for every kCluster. With a given histogram the pass
//      recounts what it promised; if it does not add up, the row starts over from counting.
//   3. A threshold bin too big for the candidate buffer is narrowed: the cluster counts the top 10-bit
//      digits of its keys, picks the digit where the count reaches k, and selects again with that
//      narrower key interval; until the candidates fit or share one key. Nothing is ever dropped.
//   4. The CTAs append their lists to the leader's (rank 0) through distributed shared memory, in
//      segment order. The leader refines the candidates with 10-bit digits of their keys until the
//      winners are known; equal keys go to the lower column.
#include "cluster.cuh"
#include "grid_dependency.cuh"
#include "topk_common.cuh"
#include "topk_tile.cuh"

namespace flash_indexer {
namespace kernels {

template <bool kNarrow>
struct TopkMask {
  using Type = unsigned long long;
};
template <>
struct TopkMask<true> {
  using Type = unsigned int;
};

struct SelectRun {
  int valid;       // non-NaN columns
  int above;       // columns in bins before T
  int candidates;  // columns in bin T
};

// The select pass over one tile (the bounds as values, bound_value): appends the tile's columns in bins
// before T to out and bin T's to the candidate buffer, in column order after what `run` already holds. One block barrier; `parity`
// alternates between tiles so consecutive tiles do not share the warp-count slots. `count_valid`: also
// count the non-NaN logits (only to check a given histogram).
template <class In>
__device__ void select_tile(const TopkTile<In>& t, float above_at, float candidate_at, bool count_valid, int k, int parity,
                            SelectRun& run, int* out, TopkSmem& sm) {
  using Tile = TopkTile<In>;
  constexpr int kWarps = kTopkThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Bit i: this thread's i-th logit of the tile (kMaxLive * kPer bits: 32 for FP32, 64 for 16-bit).
  using Mask = typename TopkMask<(kMaxLive * Tile::kPer <= 32)>::Type;
  Mask above = 0, candidate = 0;
  int valid = 0;
#pragma unroll 1
  for (int u = 0; u < t.live; ++u) {
    const uint4 v = t.vector(u);
    unsigned int a = 0, c = 0;  // this vector's bits
#pragma unroll
    for (int e = 0; e < Tile::kPer; ++e) {
      const float x = In::value(Tile::element(v, e));
      if (count_valid) valid += x == x;
      a |= x >= above_at ? 1u << e : 0u;
      c |= x >= candidate_at ? 1u << e : 0u;
    }
    above |= static_cast<Mask>(a) << (u * Tile::kPer);
    candidate |= static_cast<Mask>(c & ~a) << (u * Tile::kPer);
  }
  run.valid += valid;
  // Packed as above | candidates << 16: a tile has at most 32K columns; a single-bin tile has all of them
  // in the upper field, which holds them unsigned.
  const unsigned int mine = static_cast<unsigned int>(__popcll(above)) | static_cast<unsigned int>(__popcll(candidate)) << 16;
  static_assert(sizeof(Mask) <= 8, "mask");
  unsigned int prefix = warp_inclusive_sum(mine);
  if (lane == 31) sm.warp_runs[parity][warp] = prefix;
  prefix -= mine;
  __syncthreads();
  unsigned int before = 0, tile_total = 0;
#pragma unroll
  for (int w4 = 0; w4 < kWarps / 4; ++w4) {
    const uint4 v = reinterpret_cast<const uint4*>(sm.warp_runs[parity])[w4];
    const unsigned int q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      before += w4 * 4 + j < warp ? q[j] : 0u;
      tile_total += q[j];
    }
  }
  before += prefix;
  int a = run.above + static_cast<int>(before & 0xffffu);
  int c = run.candidates + static_cast<int>(before >> 16);
  for (Mask m = above; m != 0; m &= m - 1) {
    if (a < k) out[a] = t.column(__ffsll(m) - 1);  // more than k only when a given histogram lied: detected after the pass
    ++a;
  }
  for (Mask m = candidate; m != 0; m &= m - 1) {
    const int i = __ffsll(m) - 1;
    if (c < kTopkCandidates) {
      sm.candidate_index[c] = t.column(i);
      sm.candidate_key[c] = In::key(t.at(i));
    }
    ++c;
  }
  run.above += static_cast<int>(tile_total & 0xffffu);
  run.candidates += static_cast<int>(tile_total >> 16);
}

// Cutoff keys for a long streamed row, from a sample of it: kTopkThreads * 8 logits per 64K columns
// (up to 4 rounds), in 16-byte vectors spread evenly over [begin, end) (a 16-byte aligned row), counted
// in selector bins. A cutoff is where the sample's running count reaches its target scaled to the
// sample, placed inside that bin by linear interpolation (keys are linear in the value within a bin).
// `candidate` aims at (k + C) / 2 columns (C = kTopkCandidates). Up to k = C / 2 every column at or above
// it is a candidate (`above` past every key). Beyond, the window [k, C] the caller accepts for that
// count leaves no room for the sample's error (at k = C it is one value), so the targets become
// k + C / 4 and, for `above`, k - C / 4: the columns at or above `above` are winners outright, and the
// caller keeps the result if fewer than k are and, with the candidates, at least k, within C
// candidates. Any cutoffs give the exact answer, good ones save passes. The
// sample grows with the row so that about 200 sampled logits pass the cutoff: with 48 (a fixed
// 4096-logit sample of a 256K row) 1-3 rows in 128 miss the window, and a missed row streams
// its row three more times on one CTA, which then decides the kernel's time. Every thread of the block
// must call it.
template <class In>
__device__ KeyBounds sampled_cutoffs(const void* row, int begin, int end, int k, uint4* scratch, int scratch_vectors,
                                     TopkSmem& sm) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(typename In::Raw));
  // At most what the staging ring holds (two rounds of FP32 on the 2-stage parts).
  const int rounds = min(min(4, scratch_vectors / (kTopkThreads * (8 / kPer))), max(1, (end - begin + 65535) / 65536));
  const int vectors = kTopkThreads * (8 / kPer) * rounds;  // 8 logits per thread per round
  const int sample = vectors * kPer;
  // Sample vector i is row vector i * step (32-bit arithmetic). All of them fly at once, by cp.async into
  // the staging buffer (free before the first pass), and no registers hold them.
  const int step = (end - begin) / kPer / vectors;
  const uint4* source = reinterpret_cast<const uint4*>(static_cast<const typename In::Raw*>(row) + begin);
  for (int i = threadIdx.x; i < vectors; i += kTopkThreads)
    cp_async16(static_cast<unsigned int>(__cvta_generic_to_shared(scratch + i)), source + static_cast<long long>(i) * step);
  cp_async_commit();
  for (int i = threadIdx.x; i < kCoarseBins; i += kTopkThreads) sm.hist[i] = 0;
  cp_async_wait<0>();
  __syncthreads();
  for (int i = threadIdx.x; i < vectors; i += kTopkThreads) {  // this thread's own copies
    const uint4 v = scratch[i];
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const typename In::Raw x = TopkTile<In>::element(v, e);
      if (!In::is_nan(x)) atomicAdd(&sm.hist[In::selector_bin_of(x)], 1);
    }
  }
  __syncthreads();
  // The key at or above which about `target` of the row's columns lie; `none` where the sample holds fewer.
  auto cutoff = [&](int target, unsigned int none) {
    const int want = max(1, static_cast<int>((static_cast<long long>(target) * sample + (end - begin) - 1) / (end - begin)));
    const Threshold d = find_threshold<kCoarseBins>(sm.hist, want, false, sm);
    return d.bin >= kCoarseBins ? none : interpolated_selector_key<In>(d.bin, d.above, d.count, want);
  };
  constexpr int kC = kTopkCandidates;
  KeyBounds b;
  // Too few sampled logits: every column qualifies (and overflows the buffer: the caller counts instead).
  b.candidate = cutoff(k + max((kC - k) / 2, kC / 4), In::kMinKey);
  b.above = k > kC / 2 ? max(cutoff(k - kC / 4, In::kMaxKey + 1), b.candidate) : In::kMaxKey + 1;
  return b;
}

// Rows from this long (per CTA, no histogram given) are selected from a sampled cutoff in one pass.
constexpr int kTopkSampledColumns = 16384;

template <LogitsOut kIn, int kCluster, int kStages>
__device__ void topk_split(const TopkParams& p) {
  await_previous_kernel();  // before this kernel's first global memory access
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8, "a portable cluster size");
  static_assert(kStages >= 2 && kStages * kStageVectors <= kMaxLive * kTopkThreads, "stages");
  using In = TopkInput<kIn>;
  using Tile = TopkTile<In>;
  using Scan = BlockScan<kTopkThreads>;
  __shared__ TopkSmem sm;
  extern __shared__ uint4 topk_stages[];  // kStages * kStageVectors, then the selected columns (k, topk_split_smem_bytes)
  // Formed from its 32-bit shared address: so the FP32 kernel spills 12 bytes at its 64-register cap,
  // 40 with the plain pointer expression (docs/benchmarks/topk.md).
  int* const out = static_cast<int*>(
      __cvta_shared_to_generic(static_cast<unsigned int>(__cvta_generic_to_shared(topk_stages + kStages * kStageVectors))));

  const int rank = kCluster > 1 ? static_cast<int>(cluster::rank()) : 0;
  const int r = blockIdx.x / kCluster;
  const int len = topk_row_length(p, r);
  const int k = p.k;
  const void* row = static_cast<const char*>(p.logits) + static_cast<long long>(r) * p.logits_stride * sizeof(typename In::Raw);
  const bool aligned = (reinterpret_cast<unsigned long long>(row) & 15u) == 0;

  // This CTA's segment of the window [start, len): whole vectors from the one holding `start`, in rank
  // order; columns before `start` read as NaN.
  const TopkSegment segment = topk_segment<Tile::kPer, kCluster>(p, r, len, rank);
  const int start = segment.start, begin = segment.begin, end = segment.end;
  const int vectors = (end - begin + Tile::kPer - 1) / Tile::kPer;
  const bool resident = vectors <= kStages * kStageVectors;
  // A long streamed row with no histogram is first tried from a sampled cutoff: one pass over the row
  // instead of two. The sample is taken first, while little else is live (registers: two CTAs per SM).
  // 0: counted here (no histogram given), 1: the given histogram was used, 2: it did not add up, 3: its
  // threshold bin was too coarse to select from (histogram_bin_too_coarse): the row was sampled instead.
  // The threshold and its key interval of the first select pass, once known (need_threshold false).
  int histogram_use = p.histogram != nullptr ? 1 : 0;
  Threshold t{};
  KeyBounds bounds{};
  bool need_threshold = true;
  bool may_sample = kCluster == 1 && !resident && aligned && end - begin >= kTopkSampledColumns;
  if (may_sample && histogram_use == 1) {
    may_sample = false;
    t = find_threshold<kCoarseBins>(p.histogram + static_cast<long long>(r) * kCoarseBins, k, true, sm);
    if (!t.negative && t.bin < kCoarseBins) {  // otherwise the loop finds it again and recounts
      bounds = coarse_key_bounds<In>(t.bin, sm);
      if (histogram_bin_too_coarse(t.count, bounds.candidate, bounds.above, kTopkCandidates)) {
        histogram_use = 3;
        may_sample = true;
      } else {
        need_threshold = false;
      }
    }
  }
  // Kept in shared memory until the first pass needs it (a register less across the loop).
  if (may_sample) {
    // Every thread writes the same values, so no barrier is needed before the reads.
    const KeyBounds b = sampled_cutoffs<In>(row, begin, end, k, topk_stages, kStages * kStageVectors, sm);
    sm.key_bounds[0] = b.candidate;
    sm.key_bounds[1] = b.above;
  }
  if (threadIdx.x == 0) sm.kth_key = ~0u;
  if (resident && vectors > 0) {  // loaded once; every pass reads it
    const Tile t{topk_stages, begin, Tile::live_for(vectors)};
    t.load(row, start, end, aligned, topk_stages);
    cp_async_commit();
  }

  // Calls body(tile) for each tile of the segment, in order (CTA-uniform: it may hold barriers). A
  // streamed segment goes through the buffer's two halves: stage i waits for its copies and a barrier
  // (which also frees the half of stage i - 1), starts the copies of stage i + 1 there, then is processed.
  bool waited = false;
  auto for_each_tile = [&](auto&& body) {
    if (vectors == 0) return;
    if (resident) {
      if (!waited) {
        cp_async_wait<0>();
        __syncthreads();
        waited = true;
      }
      body(Tile{topk_stages, begin, Tile::live_for(vectors)});
      return;
    }
    // Two halves of the buffer, each a tile of kRingLive vectors per thread.
    constexpr int kRingLive = kStages * kStageVectors / (2 * kTopkThreads);
    constexpr int kRingColumns = kRingLive * kTopkThreads * Tile::kPer;
    const int stages = (end - begin + kRingColumns - 1) / kRingColumns;
    auto stage = [&](int i) {
      return Tile{topk_stages + (i & 1) * kRingLive * kTopkThreads, begin + i * kRingColumns, kRingLive};
    };
    stage(0).load(row, start, end, aligned, topk_stages);
    cp_async_commit();
#pragma unroll 1
    for (int i = 0; i < stages; ++i) {
      cp_async_wait<0>();
      __syncthreads();  // stage i is in; every thread is done with stage i - 1, whose half takes stage i + 1
      if (i + 1 < stages) {
        stage(i + 1).load(row, start, end, aligned, topk_stages + ((i + 1) & 1) * kRingLive * kTopkThreads);
        cp_async_commit();
      }
      body(stage(i));
    }
    __syncthreads();  // the ring's slots are free for the next pass
  };

  // Sums `n` counts of sm.hist over the cluster (into sm.row_hist; sm.hist itself with no cluster).
  auto cluster_counts = [&](int n) -> const int* {
    if constexpr (kCluster == 1) {
      __syncthreads();
      return sm.hist;
    } else {
      cluster::sync();
      for (int i = threadIdx.x; i < n; i += kTopkThreads) {
        int sum = 0;
#pragma unroll
        for (int q = 0; q < kCluster; ++q) sum += cluster::load(cluster::map(&sm.hist[i], q));
        sm.row_hist[i] = sum;
      }
      __syncthreads();
      return sm.row_hist;
    }
  };

  // The select pass for the key interval `bounds`: this CTA's counts in `local`, the cluster's in the
  // result, and the cluster's counts before this CTA's segment in `before`.
  // `count_valid`: also count the non-NaN columns (to check a given histogram; otherwise the counts
  // already know it).
  SelectRun local{}, before{};
  auto select_row = [&](KeyBounds bounds, bool count_valid) -> SelectRun {
    local = SelectRun{0, 0, 0};
    int parity = 0;
    const float above_at = bound_value<In>(bounds.above), candidate_at = bound_value<In>(bounds.candidate);
    for_each_tile([&](const Tile& t) {
      select_tile(t, above_at, candidate_at, count_valid, k, parity, local, out, sm);
      parity ^= 1;
    });
    if constexpr (kCluster == 1) {
      // The lists are complete for every thread past this barrier (the scan's own barriers, or one).
      if (count_valid) local.valid = Scan::sum(local.valid, reinterpret_cast<int*>(sm.scan));
      else __syncthreads();
      return local;
    } else {
      if (count_valid) local.valid = Scan::sum(local.valid, reinterpret_cast<int*>(sm.scan));
      if (threadIdx.x == 0) {
        sm.published[0] = local.valid;
        sm.published[1] = local.above;
        sm.published[2] = local.candidates;
      }
      cluster::sync();
      SelectRun total{0, 0, 0};
      before = SelectRun{0, 0, 0};
#pragma unroll
      for (int q = 0; q < kCluster; ++q) {
        const SelectRun c{cluster::load(cluster::map(&sm.published[0], q)), cluster::load(cluster::map(&sm.published[1], q)),
                          cluster::load(cluster::map(&sm.published[2], q))};
        if (q < rank) {
          before.above += c.above;
          before.candidates += c.candidates;
        }
        total.valid += c.valid;
        total.above += c.above;
        total.candidates += c.candidates;
      }
      return total;
    }
  };

  // One loop, so that each pass over the row (count, select, digit count) is emitted once: the code of
  // this kernel runs once per row, and its size is instruction-cache misses and compile time.
  //   - with a histogram given, select with its threshold; if the pass does not add up to what the
  //     histogram promised (2 in the report), count the row here and select again;
  //   - a threshold bin too big for the candidate buffer is narrowed by the 10-bit digit counts of its keys,
  //     summed over the cluster, and selected again, until the candidates fit or share one key. Every
  //     CTA rescans only its own segment (from shared memory when it is resident).
  const int* counts = histogram_use == 1 ? p.histogram + static_cast<long long>(r) * kCoarseBins : nullptr;
  SelectRun total{};
  int row_passes = 0;
  // `sampling`: this pass tries the sampled cutoff; `sampled`: it succeeded.
  bool sampling = false, sampled = false;
#pragma unroll 1
  for (;;) {
    if (need_threshold && may_sample) {
      may_sample = false;
      sampling = true;
      bounds.above = sm.key_bounds[1];  // past every key up to k = C / 2: every column at or past the cutoff is a candidate
      bounds.candidate = sm.key_bounds[0];
      need_threshold = false;
    } else if (need_threshold) {
      if (counts == nullptr) {
        for (int i = threadIdx.x; i < kCoarseBins; i += kTopkThreads) sm.hist[i] = 0;
        __syncthreads();
        for_each_tile([&](const Tile& tl) { tl.count(sm); });
        counts = cluster_counts(kCoarseBins);
      }
      t = find_threshold<kCoarseBins>(counts, k, histogram_use == 1, sm);
      if (t.negative) {  // only a given histogram can hold a negative count
        histogram_use = 2;
        counts = nullptr;
        continue;
      }
      bounds = histogram_use == 1 ? coarse_key_bounds<In>(t.bin, sm) : selector_key_bounds<In>(t.bin);
      need_threshold = false;
    }
    const bool verify = histogram_use == 1 && row_passes == 0;
    total = select_row(bounds, verify);
    if (sampling) {
      sampling = false;
      if (total.above < k && total.above + total.candidates >= k && total.candidates <= kTopkCandidates) {
        sampled = true;
        t.bin = 0;  // refine the candidates (the report's bin comes from the k-th key)
        t.total = total.above + total.candidates;
        break;
      }
      need_threshold = true;  // the cutoff missed: count the row
      continue;
    }
    if (verify) {
      const bool adds_up =
          total.valid == t.total && total.above == t.above && (t.bin == kCoarseBins || total.candidates == t.count);
      if (!adds_up) {
        histogram_use = 2;
        counts = nullptr;
        need_threshold = true;
        continue;
      }
    }
    // Now total.above == t.above < k (or every selectable column is above, when t.bin == 1024).
    if (total.candidates <= kTopkCandidates || bounds.above - bounds.candidate <= 1) break;
    const unsigned int span = bounds.above - 1u - bounds.candidate;
    const int shift = max(0, 32 - __clz(static_cast<int>(span)) - kRefineBits);
    for (int i = threadIdx.x; i < kCoarseBins; i += kTopkThreads) sm.hist[i] = 0;
    __syncthreads();
    for_each_tile([&](const Tile& tl) { tl.count_digits(bounds, shift, sm); });
    const Threshold d = find_threshold<kCoarseBins>(cluster_counts(kCoarseBins), k - total.above, false, sm);
    const int digit = (1 << kRefineBits) - 1 - d.bin;
    const unsigned long long upper =
        static_cast<unsigned long long>(bounds.candidate) + (static_cast<unsigned long long>(digit + 1) << shift);
    bounds.candidate += static_cast<unsigned int>(digit) << shift;
    bounds.above = static_cast<unsigned int>(min(upper, static_cast<unsigned long long>(bounds.above)));
    row_passes += 2;
  }
  // Past the buffer, every candidate has the same key: the first ones by column are the winners, and the
  // buffer keeps the first kTopkCandidates by column.
  const int candidates = min(total.candidates, kTopkCandidates);

  if constexpr (kCluster > 1) {
    if (rank != 0) {
      const unsigned int leader_out = cluster::map(&out[before.above], 0);
      for (int i = threadIdx.x; i < local.above; i += kTopkThreads) cluster::store(leader_out + 4u * i, out[i]);
      const int kept = max(0, min(local.candidates, kTopkCandidates - before.candidates));
      const unsigned int index = cluster::map(&sm.candidate_index[min(before.candidates, kTopkCandidates)], 0);
      const unsigned int key = cluster::map(&sm.candidate_key[min(before.candidates, kTopkCandidates)], 0);
      for (int i = threadIdx.x; i < kept; i += kTopkThreads) {
        cluster::store(index + 4u * i, sm.candidate_index[i]);
        cluster::store(key + 4u * i, static_cast<int>(sm.candidate_key[i]));
      }
    }
    cluster::sync();
    if (rank != 0) return;
  }

  const int above = total.above;
  const int selected = min(k, t.total);
  if (t.bin < kCoarseBins) {
    const int need = k - above;
    if (need == candidates) {
      unsigned int smallest = ~0u;
      for (int i = threadIdx.x; i < need; i += kTopkThreads) {
        out[above + i] = sm.candidate_index[i];
        smallest = min(smallest, sm.candidate_key[i]);
      }
      if (sampled && smallest != ~0u) atomicMin(&sm.kth_key, smallest);
      __syncthreads();
    } else {
      refine(candidates, need, above, bounds.candidate, bounds.above, out, sm);
    }
  }
  __syncthreads();
  // A sampled row did not count its threshold bin: -1.
  const int report[kTopkReportInts] = {histogram_use, sampled ? In::selector_bin(sm.kth_key) : t.bin,
                                       sampled ? -1 : static_cast<int>(t.bin < kCoarseBins ? t.count : 0), row_passes};
  write_output<In>(p, r, row, start, above, selected, out, report);
}

}  // namespace kernels
}  // namespace flash_indexer
