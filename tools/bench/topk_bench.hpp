#pragma once
// `flash-indexer bench topk`: the top-k selector over rows x length x k x dtype, with the histogram
// given or not, full-length or ragged rows; CUDA events over CUDA-graph replays (median).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flash_indexer/paged_mqa_logits.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::bench {

struct TopkBenchOptions {
  std::vector<int> rows = {1, 4, 8, 32, 64, 128, 512};
  std::vector<int> lengths = {8192, 32768, 65536, 131072, 262144};
  std::vector<int> ks = {512, 1024, 2048};
  std::vector<LogitsDType> dtypes = {LogitsDType::f32, LogitsDType::f16};
  std::vector<int> histogram = {0, 1};
  std::vector<int> ragged = {0, 1};  // 1: lengths uniform in [L/2, L]
  std::vector<int> splits = {0};     // TopkOptions::split (0: automatic)
  // Row contents: indexer-like (ReLU-weighted scores, max(0, x) * 3 + 0.25 * noise, the default) or
  // the peers' benchmark rows (standard normal, torch.randn).
  std::vector<std::string> inputs = {"relu"};
  // Logits width (row stride) for every cell; 0: the length. A wider buffer with live lengths below
  // it is how an engine captures one graph at its maximum context and replays it for every step.
  int width = 0;
  int replays = 50;
  std::uint64_t seed = 1;
};

struct TopkBenchRow {
  int rows = 0, length = 0, k = 0;
  LogitsDType dtype = LogitsDType::f32;
  bool histogram = false, ragged = false;
  std::string input;       // "relu" or "randn"
  int width = 0;           // the logits width (row stride)
  int split = 0;           // the split launched (topk()'s automatic choice when asked for 0)
  std::string split_name;  // "8", or "a8" for the automatic choice
  std::string
      selector;    // the selector launched: "str" (streaming), "flt" (filter), "res" (resident), "wide" (its 1024-thread form)
  double us = 0;
  double bytes = 0;  // live logits read once (+ the histogram when given) + indices written
  double gbps = 0, bandwidth_fraction = 0;
  // How the rows were selected, from their reports after the timed replays: from a sampled cutoff in one
  // pass, and with extra narrowing passes.
  int sampled_rows = 0, extra_pass_rows = 0;
};

std::vector<TopkBenchRow> run_topk_bench(check::GpuSession& gpu, const TopkBenchOptions& options, double read_bandwidth,
                                         const std::function<void(const TopkBenchRow&)>& on_row);

}  // namespace flash_indexer::bench
