// DecodePlan: one allocation, the kernels loaded at creation, and run() = memset + logits + top-k.
#include "flash_indexer/decode_plan.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <utility>

#include "dcp_checks.hpp"
#include "decode_plan_launch.hpp"
#include "decode_step.hpp"
#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "flash_indexer/top_blocks.hpp"
#include "kernel_registry.hpp"
#include "paged_mqa_logits_call.hpp"
#include "paged_mqa_logits_kernel.hpp"
#include "plan_memory.hpp"
#include "sparse_decode_step.hpp"
#include "tensor_checks.hpp"
#include "topk_call.hpp"

namespace flash_indexer {
namespace {

constexpr std::size_t align_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// The second level's candidate blocks per row, at most: rows of up to 1M columns at 16 positions per block
// (the model publishes 2048 of 8).
constexpr int kMaxPlanCandidates = 65536;

// Whether the plan runs the second level of two-level indexing (run_second_level).
bool second_level(const DecodePlanConfig& c) { return c.candidates > 0; }

// Whether the one-pass kernel applies to a plan of these shapes (on sm_90a).
bool step_shapes(const DecodePlanConfig& c) {
  return !second_level(c) && decode_step_builds(c.next_n, c.heads, c.head_dim, c.kv, Arch{9, 0, true}) && c.dcp.ranks <= 1 &&
         c.max_context <= kernels::kStepMaxWidth;
}

// The sparse decode step's configuration for a second-level plan (its cluster size chosen per call).
SparseDecodeStepConfig sparse_step_config(const DecodePlanConfig& c) {
  return {c.heads, c.head_dim, c.candidate_block, c.logits, c.kv, 1, Arch{}};
}

// Whether the plan runs in one pass where the device allows. `automatic` takes two kernels: the one-pass
// kernel was slower in every measured cell (docs/benchmarks/decode.md, "One pass"), its selection of a
// row on one CTA being the bound (docs/design/decode-step.md).
bool one_pass_chosen(const DecodePlanConfig& c) { return c.step == DecodeStep::one_pass && step_shapes(c); }

void check_config(const DecodePlanConfig& c) {
  auto fail = [](std::string_view field, std::string_view expected, long long got) {
    throw ArgumentError(fmt::format("DecodePlan: config.{}: expected {}, got {}", field, expected, got));
  };
  if (c.max_batch < 1 || c.max_batch > 65535) fail("max_batch", "1..65535", c.max_batch);
  if (c.k < 1 || c.k > kMaxTopk) fail("k", fmt::format("1..{}", kMaxTopk), c.k);
  if (c.max_context < 1 || c.max_context > (std::int64_t{1} << 30)) fail("max_context", "1..2^30", c.max_context);
  if (c.kv != KvFormat::fp8 && c.kv != KvFormat::mxfp4) fail("kv", "fp8 or mxfp4", static_cast<int>(c.kv));
  check_dcp_layout("DecodePlan", "config.dcp", c.dcp);
  if (c.dcp.ranks > 1 && c.physical_slots)
    throw ArgumentError(
        "DecodePlan: config.physical_slots: expected false with config.dcp (the indices are global positions, "
        "for topk_merge)");
  if (c.candidates < 0 || c.candidates > kMaxPlanCandidates)
    fail("candidates", fmt::format("0..{}", kMaxPlanCandidates), c.candidates);
  if (second_level(c)) {
    if (c.candidate_block != 8 && c.candidate_block != 16) fail("candidate_block", "8 or 16", c.candidate_block);
    if (c.dcp.ranks > 1) fail("dcp.ranks", "1 with config.candidates (the second level runs on one GPU)", c.dcp.ranks);
    if (c.physical_slots)
      throw ArgumentError("DecodePlan: config.physical_slots: expected false with config.candidates (the indices are positions)");
    if (c.step == DecodeStep::one_pass && static_cast<std::int64_t>(c.candidates) * c.candidate_block >
                                              kernels::kSparseStepMaxCluster * kernels::kSparseStepSegmentColumns)
      throw ArgumentError(
          fmt::format("DecodePlan: config.step: one_pass with config.candidates holds rows of up to {} columns (candidates * "
                      "candidate_block), got {}",
                      kernels::kSparseStepMaxCluster * kernels::kSparseStepSegmentColumns,
                      static_cast<std::int64_t>(c.candidates) * c.candidate_block));
    try {
      SparsePagedMqaLogitsConfig{c.heads, c.head_dim, c.candidate_block, false, c.logits, c.kv, Arch{9, 0, true}}
          .check_supported();
    } catch (const Error& e) {
      throw ArgumentError(fmt::format("DecodePlan (config.candidates): {}", e.what()));
    }
  }
  if (c.step != DecodeStep::automatic && c.step != DecodeStep::two_kernels && c.step != DecodeStep::one_pass)
    fail("step", "automatic, two_kernels or one_pass", static_cast<int>(c.step));
  if (c.step == DecodeStep::one_pass && !second_level(c) && !step_shapes(c))
    throw ArgumentError(
        "DecodePlan: config.step: one_pass applies to next_n 1..4, heads 32 or 64, head_dim 128, max_context <= 262144 and "
        "no DCP");
  PagedMqaLogitsConfig logits{c.next_n, c.heads, c.head_dim, 64, c.histogram, c.logits, Arch{9, 0, true}};
  logits.kv = c.kv;  // the variant automatic: MXFP4 next_n 5-6 run on the sm90 kernel only
  try {
    check_paged_mqa_logits_fields(logits);
  } catch (const Error& e) {
    throw ArgumentError(fmt::format("DecodePlan: {}", e.what()));
  }
}

// The query's checks of every run (errors name `op`): FP8, or packed E2M1 with config.kv = mxfp4,
// [B <= max_batch, next_n, heads, head_dim (/ 2 packed)]. Returns B.
std::int64_t checked_batch(std::string_view op, const DecodePlanConfig& config, const TensorView& q) {
  const bool mxfp4 = config.kv == KvFormat::mxfp4;
  TensorChecks qc(op, "q", q);
  if (mxfp4) qc.dtype({DType::u8});
  else qc.dtype({DType::fp8_e4m3});
  qc.rank({4});
  const std::int64_t batch = q.shape[0];
  if (batch > config.max_batch) qc.fail(fmt::format("shape[0] = B <= max_batch = {}", config.max_batch), qc.shape());
  qc.dim(1, config.next_n, "config.next_n").dim(2, config.heads, "config.heads");
  if (mxfp4) qc.dim(3, config.head_dim / 2, "config.head_dim / 2 (packed E2M1)");
  else qc.dim(3, config.head_dim, "config.head_dim");
  return batch;
}

// The one-pass kernel's counters before the histogram (16-byte aligned, as the histogram must be): arrivals,
// filters and candidates, max_batch * next_n of each (DecodeStepScratch).
std::size_t step_rows(const DecodePlanConfig& c) { return static_cast<std::size_t>(c.max_batch) * c.next_n; }
std::size_t arrivals_bytes(const DecodePlanConfig& c) { return align_up(step_rows(c) * kDecodeStepCountersPerRow * 4, 16); }
std::int64_t spread_rows(const DecodePlanConfig& c) {
  return static_cast<std::int64_t>(std::min<std::size_t>(step_rows(c), kernels::kStepSpreadMaxRows));
}

// The one buffer's layout: logits | counters, histogram | top-k workspace | the step's spread scratch,
// each 256-byte aligned. The one-pass kernel's counters lie right before the histogram, so that one
// memset zeroes both; the histogram exists where the plan fuses it or runs in one pass, the counters and
// the scratch there only.
struct DecodePlanLayout {
  std::int64_t width = 0;
  std::size_t arrivals_offset = 0, histogram_offset = 0, workspace_offset = 0, spread_offset = 0, bytes = 0;
};

DecodePlanLayout decode_plan_layout(const DecodePlanConfig& c) {
  DecodePlanLayout l;
  // Under DCP the logits hold this rank's columns of the longest context; in the second level a row's
  // candidates' columns (the sparse op writes exactly that many).
  l.width = second_level(c)
                ? static_cast<std::int64_t>(c.candidates) * c.candidate_block
                : static_cast<std::int64_t>(align_up(static_cast<std::size_t>(dcp_local_length(c.max_context, c.dcp)), 64));
  const std::size_t rows = static_cast<std::size_t>(c.max_batch) * c.next_n;
  const std::size_t element = c.logits == LogitsDType::f32 ? 4 : 2;
  // The second level's top-k counts its rows itself (C x block columns, resident at the model's 16K).
  const bool histogram = (c.histogram && !second_level(c)) || one_pass_chosen(c);
  l.arrivals_offset = align_up(rows * l.width * element, 256);
  l.histogram_offset = l.arrivals_offset + (one_pass_chosen(c) ? arrivals_bytes(c) : 0);
  l.workspace_offset = align_up(l.histogram_offset + (histogram ? rows * kCoarseBins * 4 : 0), 256);
  l.spread_offset = l.workspace_offset + align_up(topk_workspace_bytes(static_cast<std::int64_t>(rows)), 256);
  // After the workspace: the one-pass kernel's scratch, or the second level's row widths (its top-k's
  // lengths: every column of a row is one of its candidates' positions, a masked one NaN).
  l.bytes = l.spread_offset +
            (one_pass_chosen(c)
                 ? align_up(static_cast<std::size_t>(spread_rows(c) * kernels::decode_step_spread_row_bytes(l.width)), 256)
             : second_level(c) ? align_up(rows * 4, 256)
                               : 0);
  return l;
}

}  // namespace

std::size_t DecodePlan::required_bytes(const DecodePlanConfig& config) {
  check_config(config);
  return decode_plan_layout(config).bytes;
}

DecodePlan::DecodePlan(const DecodePlanConfig& config) : DecodePlan(config, PlanMemory{}) {}

DecodePlan::DecodePlan(const DecodePlanConfig& config, PlanMemory memory) : config_(config) {
  check_config(config_);
  const DecodePlanLayout layout = decode_plan_layout(config_);
  width_ = layout.width;
  logits_offset_ = 0;
  histogram_offset_ = layout.histogram_offset;
  workspace_offset_ = layout.workspace_offset;
  spread_offset_ = layout.spread_offset;
  bytes_ = layout.bytes;
  const PlanBuffer buffer = acquire_plan_buffer("DecodePlan", memory, bytes_);
  memory_ = buffer.address;
  owns_memory_ = buffer.owned;
  try {
    const Arch arch = current_device_arch();
    if (second_level(config_)) {
      // The sparse decode step where the step asks for it; `automatic` chooses per call (FP8 only).
      const bool step_kernels = arch.is_sm90a() && !portable_forced_by_environment();
      sparse_step_ = config_.step == DecodeStep::one_pass && step_kernels;
      sparse_step_auto_ = config_.step == DecodeStep::automatic && step_kernels && config_.kv == KvFormat::fp8 &&
                          width_ <= kernels::kSparseStepMaxCluster * kernels::kSparseStepSegmentColumns;
      if (config_.step == DecodeStep::one_pass && !sparse_step_)
        throw ArgumentError(fmt::format(
            "DecodePlan: config.step: one_pass with config.candidates needs the sm_90a kernels (this device is {}{})",
            arch.name(),
            portable_forced_by_environment() ? ", and FLASH_INDEXER_KERNEL=portable forces the portable kernels" : ""));
      // The row widths, written once: run_second_level gives them to the top-k as its lengths.
      const auto widths = static_cast<CUdeviceptr>(memory_ + spread_offset_);
      FI_CU(cuCtxSynchronize, "DecodePlan (before writing the second level's row widths)");
      FI_CU(cuMemsetD32Async, "DecodePlan (the second level's row widths)", widths, static_cast<unsigned int>(width_),
            step_rows(config_), nullptr);
      FI_CU(cuCtxSynchronize, "DecodePlan (the second level's row widths)");
      if (config_.step != DecodeStep::one_pass) {
        warm_sparse_paged_mqa_logits(
            {config_.heads, config_.head_dim, config_.candidate_block, false, config_.logits, config_.kv, Arch{}});
        warm_topk(config_.logits);
      }
      if (sparse_step_ || sparse_step_auto_) warm_sparse_decode_step(sparse_step_config(config_));
      return;
    }
    one_pass_ = one_pass_chosen(config_) &&
                decode_step_builds(config_.next_n, config_.heads, config_.head_dim, config_.kv, arch) &&
                !portable_forced_by_environment();
    if (config_.step == DecodeStep::one_pass && !one_pass_)
      throw ArgumentError(
          fmt::format("DecodePlan: config.step: one_pass needs the sm_90a kernels (this device is {}{})", arch.name(),
                      portable_forced_by_environment() ? ", and FLASH_INDEXER_KERNEL=portable forces the portable kernels" : ""));
    // Arch{}: loaded in the current context (an explicit arch would only compile into the disk cache).
    PagedMqaLogitsConfig logits{config_.next_n, config_.heads, config_.head_dim, 64, config_.histogram, config_.logits, Arch{}};
    logits.kv = config_.kv;
    if (one_pass_) {  // its grid is the histogram kernel's
      // The one-pass kernel leaves its counters and histogram as it found them, zero: zeroed here once,
      // after whatever the context ran before in this memory (a caller's buffer may be one it just freed).
      const auto counters = reinterpret_cast<CUdeviceptr>(histogram(config_.max_batch).data) - arrivals_bytes(config_);
      const std::size_t words = (arrivals_bytes(config_) + step_rows(config_) * kCoarseBins * 4) / 4;
      FI_CU(cuCtxSynchronize, "DecodePlan (before zeroing the one-pass counters)");
      FI_CU(cuMemsetD32Async, "DecodePlan (zeroing the one-pass counters)", counters, 0u, words, nullptr);
      FI_CU(cuCtxSynchronize, "DecodePlan (zeroing the one-pass counters)");
      logits.histogram = true;
      warm_paged_mqa_logits(logits);
      warm_decode_step(config_.next_n, config_.heads, config_.head_dim, config_.logits, config_.kv);
      logits.histogram = config_.histogram;
    }
    warm_paged_mqa_logits(logits);  // the variant run() uses: automatic
    if (config_.histogram) {
      // run() leaves the histogram out where the top-k rows stay resident (they are counted there).
      logits.histogram = false;
      warm_paged_mqa_logits(logits);
    }
    warm_topk(config_.logits);
  } catch (...) {
    release();
    throw;
  }
}

DecodePlan::~DecodePlan() { release(); }

DecodePlan::DecodePlan(DecodePlan&& other) noexcept { *this = std::move(other); }

DecodePlan& DecodePlan::operator=(DecodePlan&& other) noexcept {
  if (this != &other) {
    release();
    config_ = other.config_;
    width_ = other.width_;
    bytes_ = other.bytes_;
    memory_ = std::exchange(other.memory_, 0);
    owns_memory_ = other.owns_memory_;
    logits_offset_ = other.logits_offset_;
    histogram_offset_ = other.histogram_offset_;
    one_pass_ = other.one_pass_;
    sparse_step_ = other.sparse_step_;
    sparse_step_auto_ = other.sparse_step_auto_;
    workspace_offset_ = other.workspace_offset_;
    spread_offset_ = other.spread_offset_;
  }
  return *this;
}

void DecodePlan::release() noexcept {
  if (memory_ != 0 && owns_memory_ && driver::available()) driver::api().cuMemFree(static_cast<CUdeviceptr>(memory_));
  memory_ = 0;
}

TensorView DecodePlan::logits(std::int64_t batch) const {
  return TensorView::contiguous(reinterpret_cast<void*>(memory_ + logits_offset_), tensor_dtype(config_.logits),
                                {batch * config_.next_n, width_});
}

void DecodePlan::top_blocks(const TensorView& context_lens, int block, const TensorView& blocks, const TensorView& workspace,
                            Stream stream, bool keep_newest) const {
  constexpr std::string_view op = "DecodePlan::top_blocks";
  if (memory_ == 0) throw ArgumentError(fmt::format("{}: the plan was moved from", op));
  if (second_level(config_))
    throw ArgumentError(fmt::format(
        "{}: the plan has config.candidates = {}: its logits are the candidates' (the first level reads a full-context plan's)",
        op, config_.candidates));
  if (config_.dcp.ranks > 1)
    throw ArgumentError(fmt::format("{}: the plan has config.dcp.ranks = {}: its logits are one rank's shard of each row", op,
                                    config_.dcp.ranks));
  TensorChecks bc(op, "blocks", blocks);
  bc.rank({2});
  const std::int64_t rows = blocks.shape[0];
  if (rows % config_.next_n != 0 || rows / config_.next_n > config_.max_batch)
    bc.fail(
        fmt::format("[B * next_n, k_blocks] with next_n = {} and B <= config.max_batch = {}", config_.next_n, config_.max_batch),
        bc.shape());
  TopBlocksOptions o;
  o.keep_newest = keep_newest;
  o.next_n = context_lens.rank == 1 ? config_.next_n : 0;  // [B, next_n]: one length per row
  flash_indexer::top_blocks(logits(rows / config_.next_n), context_lens, block, blocks, workspace, stream, o);
}

bool DecodePlan::one_pass() const { return one_pass_; }

TensorView DecodePlan::histogram(std::int64_t batch) const {
  if ((!config_.histogram || second_level(config_)) && !one_pass_) return {};  // none in the layout
  return TensorView::contiguous(reinterpret_cast<void*>(memory_ + histogram_offset_), DType::i32,
                                {batch * config_.next_n, kCoarseBins});
}

TensorView DecodePlan::topk_workspace() const {
  return TensorView::contiguous(reinterpret_cast<void*>(memory_ + workspace_offset_), DType::u8,
                                {static_cast<std::int64_t>(spread_offset_ - workspace_offset_)});
}

void DecodePlan::run(const TensorView& q, const TensorView& kv_cache, const TensorView& weights, const TensorView& context_lens,
                     const TensorView& block_table, const TensorView& indices, Stream stream) const {
  run(q, TensorView{}, kv_cache, weights, context_lens, block_table, indices, stream);
}

void DecodePlan::run(const TensorView& q, const TensorView& q_scales, const TensorView& kv_cache, const TensorView& weights,
                     const TensorView& context_lens, const TensorView& block_table, const TensorView& indices,
                     Stream stream) const {
  enqueue(
      prepare_decode("DecodePlan::run", *this, q, q_scales, kv_cache, weights, context_lens, block_table, indices, {}, stream),
      stream);
}

void DecodePlan::run_second_level(const TensorView& q, const TensorView& kv_cache, const TensorView& weights,
                                  const TensorView& context_lens, const TensorView& block_table, const TensorView& candidates,
                                  const TensorView& indices, Stream stream) const {
  run_second_level(q, TensorView{}, kv_cache, weights, context_lens, block_table, candidates, indices, stream);
}

void DecodePlan::run_second_level(const TensorView& q, const TensorView& q_scales, const TensorView& kv_cache,
                                  const TensorView& weights, const TensorView& context_lens, const TensorView& block_table,
                                  const TensorView& candidates, const TensorView& indices, Stream stream) const {
  constexpr std::string_view op = "DecodePlan::run_second_level";
  if (memory_ == 0) throw ArgumentError(fmt::format("{}: the plan was moved from", op));
  if (!second_level(config_))
    throw ArgumentError(fmt::format("{}: the plan has config.candidates = 0: a full-context plan runs run()", op));
  // The top-k's checks first: sparse_paged_mqa_logits checks the rest before it enqueues its kernel, so a
  // rejected call enqueues nothing.
  const std::int64_t batch = checked_batch(op, config_, q);
  const std::int64_t rows = batch * config_.next_n;
  TensorChecks(op, "candidates", candidates).rank({2}).dim(1, config_.candidates, "config.candidates");
  TensorChecks(op, "indices", indices).dtype({DType::i32}).rank({2}).dim(1, config_.k, "config.k");
  const TensorView logits_view = logits(batch);
  const TensorView widths = TensorView::contiguous(reinterpret_cast<void*>(memory_ + spread_offset_), DType::i32, {rows});
  TopkOptions to;
  to.sorted = config_.sorted;
  to.block_table = candidates;
  to.block_size = config_.candidate_block;
  to.pdl = config_.pdl;
  const TopkCall topk_call = check_topk(op, logits_view, widths, indices, topk_workspace(), to);
  SparsePagedMqaLogitsOptions so;
  so.q_scales = q_scales;
  so.masked_nan = true;  // never selected: a row with fewer than k live positions pads with -1
  so.pdl = config_.pdl;
  // The step's capacity, read once: it decides `automatic` and sizes the step's clusters.
  const SparseStepCapacity capacity = sparse_step_ || sparse_step_auto_
                                          ? sparse_decode_step_capacity(op, sparse_step_config(config_), stream)
                                          : SparseStepCapacity{};
  if (sparse_step_ || (sparse_step_auto_ && sparse_decode_step_preferred(config_.kv, rows, width_, capacity))) {
    const SparsePagedMqaLogitsCall logits_call = check_sparse_paged_mqa_logits(
        op, q, kv_cache, weights, context_lens, block_table, candidates, config_.candidate_block, logits_view, so);
    if (logits_call.empty()) return;
    enqueue(prepare_sparse_decode_step(op, logits_call, topk_call, capacity, stream), stream);
    return;
  }
  if (rows == 0) {
    sparse_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, candidates, config_.candidate_block, logits_view,
                            stream, so);  // its checks; it enqueues nothing for no rows
    return;
  }
  const TopkLaunch topk_launch = prepare_topk(op, topk_call, stream);
  sparse_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, candidates, config_.candidate_block, logits_view,
                          stream, so);
  enqueue(topk_launch, stream);
}

DecodeLaunch prepare_decode(std::string_view op, const DecodePlan& plan, const TensorView& q, const TensorView& q_scales,
                            const TensorView& kv_cache, const TensorView& weights, const TensorView& context_lens,
                            const TensorView& block_table, const TensorView& indices, const TensorView& values, CUstream stream) {
  const DecodePlanConfig& config = plan.config();
  if (plan.logits(0).data == nullptr)  // the logits are the start of the plan's one allocation
    throw ArgumentError(fmt::format("{}: the plan was moved from", op));
  if (second_level(config))
    throw ArgumentError(
        fmt::format("{}: the plan has config.candidates = {}: its runs take the candidates (run_second_level; Python: run(..., "
                    "candidates=...))",
                    op, config.candidates));
  // Every check of every step first: a rejected run enqueues nothing and changes no byte.
  const std::int64_t batch = checked_batch(op, config, q);
  PagedMqaLogitsOptions lo;
  lo.q_scales = q_scales;
  lo.histogram = plan.histogram(batch);
  lo.dcp = config.dcp;
  const TensorView logits_view = plan.logits(batch);
  const PagedMqaLogitsCall logits_call =
      check_paged_mqa_logits(op, q, kv_cache, weights, context_lens, block_table, logits_view, lo);
  TensorChecks(op, "indices", indices).dtype({DType::i32}).rank({2}).dim(1, config.k, "config.k");
  TopkOptions to;
  to.sorted = config.sorted;
  to.histogram = lo.histogram;
  to.values = values;
  if (context_lens.rank == 1) to.next_n = config.next_n;
  if (config.physical_slots) to.block_table = block_table;
  to.dcp = config.dcp;
  const TopkCall topk_call = check_topk(op, logits_view, context_lens, indices, plan.topk_workspace(), to);
  DecodeLaunch launch;
  if (batch == 0) {
    launch.empty = true;
    return launch;
  }
  if (plan.one_pass()) {  // (never with DCP: step_shapes)
    // One kernel: the logits with the fused histogram, each row selected by the CTA that completes it.
    // No memset: the kernel leaves its counters and histogram rows zero (zeroed at the plan's creation).
    PagedMqaLogitsCall with_histogram = logits_call;
    const TensorView histogram = plan.histogram(batch);
    with_histogram.config.histogram = true;
    with_histogram.params.histogram = static_cast<int*>(histogram.data);
    const std::int64_t counters = static_cast<std::int64_t>(arrivals_bytes(config) / 4);
    const std::int64_t rows = static_cast<std::int64_t>(step_rows(config));
    DecodeStepScratch scratch;
    scratch.arrivals = static_cast<unsigned int*>(histogram.data) - counters;
    scratch.filtered = scratch.arrivals + rows;
    scratch.candidates_count = reinterpret_cast<int*>(scratch.filtered + rows);
    const TensorView workspace = plan.topk_workspace();  // the spread scratch follows it
    scratch.spread = static_cast<unsigned char*>(workspace.data) + workspace.numel();
    scratch.spread_rows = spread_rows(config);
    launch.one_pass = true;
    launch.step = prepare_decode_step(op, with_histogram, topk_call.params, scratch, stream);
    return launch;
  }
  launch.topk = prepare_topk(op, topk_call, stream);
  // The register and resident selectors count their rows themselves and read no histogram, and past
  // next_n 2 the fused count costs more than it saves: there the plan neither zeroes nor fuses one.
  const bool histogram_used = decode_histogram_used(config, launch.topk.on_chip);
  PagedMqaLogitsCall logits_used = logits_call;
  if (!histogram_used) {
    logits_used.config.histogram = false;  // the kernel without the fused count
    logits_used.params.histogram = nullptr;
    launch.topk.params.histogram = nullptr;
  } else {
    launch.histogram = lo.histogram;
  }
  launch.logits = prepare_paged_mqa_logits(op, logits_used, stream);
  // A programmatic launch overlaps only a kernel before it, so not the one after the memset.
  launch.logits.pdl = config.pdl && !histogram_used;
  launch.topk.pdl = config.pdl;
  return launch;
}

void enqueue(const DecodeLaunch& launch, CUstream stream) {
  if (launch.empty) return;
  if (launch.histogram.data != nullptr)
    FI_CU(cuMemsetD32Async, "DecodePlan::run (zeroing the histogram)", reinterpret_cast<CUdeviceptr>(launch.histogram.data), 0,
          static_cast<std::size_t>(launch.histogram.numel()), stream);
  if (launch.one_pass) return enqueue(launch.step, stream);
  enqueue(launch.logits, stream);
  enqueue(launch.topk, stream);
}

}  // namespace flash_indexer
