#pragma once
// Exact top-k of a logits row (CONTRACT 4), one row per cluster of kCluster CTAs (kCluster = 1: one
// CTA per row, no cluster features, the form for large batches and for sm_80). A radix select: bin
// counts first, then the stored dtype's exact key bits.
//
//   The row is split into kCluster segments, one per CTA. A CTA reads its segment in tiles of
//   topk_unroll() 16-byte vectors per thread, all of a tile's loads in flight at once, the next tile
//   prefetched into L2. A segment of one tile stays in registers between the passes, so the row is read
//   from memory once.
//   1. Bin counts: the row's CONTRACT 3 histogram from the logits kernel, or the selector's own bins
//      (topk_selector_bins.cuh: a shift of the key) counted here and summed over the cluster through
//      distributed shared memory. The threshold bin T is the bin where the running count reaches k.
//   2. Select pass: T becomes a key interval (closed-form for a selector bin, a 32-way warp search over
//      the monotone key -> bin map for a CONTRACT bin), so the pass compares keys. Columns above the
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
#include "topk_common.cuh"

namespace flash_indexer {
namespace kernels {

// 16-byte vectors per thread per tile: 64 KiB of loads in flight per CTA for FP32 (16K logits), 32 KiB
// for FP16/BF16 (also 16K logits). Eight 16-bit vectors do not fit in 128 registers without spills.
template <LogitsOut kIn>
constexpr int topk_unroll() {
  return kIn == LogitsOut::f32 ? 8 : 4;
}

// One tile of a segment in registers, as 32-bit words (two 16-bit logits share a word).
template <class In, int kUnroll>
struct TopkTile {
  using Raw = typename In::Raw;
  static constexpr int kPer = 16 / static_cast<int>(sizeof(Raw));  // logits per vector
  static constexpr int kWarpSpan = 32 * kPer * kUnroll;
  static constexpr int kSize = kTopkThreads * kPer * kUnroll;
  unsigned int w[kUnroll][4];
  // Vectors per lane in use (block-uniform) and the columns per warp: a tile shorter than kSize is
  // spread over every warp, so each thread holds as few columns as the segment allows.
  int live = kUnroll;
  int span = kWarpSpan;

  // Shapes the tile for a segment of `columns` (all of kSize when it is streamed).
  __device__ __forceinline__ void shape(int columns) {
    constexpr int kRow = kTopkThreads * kPer;  // columns of one vector per thread
    live = columns >= kSize ? kUnroll : max(1, (columns + kRow - 1) / kRow);
    span = live * 32 * kPer;
  }

  // Warp w owns a contiguous span of the tile; its vectors interleave the lanes, so each load
  // instruction of a warp reads 512 contiguous bytes. Column order is (warp, u, lane, e).
  __device__ __forceinline__ int column(int base, int u, int e) const {
    return base + (threadIdx.x >> 5) * span + (u * 32 + (threadIdx.x & 31)) * kPer + e;
  }

  __device__ __forceinline__ Raw get(int u, int e) const {
    if constexpr (kPer == 4) return In::from_bits(w[u][e]);
    else return In::from_bits(w[u][e >> 1] >> ((e & 1) * 16));
  }
  // get() with a run-time `e` (u a constant): selects between the four words, so the registers are
  // never indexed (which would move them to local memory).
  __device__ __forceinline__ Raw get_dynamic(int u, int e) const {
    const int i = kPer == 4 ? e : e >> 1;
    const unsigned int word = i == 0 ? w[u][0] : i == 1 ? w[u][1] : i == 2 ? w[u][2] : w[u][3];
    if constexpr (kPer == 4) return In::from_bits(word);
    else return In::from_bits(word >> ((e & 1) * 16));
  }

  // Columns at or past `end` read as NaN. `aligned`: the row starts on 16 bytes. Every whole vector is
  // one predicated load, issued back to back; the few partial ones (segment tails, rows off 16 bytes) are
  // patched afterwards, so no load waits for another.
  __device__ __forceinline__ void load(const void* row, int base, int end, bool aligned) {
    const unsigned int fill = kPer == 4 ? In::bits(In::nan()) : In::bits(In::nan()) * 0x10001u;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = column(base, u, 0);
      const int whole = u < live && aligned && s + kPer <= end;
#pragma unroll
      for (int i = 0; i < 4; ++i) w[u][i] = fill;
      asm("{\n"
          ".reg .pred p;\n"
          "setp.ne.b32 p, %5, 0;\n"
          "@p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
          "}\n"
          : "+r"(w[u][0]), "+r"(w[u][1]), "+r"(w[u][2]), "+r"(w[u][3])
          : "l"(static_cast<const Raw*>(row) + s), "r"(whole));
    }
    if (aligned && column(base, live - 1, kPer - 1) < end) return;  // this thread's vectors were all whole
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = column(base, u, 0);
      if (u >= live || (aligned && s + kPer <= end) || s >= end) continue;
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        if (s + e >= end) break;
        const unsigned int b = In::bits(In::load(row, s + e));
        if constexpr (kPer == 4) {
          w[u][e] = b;
        } else {
          const int shift = (e & 1) * 16;
          w[u][e >> 1] = (w[u][e >> 1] & ~(0xffffu << shift)) | (b << shift);
        }
      }
    }
  }

  // Starts moving the tile at `base` into L2 while the registers still hold the current one.
  __device__ __forceinline__ void prefetch(const void* row, int base, int end) const {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int s = column(base, u, 0);
      if (s < end) asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const Raw*>(row) + s));
    }
  }

  // Adds this tile's selector-bin counts to sm.hist.
  __device__ __forceinline__ void count(TopkSmem& sm) const {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (u < live)
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const Raw x = get(u, e);
        if (!In::is_nan(x)) atomicAdd(&sm.hist[In::selector_bin(In::key(x))], 1);
      }
  }

  // Adds the kRefineBits-bit digits (key - bounds.candidate) >> shift of this tile's keys in
  // [bounds.candidate, bounds.above) to sm.hist, the largest digit first.
  __device__ __forceinline__ void count_digits(KeyBounds bounds, int shift, TopkSmem& sm) const {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (u < live)
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const Raw x = get(u, e);
        const unsigned int key = In::key(x);
        if (!In::is_nan(x) && key >= bounds.candidate && key < bounds.above)
          atomicAdd(&sm.hist[(1 << kRefineBits) - 1 - static_cast<int>((key - bounds.candidate) >> shift)], 1);
      }
  }
};

// A lane's select counts of one vector from its kind bits (bit e: above; bit 8 + e: candidate), packed
// as above | candidates << 16.
__device__ __forceinline__ unsigned int packed_counts(unsigned int kind) {
  return __popc(kind & 0xffu) | static_cast<unsigned int>(__popc(kind >> 8)) << 16;
}

struct SelectRun {
  int valid;       // non-NaN columns
  int above;       // columns in bins before T
  int candidates;  // columns in bin T
};

// The select pass over one tile: appends the tile's columns in bins before T to sm.out and bin T's to
// the candidate buffer, in column order after what `run` already holds. One block barrier; `parity`
// alternates between tiles so consecutive tiles do not share the warp-count slots.
template <class In, int kUnroll>
__device__ void select_tile(const TopkTile<In, kUnroll>& t, int base, KeyBounds bounds, int k, int parity,
                            SelectRun& run, TopkSmem& sm) {
  using Tile = TopkTile<In, kUnroll>;
  constexpr int kWarps = kTopkThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Counts are packed as above | candidates << 16, unsigned: a tile has at most 32K columns, and a
  // single-bin tile has all 32K in the upper field.
  unsigned int kinds[kUnroll];  // bit e: above; bit 8 + e: candidate
  unsigned int prefix[kUnroll];
  bool any = false;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    unsigned int kind = 0;
#pragma unroll
    for (int e = 0; e < Tile::kPer; ++e) {
      const typename In::Raw x = t.get(u, e);
      if (u >= t.live || In::is_nan(x)) continue;
      ++run.valid;
      const unsigned int key = In::key(x);
      if (key >= bounds.above) kind |= 1u << e;
      else if (key >= bounds.candidate) kind |= 0x100u << e;
    }
    kinds[u] = kind;
    prefix[u] = packed_counts(kind);  // this lane's counts
    any = any || kind != 0;
  }
  // The kUnroll warp scans side by side (independent shuffles in flight), not one after the other.
  if (__any_sync(0xffffffffu, any)) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      unsigned int y[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) y[u] = u < t.live ? __shfl_up_sync(0xffffffffu, prefix[u], d) : 0u;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (lane >= d) prefix[u] += y[u];
    }
  }
  // prefix[u] is now inclusive within vector row u; make it exclusive over (u, lane) in column order.
  unsigned int warp_total = 0;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const unsigned int row_total = u < t.live ? __shfl_sync(0xffffffffu, prefix[u], 31) : 0u;
    const unsigned int mine = packed_counts(kinds[u]);
    prefix[u] = warp_total + prefix[u] - mine;
    warp_total += row_total;
  }
  if (lane == 0) sm.warp_runs[parity][warp] = warp_total;
  __syncthreads();
  unsigned int before = 0, tile_total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const unsigned int v = sm.warp_runs[parity][w];
    before += w < warp ? v : 0;
    tile_total += v;
  }
  // Only the set kind bits are visited: above bits (0..7) come before candidate bits, each in column order.
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    int a = run.above + static_cast<int>((before + prefix[u]) & 0xffffu);
    int c = run.candidates + static_cast<int>((before + prefix[u]) >> 16);
    const int first = t.column(base, u, 0);
#pragma unroll 1
    for (unsigned int m = kinds[u]; m != 0; m &= m - 1) {
      const int bit = __ffs(m) - 1;
      if (bit < 8) {
        if (a < k) sm.out[a] = first + bit;  // more than k only when a given histogram lied: detected after the pass
        ++a;
      } else {
        if (c < kTopkCandidates) {
          sm.candidate_index[c] = first + bit - 8;
          sm.candidate_key[c] = In::key(t.get_dynamic(u, bit - 8));
        }
        ++c;
      }
    }
  }
  run.above += static_cast<int>(tile_total & 0xffffu);
  run.candidates += static_cast<int>(tile_total >> 16);
}

template <LogitsOut kIn, int kCluster>
__device__ void topk_split(const TopkParams& p) {
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8, "a portable cluster size");
  using In = TopkInput<kIn>;
  using Tile = TopkTile<In, topk_unroll<kIn>()>;
  using Scan = BlockScan<kTopkThreads>;
  __shared__ TopkSmem sm;

  const int rank = kCluster > 1 ? static_cast<int>(cluster::rank()) : 0;
  const int r = blockIdx.x / kCluster;
  const int len = topk_row_length(p, r);
  const int k = p.k;
  const void* row = static_cast<const char*>(p.logits) + static_cast<long long>(r) * p.logits_stride * sizeof(typename In::Raw);
  const bool aligned = (reinterpret_cast<unsigned long long>(row) & 15u) == 0;

  // This CTA's segment: whole vectors, in rank order.
  const long long per_cta = ((static_cast<long long>(len) + kCluster - 1) / kCluster + Tile::kPer - 1) / Tile::kPer * Tile::kPer;
  const int begin = static_cast<int>(min(static_cast<long long>(len), rank * per_cta));
  const int end = static_cast<int>(min(static_cast<long long>(len), begin + per_cta));
  const bool resident = end - begin <= Tile::kSize;
  Tile tile;
  tile.shape(end - begin);
  if (resident && begin < end) tile.load(row, begin, end, aligned);

  // Calls body(tile, base) for each tile of the segment, in order (CTA-uniform: it may hold barriers).
  auto for_each_tile = [&](auto&& body) {
#pragma unroll 1
    for (int base = begin; base < end; base += Tile::kSize) {  // a resident tile: one iteration, no load
      if (!resident) {                                          // the same registers, streamed
        tile.load(row, base, end, aligned);
        tile.prefetch(row, base + Tile::kSize, end);
      }
      body(tile, base);
    }
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
    for_each_tile([&](const Tile& t, int base) {
      select_tile(t, base, bounds, k, parity, local, sm);
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
  //     CTA rescans only its own segment (from registers when it holds one tile).
  // 0: counted here (no histogram given), 1: the given histogram was used, 2: it did not add up.
  int histogram_use = p.histogram != nullptr ? 1 : 0;
  const int* counts = histogram_use == 1 ? p.histogram + static_cast<long long>(r) * kCoarseBins : nullptr;
  Threshold t{};
  KeyBounds bounds{};
  SelectRun total{};
  int row_passes = 0;
  bool need_threshold = true;
#pragma unroll 1
  for (;;) {
    if (need_threshold) {
      if (counts == nullptr) {
        for (int i = threadIdx.x; i < kCoarseBins; i += kTopkThreads) sm.hist[i] = 0;
        __syncthreads();
        for_each_tile([&](const Tile& tl, int) { tl.count(sm); });
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
    if (verify) {
      const bool adds_up = total.valid == t.total && total.above == t.above &&
                           (t.bin == kCoarseBins || total.candidates == t.count);
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
    for_each_tile([&](const Tile& tl, int) { tl.count_digits(bounds, shift, sm); });
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
      const unsigned int out = cluster::map(&sm.out[before.above], 0);
      for (int i = threadIdx.x; i < local.above; i += kTopkThreads) cluster::store(out + 4u * i, sm.out[i]);
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
  const int selected = static_cast<int>(min(static_cast<long long>(k), t.total));
  if (t.bin < kCoarseBins) {
    const int need = k - above;
    if (need == candidates) {
      for (int i = threadIdx.x; i < need; i += kTopkThreads) sm.out[above + i] = sm.candidate_index[i];
      __syncthreads();
    } else {
      refine(candidates, need, above, bounds.candidate, bounds.above, sm);
    }
  }
  __syncthreads();
  const int report[kTopkReportInts] = {histogram_use, t.bin, static_cast<int>(t.bin < kCoarseBins ? t.count : 0), row_passes};
  write_output<In>(p, r, row, above, selected, sm, report);
}

}  // namespace kernels
}  // namespace flash_indexer
