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

// The checks of DecodePlan::run (errors name `op`); `values`: empty, or the top-k's second output
// (TopkOptions::values: float32 [B * next_n, k]).
DecodeLaunch prepare_decode(std::string_view op, const DecodePlan& plan, const TensorView& q, const TensorView& q_scales,
                            const TensorView& kv_cache, const TensorView& weights, const TensorView& context_lens,
                            const TensorView& block_table, const TensorView& indices, const TensorView& values, CUstream stream);

void enqueue(const DecodeLaunch& launch, CUstream stream);

}  // namespace flash_indexer
