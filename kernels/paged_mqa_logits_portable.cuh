#pragma once
// Portable paged MQA logits (any GPU sm_80 or newer): exact FP32 arithmetic on dequantized FP8 (or,
// with kMxfp4, MXFP4: keys and query dequantized exactly from E2M1 and their UE8M0 exponents, no FP32
// key scale), written for clarity, not speed. One CTA handles one KV block (block_size keys) of one request for
// all of its next_n query rows, so the block is read once per request.
//
// Thread t works on key (t % block_size) and the heads h = t / block_size, + kHeadGroups, ...; the
// per-group partial sums are added in a fixed order, so results are bitwise deterministic.
//
// With kHistogram the threads that store a row's logits also add their coarse bins (of the values as
// stored) to the row's histogram; the stores themselves are the same instructions either way, so the
// logits are bitwise identical with and without it.
#include "coarse_histogram.cuh"
#include "grid_dependency.cuh"
#include "numeric.cuh"
#include "paged_mqa_logits_params.cuh"
#include "paged_mqa_logits_rows.cuh"

namespace flash_indexer {
namespace kernels {

// The layout portable_smem_bytes() sizes.
template <int kHeads, int kHeadDim, int kBlockSize>
struct PortableSmem {
  static constexpr int kKeyStride = kHeadDim + 1;
  static constexpr int kHeadGroups = kPortableThreads / kBlockSize;
  static constexpr int kKeyFloats = kBlockSize * kKeyStride;
  static constexpr int kQueryFloats = kHeads * kHeadDim;
};

template <int kNextN, int kHeads, int kHeadDim, int kBlockSize, bool kHistogram, LogitsOut kOut, bool kMxfp4 = false>
__device__ void paged_mqa_logits_portable(const PagedMqaLogitsParams& p) {
  await_previous_kernel();  // before this kernel's first global memory access
  static_assert(kPortableThreads % kBlockSize == 0, "block size must divide the CTA");
  static_assert(kBlockSize % 32 == 0, "the store loop is one column per thread in whole warps");
  static_assert((kHeadDim % 16) == 0 && (kHeads * kHeadDim) % 16 == 0, "16-byte vector loads");
  using Smem = PortableSmem<kHeads, kHeadDim, kBlockSize>;
  using Store = LogitsStore<kOut>;

  extern __shared__ float smem[];
  float* key_s = smem;                          // [kBlockSize][kKeyStride]
  float* query_s = key_s + Smem::kKeyFloats;    // [kHeads][kHeadDim]
  float* weight_s = query_s + Smem::kQueryFloats;  // [kHeads]
  float* scale_s = weight_s + kHeads;           // [kBlockSize]
  float* partial_s = scale_s + kBlockSize;      // [kHeadGroups][kBlockSize]

  const int tid = threadIdx.x;
  const int b = blockIdx.y;
  const int block_index = blockIdx.x;
  const int s0 = block_index * kBlockSize;
  const int columns = min(kBlockSize, p.width - s0);

  int max_len = 0;
#pragma unroll
  for (int j = 0; j < kNextN; ++j) max_len = max(max_len, row_length<kNextN>(p, b, j));

  if (s0 >= max_len) {
    if (p.fill_masked) {
      for (int i = tid; i < kNextN * columns; i += kPortableThreads) {
        const long long row = static_cast<long long>(b) * kNextN + i / columns;
        Store::store(p.logits, row * p.logits_stride + s0 + i % columns, negative_infinity());
      }
    }
    return;
  }

  // A slot past the table or an id outside the cache is never dereferenced (its logits become NaN).
  const int block_id =
      block_index < p.max_blocks ? p.block_table[static_cast<long long>(b) * p.block_table_stride + block_index] : -1;
  const bool block_valid = block_id >= 0 && block_id < p.num_blocks;

  if (block_valid) {
    const unsigned char* block = p.kv_cache + static_cast<long long>(block_id) * p.kv_block_stride;
    if constexpr (kMxfp4) {
      // Packed E2M1 (16 bytes: 32 values of one key), then one int32 of four exponents per key.
      const int* exponents = reinterpret_cast<const int*>(block + kBlockSize * kHeadDim / 2);
      constexpr int kChunks = kBlockSize * kHeadDim / 32;
      for (int c = tid; c < kChunks; c += kPortableThreads) {
        const int key = (c * 32) / kHeadDim;
        const int dim = (c * 32) % kHeadDim;
        mxfp4x32_to_float(reinterpret_cast<const uint4*>(block)[c], mxfp4_group_scale(exponents[key], dim / 32),
                          key_s + key * Smem::kKeyStride + dim);
      }
      for (int i = tid; i < kBlockSize; i += kPortableThreads) scale_s[i] = 1.0f;
    } else {
      constexpr int kChunks = kBlockSize * kHeadDim / 16;
      for (int c = tid; c < kChunks; c += kPortableThreads) {
        const int key = (c * 16) / kHeadDim;
        const int dim = (c * 16) % kHeadDim;
        fp8x16_to_float(reinterpret_cast<const uint4*>(block)[c], key_s + key * Smem::kKeyStride + dim);
      }
      const float* scales = reinterpret_cast<const float*>(block + kBlockSize * kHeadDim);
      for (int i = tid; i < kBlockSize; i += kPortableThreads) scale_s[i] = scales[i];
    }
  }

  const int key = tid % kBlockSize;
  const int group = tid / kBlockSize;
  for (int j = 0; j < kNextN; ++j) {
    const int len = row_length<kNextN>(p, b, j);
    const long long row = static_cast<long long>(b) * kNextN + j;
    if (s0 >= len) {
      if (p.fill_masked)
        for (int i = tid; i < columns; i += kPortableThreads)
          Store::store(p.logits, row * p.logits_stride + s0 + i, negative_infinity());
      continue;
    }

    __syncthreads();  // the previous row is done with query_s / weight_s / partial_s
    if (block_valid) {
      if constexpr (kMxfp4) {
        const unsigned char* q = p.q + row * (kHeads * kHeadDim / 2);
        constexpr int kChunks = kHeads * kHeadDim / 32;  // 16 bytes: 32 values of one head
        for (int c = tid; c < kChunks; c += kPortableThreads) {
          const int head = (c * 32) / kHeadDim, dim = (c * 32) % kHeadDim;
          mxfp4x32_to_float(reinterpret_cast<const uint4*>(q)[c], mxfp4_group_scale(p.q_scales[row * kHeads + head], dim / 32),
                            query_s + c * 32);
        }
      } else {
        const unsigned char* q = p.q + row * (kHeads * kHeadDim);
        constexpr int kChunks = kHeads * kHeadDim / 16;
        for (int c = tid; c < kChunks; c += kPortableThreads)
          fp8x16_to_float(reinterpret_cast<const uint4*>(q)[c], query_s + c * 16);
      }
      for (int h = tid; h < kHeads; h += kPortableThreads) weight_s[h] = p.weights[row * kHeads + h];
    }
    __syncthreads();

    if (block_valid)
      partial_s[group * kBlockSize + key] =
          heads_relu_dot<kHeads, kHeadDim>(query_s, key_s + key * Smem::kKeyStride, weight_s, group, Smem::kHeadGroups);
    __syncthreads();

    if (tid < kBlockSize) {  // whole warps: column tid of the block
      const int i = tid;
      int bin = -1;
      if (i < columns) {
        if (s0 + i >= len) {
          if (p.fill_masked) Store::store(p.logits, row * p.logits_stride + s0 + i, negative_infinity());
        } else if (!block_valid) {
          Store::store(p.logits, row * p.logits_stride + s0 + i, quiet_nan());
        } else {
          float sum = 0.0f;
#pragma unroll
          for (int g = 0; g < Smem::kHeadGroups; ++g) sum += partial_s[g * kBlockSize + i];
          const float stored = Store::store(p.logits, row * p.logits_stride + s0 + i, sum * scale_s[i]);
          bin = histogram_bin(stored);
        }
      }
      if constexpr (kHistogram) add_to_histogram_warp(p.histogram + row * kCoarseBins, bin);
    }
  }
}

}  // namespace kernels
}  // namespace flash_indexer
