#pragma once
// The whole decode indexer in one call: for a batch shape fixed at creation, a DecodePlan owns its
// workspace (logits, histogram, top-k workspace), allocated once, and run() writes the top-k indices:
// histogram zeroed -> logits + fused histogram -> top-k using the histogram; where the batch's rows stay
// resident in the top-k (it counts them itself), run() leaves the histogram out: logits -> top-k. With
// DecodeStep::one_pass: logits + fused histogram, each row's top-k selected in the same kernel, which
// leaves its counters and histogram zero for the next run (creating such a plan zeroes them once and
// synchronizes the context).
// Every step launches on the caller's stream without allocating, copying or synchronizing, so one run()
// can be captured in a CUDA graph and replayed with new lengths and block tables.
#include <cstddef>
#include <cstdint>

#include "flash_indexer/paged_mqa_logits.hpp"
#include "flash_indexer/plan_memory.hpp"
#include "flash_indexer/topk.hpp"

namespace flash_indexer {

// How DecodePlan::run computes the step (docs/design/decode-step.md).
enum class DecodeStep {
  // The faster of the two where measured: two kernels for the full context (the one-pass kernel's
  // selection of a row on one CTA costs more than the top-k kernel; docs/benchmarks/decode.md); for the
  // second level (config.candidates) on sm_90a with an FP8 cache, the sparse decode step where a call's
  // rows fill the GPU with it (B 64 and 128 at 16K candidate columns on the H100), else two kernels.
  automatic,
  two_kernels,  // the logits kernel, then the top-k kernel
  // One kernel (sm_90a; next_n 1..4, heads 32 or 64, head_dim 128, max_context up to 262144, no DCP):
  // the logits kernel's CTA that completes a row selects its top-k; where the GPU holds the whole grid at
  // once (a cooperative launch), every CTA of the row writes its own selected columns instead. With
  // config.candidates (sm_90a, rows of up to 131072 candidate columns): the sparse decode step, each
  // row's sparse logits kept in shared memory and its top-k selected there by a cluster of 1-8 CTAs
  // (docs/design/two-level.md). A plan where it does not apply is rejected (ArgumentError).
  one_pass,
};

struct DecodePlanConfig {
  int max_batch = 1;              // requests per call, at most
  int next_n = 1;                 // 1..8
  int heads = 64;                 // 16, 32, 64
  int head_dim = 128;             // 64, 128
  int k = 2048;                   // 1..4096
  LogitsDType logits = LogitsDType::f16;
  std::int64_t max_context = 131072;  // the longest context a request may have (the logits width)
  // Fuse the coarse histogram into the logits and let top-k use it, where it streams the rows and
  // next_n <= 2 (past that the fused count costs more than it saves; docs/design/decode-plan.md).
  bool histogram = true;
  bool physical_slots = false;    // output block_table[b][i / 64] * 64 + i % 64 instead of positions i
  bool sorted = false;            // each row's indices in ascending position order
  // The key cache: FP8, or MXFP4 (contract §2.2: H 32/64, D 128, next_n 1..6 on the sm90 logits kernel's
  // MXFP4 form on sm_90a, 1..4 on the portable one elsewhere),
  // whose run() takes the packed query and its exponents (the q_scales overload).
  KvFormat kv = KvFormat::fp8;
  // Programmatic dependent launch (PagedMqaLogitsOptions::pdl): the top-k kernel is scheduled while the
  // logits kernel ends, and the logits kernel while the stream's previous kernel ends (not after the
  // histogram's zeroing, a memset). The bytes are the same either way. Off by default: the top-k launched
  // early runs longer by more than the launch latency it hides (docs/benchmarks/decode.md).
  bool pdl = false;
  // Decode context parallel (dcp.hpp): this GPU holds rank dcp.rank's shard of the cache; run() takes the
  // global lengths, the logits buffer holds the rank's columns of max_context, and the indices are
  // global positions of the rank's local top-k, to all-gather and merge with topk_merge()
  // (DcpDecodePlan in dcp_decode_plan.hpp does both over NCCL). Not with physical_slots.
  DcpLayout dcp{};
  // One pass or two kernels (DecodeStep); the indices are the same bytes either way.
  DecodeStep step = DecodeStep::automatic;
  // Two-level indexing's second level (docs/design/two-level.md): with candidates > 0 the plan scores each
  // query row's `candidates` blocks of `candidate_block` (8 or 16) positions only and writes the top-k
  // context positions among them (run_second_level: sparse_paged_mqa_logits with masked columns NaN, then
  // topk mapping columns through the candidates; -1 pads a row with fewer than k live positions). Its
  // logits are [rows, candidates * candidate_block], whatever max_context (written by the two kernels
  // only: the one_pass step keeps them on chip); no DCP, positions only (not physical_slots). 0: the
  // full-context plan of run().
  int candidates = 0;
  int candidate_block = 8;
};

class DecodePlan {
 public:
  // Validates the configuration, allocates the workspace in the current CUDA context and loads every
  // kernel run() launches (so run() can be captured right away).
  explicit DecodePlan(const DecodePlanConfig& config);
  // The same in the caller's `memory` (plan_memory.hpp) of at least required_bytes(config): nothing allocated.
  DecodePlan(const DecodePlanConfig& config, PlanMemory memory);
  // The device memory a plan of this configuration works in (validates the configuration).
  static std::size_t required_bytes(const DecodePlanConfig& config);
  ~DecodePlan();
  DecodePlan(DecodePlan&& other) noexcept;
  DecodePlan& operator=(DecodePlan&& other) noexcept;
  DecodePlan(const DecodePlan&) = delete;
  DecodePlan& operator=(const DecodePlan&) = delete;

  // q, kv_cache, weights, context_lens and block_table exactly as paged_mqa_logits() takes them, with
  // B <= max_batch and the shapes of the configuration; indices int32 [B * next_n, k], contiguous.
  // Under a captured graph the shapes (B) are fixed at capture: capture one graph per batch size, or
  // capture max_batch and give the unused requests length 0 (they cost almost nothing and get -1).
  void run(const TensorView& q, const TensorView& kv_cache, const TensorView& weights, const TensorView& context_lens,
           const TensorView& block_table, const TensorView& indices, Stream stream) const;
  // The MXFP4 form (config.kv = mxfp4): q uint8 [B, next_n, H, D / 2] (packed E2M1) and q_scales int32
  // [B, next_n, H], as paged_mqa_logits() takes them (options.q_scales).
  void run(const TensorView& q, const TensorView& q_scales, const TensorView& kv_cache, const TensorView& weights,
           const TensorView& context_lens, const TensorView& block_table, const TensorView& indices, Stream stream) const;
  // The second level (config.candidates > 0): as run(), plus candidates int32 [B * next_n, config.candidates]
  // (inner stride 1), blocks of each row's context as sparse_paged_mqa_logits() takes them (any order,
  // -1 / out-of-range entries never read nor selected); indices are context positions. Not capturable
  // across a change of B, as run().
  void run_second_level(const TensorView& q, const TensorView& kv_cache, const TensorView& weights,
                        const TensorView& context_lens, const TensorView& block_table, const TensorView& candidates,
                        const TensorView& indices, Stream stream) const;
  // Its MXFP4 form (config.kv = mxfp4), with the query's exponents as run() takes them.
  void run_second_level(const TensorView& q, const TensorView& q_scales, const TensorView& kv_cache, const TensorView& weights,
                        const TensorView& context_lens, const TensorView& block_table, const TensorView& candidates,
                        const TensorView& indices, Stream stream) const;

  // The first level of two-level indexing over the logits of the last run() (docs/design/two-level.md):
  // top_blocks() of logits(B) with that run's context_lens (the [B] form with config.next_n), writing
  // each row's best blocks of `block` keys into `blocks` (int32 [B * next_n, k_blocks]); `workspace` as
  // top_blocks() takes it, top_blocks_workspace_bytes(B * next_n, width(), block, config.logits) bytes.
  // On the stream of that run, before the next one. A full-context plan without DCP only.
  void top_blocks(const TensorView& context_lens, int block, const TensorView& blocks, const TensorView& workspace, Stream stream,
                  bool keep_newest = true) const;

  const DecodePlanConfig& config() const { return config_; }
  std::int64_t width() const { return width_; }           // columns of the logits buffer
  std::size_t workspace_bytes() const { return bytes_; }  // device memory the plan works in (required_bytes)
  // Whether run() takes the one-pass kernel on the current device (config.step and the shapes decide).
  bool one_pass() const;
  // The plan's buffers after a run (rows B * next_n of max_batch * next_n): for inspection and tests
  // (the histogram only where the run used it; zero again after a one-pass run).
  TensorView logits(std::int64_t batch) const;
  TensorView histogram(std::int64_t batch) const;
  TensorView topk_workspace() const;

 private:
  void release() noexcept;

  DecodePlanConfig config_;
  std::int64_t width_ = 0;
  std::size_t bytes_ = 0;
  unsigned long long memory_ = 0;  // one buffer: logits | histogram | top-k workspace | one-pass scratch
  bool owns_memory_ = true;        // allocated here (freed by release), else the caller's PlanMemory
  std::size_t logits_offset_ = 0, histogram_offset_ = 0, workspace_offset_ = 0;
  std::size_t spread_offset_ = 0;  // the one-pass kernel's scratch after the top-k workspace (its end where none)
  bool one_pass_ = false;
  bool sparse_step_ = false;       // run_second_level takes the sparse decode step (one_pass)
  bool sparse_step_auto_ = false;  // run_second_level takes it where sparse_decode_step_preferred (automatic)
};

}  // namespace flash_indexer
