#pragma once
// A prefill token's key window, as both ragged MQA logits kernels read it.
#include "mqa_logits_params.cuh"

namespace flash_indexer {
namespace kernels {

// Token t's window, clamped to [0, N]; empty (start == end) when ke <= ks.
struct MqaWindow {
  int start, end;
};
__device__ __forceinline__ MqaWindow mqa_window(const MqaLogitsParams& p, int t) {
  const int start = min(max(p.ks[t], 0), p.keys);
  const int end = min(max(p.ke[t], 0), p.keys);
  return {start, max(start, end)};
}

}  // namespace kernels
}  // namespace flash_indexer
