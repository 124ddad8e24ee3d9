#pragma once
// `flash-indexer bench decode`: DecodePlan end to end (histogram zeroed, logits + histogram, top-k; no
// histogram where the top-k rows stay resident) per batch shape; its logits step is also timed alone,
// so the top-k share is the difference.
#include <cstdint>
#include <functional>
#include <vector>

#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "gpu_session.hpp"

namespace flash_indexer::bench {

struct DecodeBenchOptions {
  std::vector<int> heads = {32, 64};
  std::vector<int> next_ns = {1, 2, 4};
  std::vector<int> batches = {1, 8, 32, 64, 128};
  std::vector<int> lengths = {8192, 32768, 65536, 131072};
  std::vector<LogitsDType> dtypes = {LogitsDType::f32, LogitsDType::f16};
  std::vector<int> histogram = {0, 1};
  std::vector<int> pdl = {0};  // DecodePlanConfig::pdl
  int k = 2048;
  int replays = 30;
  std::uint64_t seed = 1;
};

constexpr int kDecodeHeadDim = 128;  // D of every decode benchmark cell

// The cells of a sweep, in the order the benchmarks run them (the inputs are redrawn when batch or
// length changes).
struct DecodeShape {
  int heads = 0, next_n = 0, batch = 0, length = 0;
  LogitsDType dtype = LogitsDType::f32;
  bool histogram = false, pdl = false;
};
std::vector<DecodeShape> decode_shapes(const DecodeBenchOptions& options);
// The plan of one cell over logits `max_context` wide.
DecodePlanConfig decode_plan_config(const DecodeShape& shape, int k, std::int64_t max_context);

struct DecodeBenchRow {
  DecodeShape shape;
  int k = 0;
  double us = 0;         // DecodePlan::run
  double logits_us = 0;  // the logits kernel alone (with the histogram when on)
  double kv_bytes = 0;   // KV blocks read (keys and scales)
  double kv_floor_us = 0;  // kv_bytes / read bandwidth
};

std::vector<DecodeBenchRow> run_decode_bench(check::GpuSession& gpu, const DecodeBenchOptions& options, double read_bandwidth,
                                             const std::function<void(const DecodeBenchRow&)>& on_row);

}  // namespace flash_indexer::bench
