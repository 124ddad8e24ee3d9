#pragma once
// DecodePlan::run's steps, every one checked and prepared before anything is enqueued, for the plans
// built on it (DcpDecodePlan takes the top-k's values too and adds its own steps after them).
#include <string_view>

#include "decode_step.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "paged_mqa_logits_call.hpp"
#include "topk_call.hpp"

namespace flash_indexer {

struct DecodeLaunch {
  bool empty = false;    // B = 0: nothing to launch
  TensorView histogram;  // zeroed first; empty where the run does not use it (one pass: the arrivals too)
  bool one_pass = false;  // the step kernel alone, not the logits and top-k kernels
  DecodeStepLaunch step;
  PagedMqaLogitsLaunch logits;
  TopkLaunch topk;
};

// Whether a two-kernel run fuses the histogram into the logits and gives it to the top-k: where the
// configuration asks for it, the top-k streams the rows (an on-chip selector counts its rows itself),
// and next_n <= kDecodeHistogramMaxNextN. At next_n 4 the fused count costs the logits kernel 8-11 %
// and the step was 7 % slower with it than without on normal inputs (13 % on random bytes), where at
// next_n 2 it cost the same within 1 % (docs/benchmarks/decode.md, "The histogram by next_n").
constexpr int kDecodeHistogramMaxNextN = 2;
inline bool decode_histogram_used(const DecodePlanConfig& config, bool topk_on_chip) {
  return config.histogram && !topk_on_chip && config.next_n <= kDecodeHistogramMaxNextN;
}

// The checks of DecodePlan::run (errors name `op`); `values`: empty, or the top-k's second output
// (TopkOptions::values: float32 [B * next_n, k]).
DecodeLaunch prepare_decode(std::string_view op, const DecodePlan& plan, const TensorView& q, const TensorView& q_scales,
                            const TensorView& kv_cache, const TensorView& weights, const TensorView& context_lens,
                            const TensorView& block_table, const TensorView& indices, const TensorView& values, CUstream stream);

void enqueue(const DecodeLaunch& launch, CUstream stream);

}  // namespace flash_indexer
