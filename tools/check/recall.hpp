#pragma once
// How much of the exact FP32 top-k survives when the logits are stored as FP16 or BF16: the exact top-k
// of each stored dtype (same inputs, same kernels) against the FP32 set, per row.
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
  int rows = 0;
  double mean = 0, median = 0, worst = 0;  // recall of the FP32 set, in [0, 1]
  double mean_changed = 0;                 // indices per row not in the FP32 set
  int max_changed = 0;
};

// Synthetic indexer inputs: FP8 q and k from N(0, 2^2), per-head weights N(0, 1/H) (mixed sign), random
// key scales. One summary per (length, FP16/BF16).
std::vector<RecallSummary> measure_recall(GpuSession& gpu, const RecallOptions& options);

}  // namespace flash_indexer::check
