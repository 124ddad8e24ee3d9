#pragma once
// `flash-indexer bench decode`: DecodePlan end to end per batch shape as configured (DecodeStep::
// automatic: histogram zeroed, logits + histogram, top-k; no histogram where the top-k rows stay
// resident) and in one pass (DecodeStep::one_pass, where it applies), beside the logits kernel alone (no
// histogram): what the step costs over the logits an engine computes today.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/paged_mqa_logits.hpp"
#include "gpu_session.hpp"
#include "paged_inputs.hpp"

namespace flash_indexer::bench {

struct DecodeBenchOptions {
  std::vector<int> heads = {32, 64};
  std::vector<int> next_ns = {1, 2, 4};
  std::vector<int> batches = {1, 8, 32, 64, 128};
  std::vector<int> lengths = {8192, 32768, 65536, 131072};
  std::vector<LogitsDType> dtypes = {LogitsDType::f32, LogitsDType::f16};
  std::vector<int> histogram = {0, 1};
  std::vector<int> pdl = {0};  // DecodePlanConfig::pdl
  // Key caches (DecodePlanConfig::kv); a cell the plan rejects (MXFP4 has fewer shapes) is skipped.
  std::vector<KvFormat> kvs = {KvFormat::fp8};
  int k = 2048;
  int replays = 30;
  // The FP8 values (paged_inputs.hpp): random bytes (most scores beyond the histogram's +-223, in its two
  // end bins) or normal (DeepGEMM's test: scores over the histogram's unit bins).
  PagedValues values = PagedValues::bytes;
  // Lengths uniform in [0.7, 1.3] L (false), or in [L / 2, L] (true: ragged batches).
  bool ragged = false;
  // The two-level mode (docs/design/two-level.md): per query row `two_level` candidate blocks of
  // `candidate_block` positions, drawn at random from the row's context (all of them where it has
  // fewer, -1 padding), scored by sparse_paged_mqa_logits and selected by one topk call; 0: off.
  int two_level = 0;
  int candidate_block = 8;
  std::uint64_t seed = 1;
};

constexpr int kDecodeHeadDim = 128;  // D of every decode benchmark cell

// The cells of a sweep, in the order the benchmarks run them (the key cache outermost; the inputs are
// redrawn when batch or length changes).
struct DecodeShape {
  int heads = 0, next_n = 0, batch = 0, length = 0;
  LogitsDType dtype = LogitsDType::f32;
  bool histogram = false, pdl = false;
  KvFormat kv = KvFormat::fp8;
};
std::vector<DecodeShape> decode_shapes(const DecodeBenchOptions& options);
// The plan of one cell over logits `max_context` wide.
DecodePlanConfig decode_plan_config(const DecodeShape& shape, int k, std::int64_t max_context);

struct DecodeBenchRow {
  DecodeShape shape;
  int k = 0;
  double us = 0;           // DecodePlan::run (DecodeStep::automatic)
  double one_pass_us = 0;  // DecodePlan::run with DecodeStep::one_pass; 0 where it does not apply
  double logits_us = 0;       // the logits kernel alone, without the histogram
  double plan_bytes_per_row = 0;  // the plan's device memory over its max_batch * next_n rows
  double one_pass_bytes_per_row = 0;  // the same for the one-pass plan; 0 where it does not apply
  double kv_bytes = 0;   // KV blocks read (keys and scales)
  double kv_floor_us = 0;  // kv_bytes / read bandwidth
  // The two-level mode's second level, where options.two_level > 0 (the one-pass plan is then not run):
  double two_level_us = 0;  // DecodePlan::run_second_level (config.candidates = two_level), two kernels: sparse logits + top-k
  double sparse_step_us = 0;  // the same with DecodeStep::one_pass: the sparse decode step; 0 where it does not apply
  double sparse_logits_us = 0;  // sparse_paged_mqa_logits alone
  double candidate_bytes = 0;  // the live candidate positions' keys and scales, every query row its own
  double candidate_floor_us = 0;  // candidate_bytes / read bandwidth
  double candidate_read_us = 0;   // the sparse-read probe: those candidates' keys and scales gathered, nothing else
  // The first level: the logits alone, then top_blocks publishing each row's two_level best blocks of
  // candidate_block keys (keep_newest), in one graph; against logits_us, what publishing costs.
  double first_level_us = 0;
};

// `on_skip`: a cell whose plan configuration DecodePlan rejects, with the reason.
std::vector<DecodeBenchRow> run_decode_bench(check::GpuSession& gpu, const DecodeBenchOptions& options, double read_bandwidth,
                                             const std::function<void(const DecodeBenchRow&)>& on_row,
                                             const std::function<void(const DecodeShape&, const std::string&)>& on_skip);

}  // namespace flash_indexer::bench
