#pragma once
// The consumer warpgroup's math of the sm_90a MQA logits kernels (paged: paged_mqa_logits_sm90.cuh;
// ragged prefill: mqa_logits_sm90.cuh), for one stage of 64 keys against kRows query rows of kHeads
// heads (N = kRows * kHeads wgmma columns):
//
//   S[64 keys x N] = K[64 x D] * Q[N x D]^T     (wgmma m64nNk32 E4M3 x E4M3 -> FP32)
//   sum[j][r]      = sum_h w[j, h] * max(S[key_r, j*H + h], 0)   for this thread's keys key0, key0 + 8
//
// The head sum runs in registers (each thread holds 2 keys x N/4 columns of S), then across the 4
// lanes of a quad with shuffles, in a fixed order: results are bitwise deterministic.
#include "sm90_primitives.cuh"

namespace flash_indexer {
namespace kernels {

template <int kRows, int kHeads, int kHeadDim>
struct Sm90MqaTile {
  static constexpr int kN = kRows * kHeads;
  static_assert(kN <= 256, "one wgmma tile in N");
  static_assert(kHeads % 8 == 0, "an 8-column wgmma group never spans two query rows");
  static constexpr int kChunk = kN % 64 == 0 ? 64 : kN % 32 == 0 ? 32 : 16;
  static constexpr int kChunks = kN / kChunk;
  static constexpr int kKeyBytes = 64 * kHeadDim;
  using Mma = sm90::WgmmaFp8<kChunk>;
  using Acc = float[kChunks][kChunk / 2];

  // acc = K(stage) * Q^T; waits for the wgmma, so the stage may be released on return.
  __device__ __forceinline__ static void scores(Acc& acc, const unsigned char* k_stage, const unsigned char* q_s) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int r = 0; r < kChunk / 2; ++r) sm90::fence_register(acc[c][r]);
    sm90::wgmma_fence();
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 32; ++kk)
        Mma::mma(acc[c], sm90::matrix_descriptor<kHeadDim>(k_stage + kk * 32),
                 sm90::matrix_descriptor<kHeadDim>(q_s + c * kChunk * kHeadDim + kk * 32), kk);
    sm90::wgmma_commit();
    sm90::wgmma_wait_all();
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int r = 0; r < kChunk / 2; ++r) sm90::fence_register(acc[c][r]);
  }

  // Column c = j * H + h of S: a thread holds columns 8g + 2 * quad + {0, 1} of each 8-column group g,
  // for its two keys (accumulator registers 4g + {0, 1} and 4g + {2, 3}). Every lane of the quad ends
  // with the same sums.
  __device__ __forceinline__ static void head_sums(const Acc& acc, const float* weight_s, int quad, float (&sum)[kRows][2]) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) sum[j][0] = sum[j][1] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
#pragma unroll
      for (int g = 0; g < kChunk / 8; ++g) {
        constexpr int kGroupsPerRow = kHeads / 8;
        const int j = (c * (kChunk / 8) + g) / kGroupsPerRow;
        const float2 w = *reinterpret_cast<const float2*>(&weight_s[c * kChunk + 8 * g + 2 * quad]);
        sum[j][0] = fmaf(fmaxf(acc[c][4 * g], 0.0f), w.x, sum[j][0]);
        sum[j][1] = fmaf(fmaxf(acc[c][4 * g + 2], 0.0f), w.x, sum[j][1]);
        sum[j][0] = fmaf(fmaxf(acc[c][4 * g + 1], 0.0f), w.y, sum[j][0]);
        sum[j][1] = fmaf(fmaxf(acc[c][4 * g + 3], 0.0f), w.y, sum[j][1]);
      }
#pragma unroll
    for (int j = 0; j < kRows; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sum[j][r] += __shfl_xor_sync(0xffffffffu, sum[j][r], 1);
        sum[j][r] += __shfl_xor_sync(0xffffffffu, sum[j][r], 2);
      }
  }
};

}  // namespace kernels
}  // namespace flash_indexer
