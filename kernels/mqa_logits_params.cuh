#pragma once
// Kernel parameters of the ragged (prefill) MQA logits kernel, shared verbatim by the host launcher and
// the device code (plain types only: compiled by both the host compiler and NVRTC).

#include "paged_mqa_logits_params.cuh"  // the sm_90a geometry (consumers, stages, shared-memory layout)

namespace flash_indexer {
namespace kernels {

struct MqaLogitsParams {
  const unsigned char* q;    // FP8 [T, H, D], contiguous
  const unsigned char* kv;   // FP8 [N, D], row stride kv_stride bytes
  const float* kv_scales;    // [N]
  const float* weights;      // [T, H], contiguous
  const int* ks;             // [T]: token t scores keys [ks[t], ke[t]) (clamped to [0, N])
  const int* ke;             // [T]
  void* logits;              // [T, width], row stride logits_stride
  int* histogram;            // [T, 1024] coarse-bin counts to add to (histogram kernels only)
  long long kv_stride;       // bytes between consecutive keys (a multiple of 16)
  long long logits_stride;   // elements
  int tokens;                // T
  int keys;                  // N
  int fill_masked;           // 1: write -inf into the columns outside each token's window
  // 0: column c of a row is key c (width = N); 1: it is key start + c of the row's window (DeepGEMM's
  // compressed form, max_seqlen_k), keys at or past start + width are not stored (nor counted).
  int compressed;
  int width;                 // columns of a logits row
};

// The portable kernel's geometry: a CTA takes 64 consecutive keys for up to 8 consecutive tokens, so
// each key block is read and dequantized once per 8 tokens.
constexpr int kMqaThreads = 256;
constexpr int kMqaKeys = 64;
constexpr int kMqaTokens = 8;

// Its shared memory: keys as FP32 [64][head_dim + 1] (+1 keeps reads across keys free of bank
// conflicts), one query row [heads][head_dim], its weights, the key scales and one partial sum per
// (head group, key).
constexpr int mqa_portable_smem_bytes(int heads, int head_dim) {
  return (kMqaKeys * (head_dim + 1) + heads * head_dim + heads + kMqaKeys + (kMqaThreads / kMqaKeys) * kMqaKeys) * 4;
}

// ---- the sm_90a kernel ----------------------------------------------------------------------

// A CTA takes kMqaSm90Rows / H consecutive tokens (one wgmma N of 128 query rows) and `tiles_per_split`
// consecutive 64-key tiles (grid: token groups x splits), skipping the tiles outside every window of
// its tokens; the geometry of the paged sm90 kernel with next_n = the tokens of the group.
struct MqaLogitsSm90Params {
  MqaLogitsParams p;
  TensorMap kv_map;  // uint8 {head_dim, N}, row stride kv_stride bytes; box {head_dim, 64}
  TensorMap q_map;   // uint8 {head_dim, T * H}; box {head_dim, 128}
  // float {N} at kv_scales, box {64}: a tile's scales, keys past N read as 0. Only where kv_scales is
  // 16-byte aligned (scales_in_stage; else unset): a map from the address rounded down, with boxes
  // starting 1-3 floats past 16 bytes, stops the kernel with an illegal instruction, so other scales
  // are read from global memory.
  TensorMap scales_map;
  int tiles_per_split;
  int scales_in_stage;  // the consumers read the scales from the ring stage (else from global)
};

constexpr int kMqaSm90Rows = 128;
constexpr int mqa_sm90_tokens(int heads) { return kMqaSm90Rows / heads; }
// Four consumer warpgroups (as DeepGEMM's prefill kernel): while one runs its epilogue the others keep
// the tensor cores busy (three left them half idle). 640 threads fit the register file only by moving
// registers from the producer warpgroup (32) to the consumers (112) with setmaxnreg; of the producer
// warpgroup only the producer thread works. Stages: a multiple of the 4 consumers.
constexpr int kMqaSm90Consumers = 4;
constexpr int kMqaSm90Threads = 128 * (kMqaSm90Consumers + 1);
constexpr int kMqaSm90Stages = 12;
constexpr int kMqaSm90ProducerRegisters = 32;
constexpr int kMqaSm90ConsumerRegisters = 112;
constexpr Sm90Layout mqa_sm90_layout(int heads, int head_dim, bool histogram) {
  return sm90_layout(mqa_sm90_tokens(heads), heads, head_dim, histogram, kMqaSm90Stages, false, false);
}

}  // namespace kernels
}  // namespace flash_indexer
