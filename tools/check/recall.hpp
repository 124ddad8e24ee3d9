#pragma once
// How much of the exact FP32 top-k survives when the logits are stored as FP16 or BF16: the exact top-k
// of each stored dtype (same inputs, same kernels) against the FP32 set, per row. And how much of the
// FP8 cache's top-k survives when the same keys and queries are kept as MXFP4 instead.
#include <cstdint>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::check {

struct RecallOptions {
  int k = 2048;
  int heads = 64;
  int head_dim = 128;
  std::vector<int> lengths = {8192, 32768, 65536, 131072};
  int rows = 16;  // requests per length (next_n = 1)
  std::uint64_t seed = 1;
};

struct RecallSummary {
  int length = 0;
  LogitsDType dtype = LogitsDType::f16;
  KvFormat kv = KvFormat::fp8;  // mxfp4: the MXFP4 cache's set against the FP8 one (FP32 logits both)
  int rows = 0;
  double mean = 0, median = 0, worst = 0;  // recall of the FP32 set, in [0, 1]
  double mean_changed = 0;                 // indices per row not in the FP32 set
  int max_changed = 0;
};

// Synthetic indexer inputs: FP8 q and k from N(0, 2^2), per-head weights N(0, 1/H) (mixed sign), random
// key scales. One summary per (length, FP16/BF16).
std::vector<RecallSummary> measure_recall(GpuSession& gpu, const RecallOptions& options);

// The same FP8 inputs, and their keys and queries (the dequantized values) quantized to MXFP4
// (reference::mxfp4_quantize): the top-k of the MXFP4 cache against the FP8 cache's, FP32 logits both
// (H 32 or 64, D 128). One summary per length.
std::vector<RecallSummary> measure_mxfp4_recall(GpuSession& gpu, const RecallOptions& options);

}  // namespace flash_indexer::check
