#pragma once
// Portable ragged (prefill) MQA logits (any GPU sm_80 or newer): token t scores the keys of its window
// [ks[t], ke[t]) of one contiguous FP8 key buffer, with the math of contract §1 in exact FP32 arithmetic
// on dequantized FP8, as the portable paged kernel does (paged_mqa_logits_portable.cuh). Written for
// clarity, not speed: the tensor-core kernel for prefill is still to come.
//
// A CTA takes kMqaKeys consecutive keys and up to kMqaTokens consecutive tokens: the keys are
// dequantized once into shared memory, then each token's query row is scored against them. Thread t
// works on key t % 64 and the heads h = t / 64, + 4, ...; the per-group partial sums are added in a
// fixed order, so results are bitwise deterministic. With kHistogram the threads that store a row's
// logits also add their coarse bins (of the values as stored) to the row's histogram.
#include "coarse_histogram.cuh"
#include "grid_dependency.cuh"
#include "mqa_logits_params.cuh"
#include "mqa_window.cuh"
#include "numeric.cuh"

namespace flash_indexer {
namespace kernels {

template <int kHeads, int kHeadDim, bool kHistogram, LogitsOut kOut>
__device__ void mqa_logits_portable(const MqaLogitsParams& p) {
  await_previous_kernel();  // before this kernel's first global memory access
  static_assert(kMqaThreads % kMqaKeys == 0 && kMqaKeys % 32 == 0, "whole warps of keys");
  static_assert((kHeadDim % 16) == 0 && (kHeads * kHeadDim) % 16 == 0, "16-byte vector loads");
  constexpr int kKeyStride = kHeadDim + 1;
  constexpr int kHeadGroups = kMqaThreads / kMqaKeys;
  using Store = LogitsStore<kOut>;

  extern __shared__ float smem[];
  float* key_s = smem;                             // [kMqaKeys][kKeyStride]
  float* query_s = key_s + kMqaKeys * kKeyStride;  // [kHeads][kHeadDim]
  float* weight_s = query_s + kHeads * kHeadDim;   // [kHeads]
  float* scale_s = weight_s + kHeads;              // [kMqaKeys]
  float* partial_s = scale_s + kMqaKeys;           // [kHeadGroups][kMqaKeys]

  const int tid = threadIdx.x;
  const int s0 = blockIdx.x * kMqaKeys;
  const int columns = min(kMqaKeys, p.keys - s0);
  const int t0 = blockIdx.y * kMqaTokens;
  const int t1 = min(p.tokens, t0 + kMqaTokens);

  // Does any token of this CTA see any of its keys? Otherwise only the masked fill remains.
  bool any = false;
  for (int t = t0; t < t1; ++t) {
    const MqaWindow w = mqa_window(p, t);
    any |= w.start < s0 + columns && w.end > s0;
  }
  if (any) {
    constexpr int kChunksPerKey = kHeadDim / 16;
    for (int c = tid; c < columns * kChunksPerKey; c += kMqaThreads) {
      const int key = c / kChunksPerKey, dim = (c % kChunksPerKey) * 16;
      fp8x16_to_float(*reinterpret_cast<const uint4*>(p.kv + static_cast<long long>(s0 + key) * p.kv_stride + dim),
                      key_s + key * kKeyStride + dim);
    }
    for (int i = tid; i < columns; i += kMqaThreads) scale_s[i] = p.kv_scales[s0 + i];
  }

  const int key = tid % kMqaKeys;
  const int group = tid / kMqaKeys;
  for (int t = t0; t < t1; ++t) {
    const MqaWindow w = mqa_window(p, t);
    const long long row = static_cast<long long>(t) * p.logits_stride;
    if (!(w.start < s0 + columns && w.end > s0)) {
      if (p.fill_masked)
        for (int i = tid; i < columns; i += kMqaThreads) Store::store(p.logits, row + s0 + i, negative_infinity());
      continue;
    }

    __syncthreads();  // the keys are in; the previous token is done with query_s / weight_s / partial_s
    {
      const unsigned char* q = p.q + static_cast<long long>(t) * (kHeads * kHeadDim);
      constexpr int kChunks = kHeads * kHeadDim / 16;
      for (int c = tid; c < kChunks; c += kMqaThreads) fp8x16_to_float(reinterpret_cast<const uint4*>(q)[c], query_s + c * 16);
      for (int h = tid; h < kHeads; h += kMqaThreads) weight_s[h] = p.weights[static_cast<long long>(t) * kHeads + h];
    }
    __syncthreads();

    partial_s[group * kMqaKeys + key] =
        heads_relu_dot<kHeads, kHeadDim>(query_s, key_s + key * kKeyStride, weight_s, group, kHeadGroups);
    __syncthreads();

    if (tid < kMqaKeys) {  // whole warps: column tid of the block
      const int i = tid, s = s0 + i;
      int bin = -1;
      if (i < columns) {
        if (s < w.start || s >= w.end) {
          if (p.fill_masked) Store::store(p.logits, row + s, negative_infinity());  // never compressed (host)
        } else {
          const int column = p.compressed ? s - w.start : s;  // compressed rows start at the window's first key
          float sum = 0.0f;
#pragma unroll
          for (int g = 0; g < kHeadGroups; ++g) sum += partial_s[g * kMqaKeys + i];
          bin = histogram_bin(Store::store(p.logits, row + column, sum * scale_s[i]));
        }
      }
      if constexpr (kHistogram) add_to_histogram_warp(p.histogram + static_cast<long long>(t) * kCoarseBins, bin);
    }
  }
}

}  // namespace kernels
}  // namespace flash_indexer
