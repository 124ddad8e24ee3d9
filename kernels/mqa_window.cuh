#pragma once
// A prefill token's key window, as both ragged MQA logits kernels read it.
#include "mqa_logits_params.cuh"

namespace flash_indexer {
namespace kernels {

// The keys of token t whose logits are stored: its window, clamped to [0, N] (empty, start == end, when
// ke <= ks); a compressed row (p.compressed) holds only the window's first p.width keys.
struct MqaWindow {
  int start, end;
};
__device__ __forceinline__ MqaWindow mqa_window(const MqaLogitsParams& p, int t) {
  const int start = min(max(p.ks[t], 0), p.keys);
  const int end = max(start, min(max(p.ke[t], 0), p.keys));
  return {start, p.compressed ? start + min(end - start, p.width) : end};
}

}  // namespace kernels
}  // namespace flash_indexer
