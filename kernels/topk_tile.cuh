#pragma once
// A CTA's segment of a logits row in shared memory, as the top-k selectors read it: the copies (cp.async;
// bulk copies for the resident selector on sm_90) and the thread-to-vector layouts (TopkTile for
// topk_split.cuh, TopkResidentTile for topk_resident.cuh).
#include "cluster.cuh"
#include "sm90_primitives.cuh"
#include "topk_common.cuh"

namespace flash_indexer {
namespace kernels {

// A CTA's segment passes through shared memory (dynamic) in 16-byte vectors: cp.async copies, so the
// loads of later stages fly while a stage is counted or selected, and no registers hold data in flight.
// A segment of at most kStages * kStageVectors vectors (16K FP32 or 32K FP16/BF16 logits with 4 stages)
// is loaded once and stays resident for every pass; a longer one streams through a ring of kStages
// stages, kStages - 1 of them in flight.
constexpr int kStageVectors = kTopkStageBytes / 16;
constexpr int kMaxLive = 8;                      // vectors per thread of a resident tile (4 stages)

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
// cp_async_wait for a pending count known at run time, 0..kMaxPending.
template <int kMaxPending>
__device__ __forceinline__ void cp_async_wait_at_most(int pending) {
  if constexpr (kMaxPending > 0) {
    if (pending >= kMaxPending) {
      cp_async_wait<kMaxPending>();
      return;
    }
    cp_async_wait_at_most<kMaxPending - 1>(pending);
  } else {
    cp_async_wait<0>();
  }
}

// One tile of a segment in shared memory: `live` vectors per thread, thread t owning the consecutive
// vectors [t * live, (t + 1) * live), so column order is (thread, u, e) and one warp scan of per-thread
// counts places a whole tile. The vectors are copied in global order (coalesced) into swizzled slots
// (slot()), so neither the copies nor the owners' reads conflict on shared-memory banks.
template <class In, int kThreads = kTopkThreads>
struct TopkTile {
  using Raw = typename In::Raw;
  static constexpr int kPer = 16 / static_cast<int>(sizeof(Raw));  // logits per vector
  const uint4* slots;  // this tile's first slot
  int base;            // column of vector 0
  int live;            // vectors per thread (block-uniform): 1, 2, 4 or 8
  __device__ __forceinline__ int live_shift() const { return live >= 4 ? (live >> 2) + 1 : live >> 1; }
  // Vectors per thread for a tile of `vectors` vectors: a power of two, so the loader needs no division.
  __device__ __forceinline__ static int live_for(int vectors) {
    const int per = (vectors + kThreads - 1) / kThreads;
    return per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : 8;
  }

  __device__ __forceinline__ int column(int i) const {  // i: this thread's i-th logit of the tile
    return base + static_cast<int>(threadIdx.x) * live * kPer + i;
  }
  // Slot of vector u of thread `owner`: row u, the owner's index with its low 3 bits swizzled by u. Eight
  // lanes of a 16-byte access (one shared-memory wavefront) then hit eight different bank quads, both
  // for the loader (consecutive vectors: a few owners, several u) and for the owner's reads (one u,
  // consecutive owners).
  __device__ __forceinline__ int slot(int u, int owner) const { return u * kThreads + (owner ^ (u * (8 / live))); }
  __device__ __forceinline__ uint4 vector(int u) const { return slots[slot(u, threadIdx.x)]; }
  // Element e of a vector: selects (no local memory) whether or not e is a constant.
  __device__ __forceinline__ static Raw element(const uint4& v, int e) {
    const int i = kPer == 4 ? e : e >> 1;
    const unsigned int word = i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
    if constexpr (kPer == 4) return In::from_bits(word);
    else return In::from_bits(word >> ((e & 1) * 16));
  }
  // This thread's i-th logit, read back from shared memory.
  __device__ __forceinline__ Raw at(int i) const {
    const Raw* v = reinterpret_cast<const Raw*>(&slots[slot(i / kPer, threadIdx.x)]);
    return v[i % kPer];
  }

  // Copies columns [base, base + live * kThreads * kPer) of the row into the tile's slots; columns
  // outside [start, end) (the row's window) read as NaN. Whole vectors of a 16-byte aligned row go by
  // cp.async (coalesced: thread t copies vectors t, t + kThreads, ...); a partial vector and rows off 16
  // bytes go element by element. The caller commits, waits and synchronizes the block before the tile
  // is read.
  __device__ __forceinline__ void load(const void* row, int start, int end, bool aligned, uint4* slots_rw) const {
    const int vectors = live * kThreads;
    const Raw nan = In::nan();
    for (int g = threadIdx.x; g < vectors; g += kThreads) {
      const int owner = g >> live_shift(), u = g & (live - 1);
      uint4* slot = slots_rw + this->slot(u, owner);
      const int s = base + g * kPer;
      if (aligned && s >= start && s + kPer <= end) {
        cp_async16(static_cast<unsigned int>(__cvta_generic_to_shared(slot)), static_cast<const Raw*>(row) + s);
      } else {
        Raw* out = reinterpret_cast<Raw*>(slot);
#pragma unroll
        for (int e = 0; e < kPer; ++e) out[e] = s + e >= start && s + e < end ? In::load(row, s + e) : nan;
      }
    }
  }

  // Adds this tile's selector-bin counts to sm.hist.
  __device__ __forceinline__ void count(TopkSmem& sm) const {
#pragma unroll 1
    for (int u = 0; u < live; ++u) {
      const uint4 v = vector(u);
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const Raw x = element(v, e);
        if (!In::is_nan(x)) atomicAdd(&sm.hist[In::selector_bin_of(x)], 1);
      }
    }
  }

  // Adds the kRefineBits-bit digits (key - bounds.candidate) >> shift of this tile's keys in
  // [bounds.candidate, bounds.above) to sm.hist, the largest digit first.
  __device__ __forceinline__ void count_digits(KeyBounds bounds, int shift, TopkSmem& sm) const {
#pragma unroll 1
    for (int u = 0; u < live; ++u) {
      const uint4 v = vector(u);
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const Raw x = element(v, e);
        const unsigned int key = In::key(x);
        if (!In::is_nan(x) && key >= bounds.candidate && key < bounds.above)
          atomicAdd(&sm.hist[(1 << kRefineBits) - 1 - static_cast<int>((key - bounds.candidate) >> shift)], 1);
      }
    }
  }
};

// The resident selector's segment in shared memory, in global order: vector g at slot g, so the whole
// interior of a 16-byte aligned row arrives by bulk copies (sm_90), which reach the read bandwidth where
// one 16-byte cp.async per thread and vector did not (docs/benchmarks/topk.md, "What bounds it").
// Thread t owns vectors t, t + kThreads, ... (`live` of them): the owners' reads are consecutive, so
// they never conflict on banks, and each row of kThreads vectors has its own mbarrier, so a thread
// counts its vector of a row as soon as that row has landed. Column order is (u, thread, e); the
// output reads the bitmaps, not the owners, so it is still placed in column order.
template <class In, int kThreads = kTopkThreads>
struct TopkResidentTile {
  using Raw = typename In::Raw;
  static constexpr int kPer = 16 / static_cast<int>(sizeof(Raw));  // logits per vector
  uint4* slots;  // the segment's vectors
  int base;      // column of vector 0
  int live;      // vectors per thread (block-uniform): 1, 2, 4 or 8

  __device__ __forceinline__ static int live_for(int vectors) { return TopkTile<In, kThreads>::live_for(vectors); }
  // Segment column (from base) of element e of this thread's vector u.
  __device__ __forceinline__ int own_column(int u, int e) const {
    return (u * kThreads + static_cast<int>(threadIdx.x)) * kPer + e;
  }
  __device__ __forceinline__ uint4 vector(int u) const { return slots[u * kThreads + threadIdx.x]; }
  __device__ __forceinline__ static Raw element(const uint4& v, int e) { return TopkTile<In, kThreads>::element(v, e); }
  // Logit s of the segment (column base + s), whoever owns it.
  __device__ __forceinline__ Raw at_column(int s) const { return reinterpret_cast<const Raw*>(slots)[s]; }

  // Whether load() copies by bulk copies: on sm_90, a 16-byte aligned row, and at least two rows of
  // vectors (a single row landed later by one bulk copy than by a cp.async per thread: FP16 1 x 32K on
  // clusters of 8, docs/benchmarks/topk.md).
  __device__ __forceinline__ bool bulk(bool aligned) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return aligned && live >= 2;
#else
    return false;
#endif
  }

  // Starts the copies of columns [base, base + live * kThreads * kPer); columns outside [start, end) (the
  // row's window) read as NaN. By bulk copies (bulk()), thread 0 copies each row u's whole vectors
  // inside the window by one copy that completes on loaded[u] (initialised here: the caller
  // synchronizes the block before any thread waits); every other vector is this thread's own, by cp.async
  // (one group per row, so wait_row() can wait for a row alone) or element by element.
  __device__ __forceinline__ void load(const void* row, int start, int end, bool aligned, unsigned long long* loaded) const {
    const int inside_first = start > base ? (start - base + kPer - 1) / kPer : 0;  // first vector inside the window
    const int inside_end = end > base ? (end - base) / kPer : 0;                    // past the last one
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (bulk(aligned)) {
      if (threadIdx.x == 0) {
        for (int u = 0; u < live; ++u) sm90::mbarrier_init(&loaded[u], 1);
        sm90::fence_barrier_init();  // the initialisations, before the copies that complete on them
        for (int u = 0; u < live; ++u) {
          const int g0 = max(u * kThreads, inside_first), g1 = min((u + 1) * kThreads, inside_end);
          const unsigned int bytes = g1 > g0 ? 16u * static_cast<unsigned int>(g1 - g0) : 0u;
          cluster::expect_bytes(&loaded[u], bytes);
          if (bytes != 0) sm90::bulk_load(slots + g0, static_cast<const Raw*>(row) + base + g0 * kPer, bytes, &loaded[u]);
        }
      }
      for (int u = 0; u < live; ++u) {
        const int g = u * kThreads + static_cast<int>(threadIdx.x);
        if (g < inside_first || g >= inside_end) load_elements(g, row, start, end);
      }
      return;
    }
#endif
    for (int u = 0; u < live; ++u) {
      const int g = u * kThreads + static_cast<int>(threadIdx.x);
      if (aligned && g >= inside_first && g < inside_end)
        cp_async16(static_cast<unsigned int>(__cvta_generic_to_shared(slots + g)),
                   static_cast<const Raw*>(row) + base + g * kPer);
      else load_elements(g, row, start, end);
      cp_async_commit();
    }
  }
  // Waits until this thread's vector u has landed (load() from the same thread: its own stores and
  // cp.async groups; the bulk copies through loaded[u]). Every thread waits for every row before the
  // block barrier after which any thread reads any vector.
  __device__ __forceinline__ void wait_row(int u, bool aligned, unsigned long long* loaded) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (bulk(aligned)) {
      cluster::wait_received(&loaded[u]);
      return;
    }
#endif
    cp_async_wait_at_most<kMaxLive - 1>(live - 1 - u);
  }

 private:
  __device__ __forceinline__ void load_elements(int g, const void* row, int start, int end) const {
    const int s = base + g * kPer;
    Raw* out = reinterpret_cast<Raw*>(slots + g);
#pragma unroll
    for (int e = 0; e < kPer; ++e) out[e] = s + e >= start && s + e < end ? In::load(row, s + e) : In::nan();
  }
};

}  // namespace kernels
}  // namespace flash_indexer
