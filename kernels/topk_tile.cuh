#pragma once
// A CTA's segment of a logits row in shared memory, as the top-k selectors read it (topk_split.cuh,
// topk_resident.cuh): the cp.async copies and the thread-to-vector layout.
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

__device__ __forceinline__ void cp_async16(unsigned int smem, const void* global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
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

  // Logit s of the tile (column base + s), whoever owns it.
  __device__ __forceinline__ Raw at_column(int s) const {
    const int g = s / kPer;
    return reinterpret_cast<const Raw*>(&slots[slot(g & (live - 1), g >> live_shift())])[s % kPer];
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

}  // namespace kernels
}  // namespace flash_indexer
