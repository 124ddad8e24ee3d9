#pragma once
// `flash-indexer bench prefill`: the ragged (prefill) MQA logits over causal windows (token t of T sees
// keys [0, N - T + t + 1)), with and without the fused histogram, and PrefillPlan end to end (logits in
// chunks + top-k) against the same work as two separate calls over the whole [T, N] logits, per T x N.
#include <cstdint>
#include <functional>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::bench {

struct PrefillBenchOptions {
  std::vector<int> tokens = {4096, 8192};
  std::vector<int> keys = {16384, 65536, 131072};
  std::vector<int> heads = {64};
  std::vector<LogitsDType> dtypes = {LogitsDType::f16};
  int k = 2048;
  std::size_t plan_logits_bytes = std::size_t{1} << 30;
  int replays = 10;
  std::uint64_t seed = 1;
};

struct PrefillBenchRow {
  int tokens = 0, keys = 0, heads = 0, head_dim = 0, k = 0;
  LogitsDType dtype = LogitsDType::f16;
  double logits_us = 0;    // mqa_logits over the whole [T, N]
  double hist_us = 0;      // the same with the fused histogram
  double plan_us = 0;      // PrefillPlan::run
  double separate_us = 0;  // mqa_logits over the whole [T, N], then topk over the windows
  long long chunk_tokens = 0;
  double plan_bytes = 0;      // device memory the plan holds (logits chunk + top-k workspace)
  double separate_bytes = 0;  // the whole [T, N] logits + the top-k workspace of T rows
  double flops = 0;      // 2 * H * D * (keys in every window)
  double tflops = 0;     // of the logits step
};

std::vector<PrefillBenchRow> run_prefill_bench(check::GpuSession& gpu, const PrefillBenchOptions& options,
                                               const std::function<void(const PrefillBenchRow&)>& on_row);

}  // namespace flash_indexer::bench
