// PrefillPlan: one allocation, the kernels loaded at creation, and run() = per chunk of tokens,
// mqa_logits then topk over the windows.
#include "flash_indexer/prefill_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "kernel_registry.hpp"
#include "mqa_logits_call.hpp"
#include "plan_memory.hpp"
#include "tensor_checks.hpp"
#include "topk_call.hpp"

namespace flash_indexer {
namespace {

constexpr std::size_t align_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }
std::size_t logit_bytes(LogitsDType t) { return dtype_size(tensor_dtype(t)); }

void check_config(const PrefillPlanConfig& c) {
  auto fail = [](std::string_view field, std::string_view expected, long long got) {
    throw ArgumentError(fmt::format("PrefillPlan: config.{}: expected {}, got {}", field, expected, got));
  };
  try {
    MqaLogitsConfig{c.heads, c.head_dim, false, c.logits, Arch{9, 0, true}}.resolved().check_supported();
  } catch (const Error& e) {
    throw ArgumentError(fmt::format("PrefillPlan: {}", e.what()));
  }
  if (c.k < 1 || c.k > kMaxTopk) fail("k", fmt::format("1..{}", kMaxTopk), c.k);
  if (c.max_tokens < 1 || c.max_tokens > kMqaMaxTokens) fail("max_tokens", fmt::format("1..{}", kMqaMaxTokens), c.max_tokens);
  if (c.max_keys < 1 || c.max_keys > (std::int64_t{1} << 30)) fail("max_keys", "1..2^30", c.max_keys);
  // One unpadded row is enough: the rows' stride is max_keys rounded up to 64 logits, but no kernel touches a
  // column at or past N <= max_keys, so the last row of a chunk ends at max_keys (logits_elements).
  const std::size_t row = static_cast<std::size_t>(c.max_keys) * logit_bytes(c.logits);
  if (c.logits_bytes < row)
    fail("logits_bytes", fmt::format("at least one row of max_keys logits ({} bytes)", row),
         static_cast<long long>(c.logits_bytes));
}

// Logits of a chunk of `tokens` rows: every row but the last padded to the stride `width`.
std::size_t logits_elements(std::int64_t tokens, std::int64_t width, std::int64_t max_keys) {
  return static_cast<std::size_t>((tokens - 1) * width + max_keys);
}

// The one buffer's layout: the chunk's logits | top-k workspace, 256-byte aligned.
struct PrefillPlanLayout {
  std::int64_t width = 0, chunk_tokens = 0;
  std::size_t workspace_offset = 0, bytes = 0;
};

PrefillPlanLayout prefill_plan_layout(const PrefillPlanConfig& c) {
  PrefillPlanLayout l;
  l.width = static_cast<std::int64_t>(align_up(static_cast<std::size_t>(c.max_keys), 64));
  // The most rows whose logits_elements fit logits_bytes (at least 1: check_config).
  const std::size_t elements = c.logits_bytes / logit_bytes(c.logits);
  l.chunk_tokens = std::min<std::int64_t>(
      c.max_tokens,
      1 + static_cast<std::int64_t>((elements - static_cast<std::size_t>(c.max_keys)) / static_cast<std::size_t>(l.width)));
  l.workspace_offset = align_up(logits_elements(l.chunk_tokens, l.width, c.max_keys) * logit_bytes(c.logits), 256);
  l.bytes = l.workspace_offset + align_up(topk_workspace_bytes(l.chunk_tokens), 256);
  return l;
}

}  // namespace

std::size_t PrefillPlan::required_bytes(const PrefillPlanConfig& config) {
  check_config(config);
  return prefill_plan_layout(config).bytes;
}

PrefillPlan::PrefillPlan(const PrefillPlanConfig& config) : PrefillPlan(config, PlanMemory{}) {}

PrefillPlan::PrefillPlan(const PrefillPlanConfig& config, PlanMemory memory) : config_(config) {
  check_config(config_);
  const PrefillPlanLayout layout = prefill_plan_layout(config_);
  width_ = layout.width;
  chunk_tokens_ = layout.chunk_tokens;
  workspace_offset_ = layout.workspace_offset;
  bytes_ = layout.bytes;
  const PlanBuffer buffer = acquire_plan_buffer("PrefillPlan", memory, bytes_);
  memory_ = buffer.address;
  owns_memory_ = buffer.owned;
  try {
    // Arch{}: loaded in the current context (an explicit arch would only compile into the disk cache).
    warm_mqa_logits({config_.heads, config_.head_dim, false, config_.logits, Arch{}});
    warm_topk(config_.logits);
  } catch (...) {
    release();
    throw;
  }
}

PrefillPlan::~PrefillPlan() { release(); }

PrefillPlan::PrefillPlan(PrefillPlan&& other) noexcept { *this = std::move(other); }

PrefillPlan& PrefillPlan::operator=(PrefillPlan&& other) noexcept {
  if (this != &other) {
    release();
    config_ = other.config_;
    width_ = other.width_;
    chunk_tokens_ = other.chunk_tokens_;
    bytes_ = other.bytes_;
    workspace_offset_ = other.workspace_offset_;
    memory_ = std::exchange(other.memory_, 0);
    owns_memory_ = other.owns_memory_;
  }
  return *this;
}

void PrefillPlan::release() noexcept {
  if (memory_ != 0 && owns_memory_ && driver::available()) driver::api().cuMemFree(static_cast<CUdeviceptr>(memory_));
  memory_ = 0;
}

void PrefillPlan::run(const TensorView& q, const TensorView& kv, const TensorView& kv_scales, const TensorView& weights,
                      const TensorView& ks, const TensorView& ke, const TensorView& indices, Stream stream) const {
  constexpr std::string_view op = "PrefillPlan::run";
  if (memory_ == 0) throw ArgumentError("PrefillPlan::run: the plan was moved from");
  // Every check of every chunk first: a rejected run enqueues nothing and changes no byte.
  TensorChecks qc(op, "q", q);
  qc.dtype({DType::fp8_e4m3})
      .rank({3})
      .contiguous()
      .dim(1, config_.heads, "config.heads")
      .dim(2, config_.head_dim, "config.head_dim");
  const std::int64_t tokens = q.shape[0];
  if (tokens > config_.max_tokens) qc.fail(fmt::format("shape[0] = T <= max_tokens = {}", config_.max_tokens), qc.shape());
  TensorChecks(op, "kv", kv).rank({2});
  if (kv.shape[0] > config_.max_keys)
    TensorChecks(op, "kv", kv).fail(fmt::format("shape[0] = N <= max_keys = {}", config_.max_keys), std::to_string(kv.shape[0]));
  TensorChecks(op, "weights", weights).dtype({DType::f32}).rank({2}).dim(0, tokens, "T = q.shape[0]").contiguous();
  TensorChecks(op, "ks", ks).dtype({DType::i32}).rank({1}).dim(0, tokens, "T = q.shape[0]").contiguous();
  TensorChecks(op, "ke", ke).dtype({DType::i32}).rank({1}).dim(0, tokens, "T = q.shape[0]").contiguous();
  TensorChecks(op, "indices", indices)
      .dtype({DType::i32})
      .rank({2})
      .dim(0, tokens, "T = q.shape[0]")
      .dim(1, config_.k, "config.k")
      .contiguous();
  const std::int64_t keys = kv.shape[0];
  const std::int64_t qrow = static_cast<std::int64_t>(config_.heads) * config_.head_dim;

  // One chunk's two calls, checked; the same inputs always give the same calls.
  const TensorView workspace = TensorView::contiguous(reinterpret_cast<void*>(memory_ + workspace_offset_), DType::u8,
                                                      {static_cast<std::int64_t>(bytes_ - workspace_offset_)});
  struct Chunk {
    MqaLogitsCall logits;
    TopkCall topk;
  };
  auto chunk = [&](std::int64_t t0) {
    const std::int64_t n = std::min(chunk_tokens_, tokens - t0);
    auto rows_of = [&](const TensorView& v, std::int64_t row_elems, std::initializer_list<std::int64_t> shape) {
      const std::size_t offset = static_cast<std::size_t>(t0 * row_elems) * dtype_size(v.dtype);
      return TensorView::contiguous(static_cast<char*>(v.data) + offset, v.dtype, shape);
    };
    TensorView logits = TensorView::contiguous(reinterpret_cast<void*>(memory_), tensor_dtype(config_.logits), {n, keys});
    logits.strides[0] = width_;
    const TensorView ks_chunk = rows_of(ks, 1, {n}), ke_chunk = rows_of(ke, 1, {n});
    Chunk c;
    c.logits = check_mqa_logits(op, rows_of(q, qrow, {n, config_.heads, config_.head_dim}), kv, kv_scales,
                                rows_of(weights, config_.heads, {n, config_.heads}), ks_chunk, ke_chunk, logits,
                                MqaLogitsOptions{.pdl = config_.pdl});  // no fill: the top-k reads the windows only
    TopkOptions to;
    to.pdl = config_.pdl;
    to.sorted = config_.sorted;
    to.row_starts = ks_chunk;
    to.relative = config_.relative;
    c.topk = check_topk(op, logits, ke_chunk, rows_of(indices, config_.k, {n, config_.k}), workspace, to);
    return c;
  };
  if (tokens == 0) {
    chunk(0);  // the checks of an empty run
    return;
  }
  // Pass 1: every chunk's checks, and the launches of the first and last chunk (the only two shapes;
  // the kernels were loaded at creation), so nothing can fail once the first launch is enqueued.
  const std::int64_t last = (tokens - 1) / chunk_tokens_ * chunk_tokens_;
  for (std::int64_t t0 = 0; t0 < tokens; t0 += chunk_tokens_) {
    const Chunk c = chunk(t0);
    if (t0 == 0 || t0 == last) {
      if (!c.logits.empty()) prepare_mqa_logits(op, c.logits, stream);
      prepare_topk(op, c.topk, stream);
    }
  }
  // Pass 2: per chunk, its logits then its top-k.
  for (std::int64_t t0 = 0; t0 < tokens; t0 += chunk_tokens_) {
    const Chunk c = chunk(t0);
    if (!c.logits.empty()) enqueue(prepare_mqa_logits(op, c.logits, stream), stream);
    enqueue(prepare_topk(op, c.topk, stream), stream);
  }
}

}  // namespace flash_indexer
