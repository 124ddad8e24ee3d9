#pragma once
// Portable sparse paged MQA logits (any GPU sm_80 or newer; docs/design/two-level.md): the paged
// logits (contract §1, exact FP32 arithmetic as paged_mqa_logits_portable.cuh) of each query row over
// its candidate blocks only. Output column c * kBlock + o of row r is position
//   pos = candidates[r][c] * kBlock + o
// of the row's context when the candidate is one of the row's blocks (0 <= candidate < ceil(len /
// kBlock)) and pos < len, else -inf (NaN with params.masked_nan); such columns never read the cache.
// A live position whose block-table slot lies past max_blocks, or whose block id lies outside [0,
// num_blocks), is NaN, as in the full-context op.
//
// One CTA computes 64 consecutive output columns of one row (kSparseTile keys gathered from their
// blocks). Thread t works on key t % 64 and the heads h = t / 64, + 4, ...; the per-group partial sums
// are added in a fixed order, so results are bitwise deterministic.
#include "coarse_histogram.cuh"
#include "grid_dependency.cuh"
#include "numeric.cuh"
#include "paged_mqa_logits_params.cuh"
#include "sparse_paged_mqa_logits_params.cuh"

namespace flash_indexer {
namespace kernels {

template <int kHeads, int kHeadDim, int kBlock, bool kHistogram, LogitsOut kOut, bool kMxfp4 = false>
__device__ void sparse_paged_mqa_logits_portable(const SparsePagedMqaLogitsParams& params) {
  await_previous_kernel();  // before this kernel's first global memory access
  static_assert(kSparseTile % kBlock == 0, "whole candidate blocks per tile");
  static_assert((kHeadDim % 16) == 0 && (kHeads * kHeadDim) % 16 == 0, "16-byte vector loads");
  constexpr int kKeyStride = kHeadDim + 1;  // +1 float: reads across keys free of bank conflicts
  constexpr int kGroups = kSparsePortableThreads / kSparseTile;
  constexpr int kCacheBlock = 64;  // tokens per block of the paged cache
  using Store = LogitsStore<kOut>;
  const PagedMqaLogitsParams& p = params.p;

  extern __shared__ float smem[];
  float* key_s = smem;  // [kSparseTile][kKeyStride]
  float* query_s = key_s + kSparseTile * kKeyStride;  // [kHeads][kHeadDim]
  float* weight_s = query_s + kHeads * kHeadDim;  // [kHeads]
  float* scale_s = weight_s + kHeads;  // [kSparseTile]
  float* partial_s = scale_s + kSparseTile;  // [kGroups][kSparseTile]
  __shared__ long long key_offset_s[kSparseTile];  // byte offset of the key's block, -1: -inf, -2: NaN
  __shared__ int key_token_s[kSparseTile];  // the key's token within its block

  const int tid = threadIdx.x;
  const int r = blockIdx.y;
  const int b = r / params.next_n, j = r % params.next_n;
  const int column0 = blockIdx.x * kSparseTile;
  const int columns = min(kSparseTile, params.num_candidates * kBlock - column0);
  long long len = p.lens_2d ? p.context_lens[r] : static_cast<long long>(p.context_lens[b]) - params.next_n + j + 1;
  if (len < 0) len = 0;
  const long long live_blocks = (len + kBlock - 1) / kBlock;

  // Where each of the tile's keys lies: its candidate, position, table slot and block.
  if (tid < kSparseTile) {
    long long offset = -1;
    int token = 0;
    if (tid < columns) {
      const int column = column0 + tid;
      const long long candidate = params.candidates[static_cast<long long>(r) * params.candidates_stride + column / kBlock];
      const long long pos = candidate * kBlock + column % kBlock;
      if (candidate >= 0 && candidate < live_blocks && pos < len) {
        const long long slot = pos / kCacheBlock;
        const int id = slot < p.max_blocks ? p.block_table[static_cast<long long>(b) * p.block_table_stride + slot] : -1;
        offset = id >= 0 && id < p.num_blocks ? static_cast<long long>(id) * p.kv_block_stride : -2;
        token = static_cast<int>(pos % kCacheBlock);
      }
    }
    key_offset_s[tid] = offset;
    key_token_s[tid] = token;
  }
  __syncthreads();

  // The keys, dequantized: 16 bytes (FP8) or 32 values (MXFP4) per step, a key's chunks by consecutive
  // threads.
  constexpr int kChunksPerKey = kMxfp4 ? kHeadDim / 32 : kHeadDim / 16;
  for (int c = tid; c < kSparseTile * kChunksPerKey; c += kSparsePortableThreads) {
    const int key = c / kChunksPerKey, chunk = c % kChunksPerKey;
    const long long offset = key_offset_s[key];
    if (offset < 0) continue;
    const unsigned char* block = p.kv_cache + offset;
    const int token = key_token_s[key];
    if constexpr (kMxfp4) {
      const int exponents = reinterpret_cast<const int*>(block + kCacheBlock * kHeadDim / 2)[token];
      mxfp4x32_to_float(reinterpret_cast<const uint4*>(block + token * (kHeadDim / 2))[chunk],
                        mxfp4_group_scale(exponents, chunk), key_s + key * kKeyStride + chunk * 32);
      if (chunk == 0) scale_s[key] = 1.0f;
    } else {
      fp8x16_to_float(reinterpret_cast<const uint4*>(block + token * kHeadDim)[chunk], key_s + key * kKeyStride + chunk * 16);
      if (chunk == 0) scale_s[key] = reinterpret_cast<const float*>(block + kCacheBlock * kHeadDim)[token];
    }
  }
  if constexpr (kMxfp4) {
    const unsigned char* q = p.q + static_cast<long long>(r) * (kHeads * kHeadDim / 2);
    constexpr int kChunks = kHeads * kHeadDim / 32;  // 16 bytes: 32 values of one head
    for (int c = tid; c < kChunks; c += kSparsePortableThreads) {
      const int head = (c * 32) / kHeadDim, dim = (c * 32) % kHeadDim;
      mxfp4x32_to_float(reinterpret_cast<const uint4*>(q)[c],
                        mxfp4_group_scale(p.q_scales[static_cast<long long>(r) * kHeads + head], dim / 32), query_s + c * 32);
    }
  } else {
    const unsigned char* q = p.q + static_cast<long long>(r) * (kHeads * kHeadDim);
    constexpr int kChunks = kHeads * kHeadDim / 16;
    for (int c = tid; c < kChunks; c += kSparsePortableThreads)
      fp8x16_to_float(reinterpret_cast<const uint4*>(q)[c], query_s + c * 16);
  }
  for (int h = tid; h < kHeads; h += kSparsePortableThreads) weight_s[h] = p.weights[static_cast<long long>(r) * kHeads + h];
  __syncthreads();

  const int key = tid % kSparseTile;
  const int group = tid / kSparseTile;
  if (key_offset_s[key] >= 0)
    partial_s[group * kSparseTile + key] =
        heads_relu_dot<kHeads, kHeadDim>(query_s, key_s + key * kKeyStride, weight_s, group, kGroups);
  __syncthreads();

  if (tid < kSparseTile) {  // whole warps: column tid of the tile
    int bin = -1;
    if (tid < columns) {
      const long long index = static_cast<long long>(r) * p.logits_stride + column0 + tid;
      const long long offset = key_offset_s[tid];
      if (offset == -1) {
        Store::store(p.logits, index, params.masked_nan ? quiet_nan() : negative_infinity());
      } else if (offset < 0) {
        Store::store(p.logits, index, quiet_nan());
      } else {
        float sum = 0.0f;
#pragma unroll
        for (int g = 0; g < kGroups; ++g) sum += partial_s[g * kSparseTile + tid];
        bin = histogram_bin(Store::store(p.logits, index, sum * scale_s[tid]));
      }
    }
    if constexpr (kHistogram) add_to_histogram_warp(p.histogram + static_cast<long long>(r) * kCoarseBins, bin);
  }
}

}  // namespace kernels
}  // namespace flash_indexer
