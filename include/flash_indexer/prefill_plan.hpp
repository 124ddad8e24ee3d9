#pragma once
// The whole prefill indexer in one call: for shapes bounded at creation, a PrefillPlan owns a logits
// buffer of at most `logits_bytes` and a top-k workspace, and run() writes each query token's top-k keys
// over its window: the T tokens go in chunks that fit the buffer, each chunk's logits (mqa_logits) then
// its top-k (topk over the windows), so a 128K x 128K prefill never holds its 32 GiB of logits. Every
// step launches on the caller's stream without allocating, copying or synchronizing; a run can be
// captured in a CUDA graph (its chunks are fixed by T).
#include <cstddef>
#include <cstdint>

#include "flash_indexer/mqa_logits.hpp"
#include "flash_indexer/plan_memory.hpp"
#include "flash_indexer/topk.hpp"

namespace flash_indexer {

struct PrefillPlanConfig {
  int heads = 64;                                 // 16, 32, 64
  int head_dim = 128;                             // 32, 64, 128
  int k = 2048;                                   // 1..4096
  LogitsDType logits = LogitsDType::f16;          // the logits as stored between the two steps
  std::int64_t max_tokens = 8192;                 // T per run, at most
  std::int64_t max_keys = 131072;                 // N, at most
  std::size_t logits_bytes = std::size_t{1} << 30;  // the logits buffer: at least one row of max_keys logits
  bool relative = false;                          // indices relative to each window's start (vLLM's form)
  bool sorted = false;                            // ascending key order (the selector writes it anyway)
  bool pdl = false;  // every launch a programmatic dependent of the one before (PagedMqaLogitsOptions::pdl)
};

class PrefillPlan {
 public:
  // Validates the configuration, allocates the buffers in the current CUDA context and loads every
  // kernel run() launches.
  explicit PrefillPlan(const PrefillPlanConfig& config);
  // The same in the caller's `memory` (plan_memory.hpp) of at least required_bytes(config): nothing allocated.
  PrefillPlan(const PrefillPlanConfig& config, PlanMemory memory);
  // The device memory a plan of this configuration works in (validates the configuration).
  static std::size_t required_bytes(const PrefillPlanConfig& config);
  ~PrefillPlan();
  PrefillPlan(PrefillPlan&& other) noexcept;
  PrefillPlan& operator=(PrefillPlan&& other) noexcept;
  PrefillPlan(const PrefillPlan&) = delete;
  PrefillPlan& operator=(const PrefillPlan&) = delete;

  // q, kv, kv_scales, weights, ks and ke as mqa_logits() takes them, with T <= max_tokens, N <= max_keys
  // and the heads and head_dim of the configuration; indices int32 [T, k], contiguous: token t's top-k
  // keys of [ks[t], ke[t]) (positions, or offsets from ks[t] with `relative`), -1 padding.
  void run(const TensorView& q, const TensorView& kv, const TensorView& kv_scales, const TensorView& weights,
           const TensorView& ks, const TensorView& ke, const TensorView& indices, Stream stream) const;

  const PrefillPlanConfig& config() const { return config_; }
  // Tokens per chunk: the most rows that fit logits_bytes, every row but the last padded to max_keys
  // rounded up to 64 logits.
  std::int64_t chunk_tokens() const { return chunk_tokens_; }
  std::size_t workspace_bytes() const { return bytes_; }       // device memory the plan works in (required_bytes)

 private:
  void release() noexcept;

  PrefillPlanConfig config_;
  std::int64_t width_ = 0;         // row stride of the logits buffer (max_keys rounded up to 64; the last row unpadded)
  std::int64_t chunk_tokens_ = 0;
  std::size_t bytes_ = 0;
  std::size_t workspace_offset_ = 0;
  unsigned long long memory_ = 0;  // one buffer: logits | top-k workspace
  bool owns_memory_ = true;        // allocated here (freed by release), else the caller's PlanMemory
};

}  // namespace flash_indexer
