#pragma once
// Accumulating the coarse score histogram (contract §3) from inside a kernel.
#include "coarse_bins.hpp"

namespace flash_indexer {
namespace kernels {

// Adds one count to hist[bin] for every lane whose bin is >= 0 (-1: nothing to count). Lanes holding
// the same bin are combined into one atomic: real rows repeat bins heavily (ReLU zeros, -inf-free
// ties), and one atomic per distinct bin per warp keeps the global atomics off the critical path.
// All 32 lanes of the warp must call it.
__device__ __forceinline__ void add_to_histogram_warp(int* hist, int bin) {
  const unsigned int peers = __match_any_sync(0xffffffffu, bin);
  if (bin >= 0 && static_cast<int>(threadIdx.x & 31u) == __ffs(peers) - 1) atomicAdd(hist + bin, __popc(peers));
}

// The bin of a stored logit, or -1 when it is not counted (NaN).
__device__ __forceinline__ int histogram_bin(float stored) { return stored != stored ? -1 : coarse_bin(stored); }

// Counts a stored logit into its row's shared-memory histogram unless it is NaN. The bin is computed
// whatever the value (coarse_bin is branch-free arithmetic) and only the atomic depends on the NaN test:
// one predicated atomic instead of a branch around the bin and another around the atomic (with both
// branches a value took about 25 instructions, in the loops that bound the histogram's cost).
__device__ __forceinline__ void count_stored(int* row_hist, float stored) {
  const int bin = coarse_bin(stored);
  if (stored == stored) atomicAdd(row_hist + bin, 1);
}

}  // namespace kernels
}  // namespace flash_indexer
