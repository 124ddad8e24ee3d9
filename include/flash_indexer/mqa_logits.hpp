#pragma once
// Ragged (prefill) MQA logits of the DeepSeek Sparse Attention indexer: T query tokens, token t scoring
// the keys of its window [ks[t], ke[t]) of one contiguous FP8 key buffer (contract §1's math and rules,
// as DeepGEMM's fp8_mqa_logits):
//
//   logits[t, s] = kv_scale[s] * sum_h w[t, h] * max(0, sum_d q[t, h, d] * k[s, d]),  ks[t] <= s < ke[t]
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"  // LogitsDType, Stream, TensorView, Arch

namespace flash_indexer {

// Which kernel: `portable` (any GPU from sm_80, exact FP32 CUDA-core arithmetic) or `sm90` (sm_90a:
// TMA + FP8 wgmma, for H100/H200); `automatic` resolves to sm90 where it applies (unless the environment
// sets FLASH_INDEXER_KERNEL=portable), as for paged_mqa_logits.
using MqaLogitsVariant = PagedMqaLogitsVariant;

// One compiled kernel: everything that is a template argument of the device code.
struct MqaLogitsConfig {
  int heads = 64;      // 16, 32, 64
  int head_dim = 128;  // 32 (the portable kernel), 64, 128
  bool histogram = false;
  LogitsDType logits = LogitsDType::f32;
  Arch arch{9, 0, true};
  MqaLogitsVariant variant = MqaLogitsVariant::automatic;  // resolved against `arch`

  // "mqa_logits.sm90.h64.d128.hist0.out-f32.kv-fp8.sm_90a" (of the resolved variant)
  std::string key() const;
  // `variant` resolved for `arch`.
  MqaLogitsConfig resolved() const;
  // Inverse of key(); throws ArgumentError naming the part that does not parse or is out of range.
  static MqaLogitsConfig parse_key(std::string_view key);
  // Throws ArgumentError naming the field that is out of range.
  void check_supported() const;
  friend bool operator==(const MqaLogitsConfig&, const MqaLogitsConfig&) = default;
};

// Every configuration the library compiles for `arch` (the warm set).
std::vector<MqaLogitsConfig> supported_mqa_logits_configs(const Arch& arch);

struct MqaLogitsOptions {
  // Write -inf into every column outside a token's window (else those columns are left as they are).
  bool fill_masked = false;
  // DeepGEMM's compressed logits (its max_seqlen_k > 0): logits [T, W], W = logits.shape[1] (any width,
  // e.g. the longest window), row t's column c the logit of key start_t + c, start_t = ks[t] clamped to
  // [0, N]. A window's keys past start_t + W are not stored (nor counted in the histogram); the columns
  // past a window are left as they are, so fill_masked must be false.
  bool compressed = false;
  // int32 [T, 1024], contiguous: the coarse-bin counts (contract §3) of each row's window, as stored, are
  // added to it (the caller zeroes it first).
  TensorView histogram{};
  MqaLogitsVariant variant = MqaLogitsVariant::automatic;
  // Programmatic dependent launch: as PagedMqaLogitsOptions::pdl (paged_mqa_logits.hpp).
  bool pdl = false;
};

// Tensor arguments (device memory; strides in elements):
//   q          float8_e4m3 [T, H, D], contiguous, 16-byte aligned
//   kv         float8_e4m3 or uint8 [N, D], inner stride 1, row stride (bytes) a multiple of 16 and >= D,
//              16-byte aligned
//   kv_scales  float32 [N], contiguous
//   weights    float32 [T, H], contiguous
//   ks, ke     int32 [T], contiguous: token t's window [ks[t], ke[t]), clamped to [0, N]; empty when
//              ke[t] <= ks[t]. Windows may overlap, be causal or arbitrary.
//   logits     float32 / float16 / bfloat16 [T, N] ([T, W] with options.compressed), inner stride 1, row
//              stride >= its width, 16-byte aligned
//
// Launches on `stream` (which must belong to the current CUDA context) without allocating, copying or
// synchronizing; the first call for a configuration compiles (or loads from the disk cache) and must
// not happen during stream capture.
void mqa_logits(const TensorView& q, const TensorView& kv, const TensorView& kv_scales, const TensorView& weights,
                const TensorView& ks, const TensorView& ke, const TensorView& logits, Stream stream,
                const MqaLogitsOptions& options = {});

// Loads (compiling on a cache miss) the kernel of `config` in the current context (device 0's primary
// context where the thread has none), so that a later call can be captured in a CUDA graph. With
// config.arch set, compiles it for that target into the disk cache only: no GPU or context needed.
void warm_mqa_logits(const MqaLogitsConfig& config);

}  // namespace flash_indexer
