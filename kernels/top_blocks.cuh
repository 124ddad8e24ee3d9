#pragma once
// The first level of two-level indexing (docs/design/two-level.md, reference::top_blocks): the best
// blocks of each row by their largest score. One kernel in two phases around a topk() call over the
// blocks' maxima, so that the selection keeps every rule of topk() (larger first, -0 equal to +0, equal
// maxima to the lower block, NaN never, -1 padding, ascending order):
//   maxima  a thread per block writes its largest live score in the logits' own dtype (an exact copy of
//           one of them; NaN when it has none, which topk() never takes), and each row's block count,
//           the top-k's length. With keep_newest the newest block's maximum is NaN, so that the top-k
//           chooses among the others.
//   newest  (keep_newest) the top-k of the other blocks becomes their top k - 1 and the newest block,
//           which lies past all of them: appended after them where they are fewer than k, else in the
//           place of the worst of them (the smallest maximum, the higher block on a tie: the k-th by
//           topk()'s rules), the rest moved down so that the row stays ascending.
#include "numeric.cuh"
#include "top_blocks_params.cuh"
#include "topk_common.cuh"
#include "topk_params.cuh"

namespace flash_indexer {
namespace kernels {

template <LogitsOut kIn>
__device__ void top_blocks_maxima(const TopBlocksParams& p) {
  using In = TopkInput<kIn>;
  using Raw = typename In::Raw;
  const int r = blockIdx.x;
  const int n = p.lengths_next_n;
  const int given = n > 0 ? __ldg(p.lengths + r / n) - n + r % n + 1 : __ldg(p.lengths + r);
  const long long len = min(max(given, 0), p.width);
  const int blocks = static_cast<int>((len + p.block - 1) / p.block);
  if (blockIdx.y == 0 && threadIdx.x == 0) p.block_counts[r] = blocks;
  const int b = static_cast<int>(blockIdx.y) * kTopBlocksThreads + static_cast<int>(threadIdx.x);
  if (b >= blocks) return;
  const void* row = static_cast<const Raw*>(p.logits) + r * p.logits_stride;
  Raw best = In::nan();
  if (!(p.keep_newest && b == blocks - 1)) {
    const int from = b * p.block, to = static_cast<int>(min(static_cast<long long>(from) + p.block, len));
    bool any = false;
    unsigned int best_key = 0;
    for (int s = from; s < to; ++s) {
      const Raw x = In::load(row, s);
      if (In::is_nan(x)) continue;
      const unsigned int key = In::key(x);
      if (!any || key > best_key) {
        best = x;
        best_key = key;
        any = true;
      }
    }
  }
  static_cast<Raw*>(p.maxima)[r * p.maxima_stride + b] = best;
}

template <LogitsOut kIn>
__device__ void top_blocks_newest(const TopBlocksParams& p) {
  using In = TopkInput<kIn>;
  using Raw = typename In::Raw;
  constexpr int kPer = kMaxTopk / kTopBlocksThreads;
  __shared__ int taken;
  __shared__ unsigned long long worst;
  const int r = blockIdx.x, tid = static_cast<int>(threadIdx.x), k = p.k;
  const int blocks = p.block_counts[r];
  if (blocks == 0) return;  // nothing to take: the top-k wrote -1 throughout
  int* out = p.indices + static_cast<long long>(r) * k;
  if (tid == 0) {
    taken = 0;
    worst = ~0ull;
  }
  __syncthreads();
  int mine = 0;
  for (int j = tid; j < k; j += kTopBlocksThreads) mine += out[j] >= 0 ? 1 : 0;
  if (mine != 0) atomicAdd(&taken, mine);
  __syncthreads();
  if (taken < k) {
    if (tid == 0) out[taken] = blocks - 1;
    return;
  }
  // Every slot holds a block: the worst gives way. Candidates are (key << 32 | ~slot): the smallest is
  // the smallest maximum, and on equal maxima the later slot, which holds the higher block.
  const Raw* maxima = static_cast<const Raw*>(p.maxima) + r * p.maxima_stride;
  unsigned long long w = ~0ull;
  for (int j = tid; j < k; j += kTopBlocksThreads) {
    const unsigned long long c = static_cast<unsigned long long>(In::key(maxima[out[j]])) << 32 | (0xffffffffu - j);
    w = c < w ? c : w;
  }
  atomicMin(&worst, w);
  __syncthreads();
  const int at = static_cast<int>(0xffffffffu - static_cast<unsigned int>(worst & 0xffffffffull));
  int moved[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int j = tid + i * kTopBlocksThreads;
    moved[i] = j > at && j < k ? out[j] : 0;
  }
  __syncthreads();  // every slot read before any is rewritten
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int j = tid + i * kTopBlocksThreads;
    if (j > at && j < k) out[j - 1] = moved[i];
  }
  if (tid == 0) out[k - 1] = blocks - 1;
}

template <LogitsOut kIn>
__device__ void top_blocks(const TopBlocksParams& p) {
  if (p.phase == kTopBlocksMaxima) top_blocks_maxima<kIn>(p);
  else top_blocks_newest<kIn>(p);
}

}  // namespace kernels
}  // namespace flash_indexer
