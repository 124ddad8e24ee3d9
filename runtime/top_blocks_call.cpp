// The top_blocks call: argument checks, the workspace's layout, the three launches (kernels/top_blocks.cuh
// for the maxima and the newest block, topk() between them); and the public entry points.
#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "../kernels/top_blocks_params.cuh"
#include "flash_indexer/error.hpp"
#include "flash_indexer/top_blocks.hpp"
#include "flash_indexer/topk.hpp"
#include "kernel_key.hpp"
#include "kernel_registry.hpp"
#include "tensor_checks.hpp"
#include "top_blocks_kernel.hpp"
#include "topk_call.hpp"

namespace flash_indexer {
namespace {

struct ConfigHash {
  std::size_t operator()(const TopBlocksConfig& c) const { return static_cast<std::size_t>(c.logits); }
};

KernelRegistry<TopBlocksConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<TopBlocksConfig, ConfigHash>();  // never destroyed: see its comment
  return *r;
}

const LoadedKernel& loaded_kernel(std::string_view op, const TopBlocksConfig& config, CUstream stream) {
  return registry().get_for_current_device(op, config, stream,
                                           [](const TopBlocksConfig& c) { return top_blocks_kernel_spec(c); });
}

constexpr std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// The workspace: the top-k's, each row's block count (the top-k's lengths), then the maxima, rows of
// maxima_stride elements (a multiple of 8: 16-byte aligned rows for the top-k's vector loads).
struct WorkspaceLayout {
  std::int64_t maxima_width = 0, maxima_stride = 0;
  std::int64_t counts_offset = 0, maxima_offset = 0, bytes = 0;
};

WorkspaceLayout workspace_layout(std::string_view op, std::int64_t rows, std::int64_t width, int block, LogitsDType logits) {
  if (rows < 0 || width < 0)
    throw ArgumentError(fmt::format("{}: expected rows >= 0 and width >= 0, got {} and {}", op, rows, width));
  if (block < 1 || block > kernels::kTopBlocksMaxBlock)
    throw ArgumentError(fmt::format("{}: block: expected 1..{} columns, got {}", op, kernels::kTopBlocksMaxBlock, block));
  WorkspaceLayout l;
  l.maxima_width = std::max<std::int64_t>(1, (width + block - 1) / block);
  l.maxima_stride = round_up(l.maxima_width, 8);
  l.counts_offset = round_up(static_cast<std::int64_t>(topk_workspace_bytes(rows)), 16);
  l.maxima_offset = l.counts_offset + round_up(4 * std::max<std::int64_t>(rows, 1), 16);
  l.bytes = l.maxima_offset + rows * l.maxima_stride * static_cast<std::int64_t>(dtype_size(tensor_dtype(logits)));
  return l;
}

}  // namespace

std::size_t top_blocks_workspace_bytes(std::int64_t rows, std::int64_t width, int block, LogitsDType logits) {
  if (logits != LogitsDType::f32 && logits != LogitsDType::f16 && logits != LogitsDType::bf16)
    throw ArgumentError(
        fmt::format("top_blocks_workspace_bytes: logits: expected f32, f16 or bf16, got {}", static_cast<int>(logits)));
  return static_cast<std::size_t>(workspace_layout("top_blocks_workspace_bytes", rows, width, block, logits).bytes);
}

void top_blocks(const TensorView& logits, const TensorView& lengths, int block, const TensorView& blocks,
                const TensorView& workspace, Stream stream, const TopBlocksOptions& options) {
  constexpr std::string_view op = "top_blocks";
  // Every check first, the top-k's included: a rejected call enqueues nothing.
  TensorChecks oc(op, "logits", logits);
  oc.dtype({DType::f32, DType::f16, DType::bf16}).rank({2}).stride(1, 1).not_null().aligned(dtype_size(logits.dtype));
  const std::int64_t rows = logits.shape[0], width = logits.shape[1];
  if (rows > INT_MAX) oc.fail("rows = logits.shape[0] in 0..2^31-1", std::to_string(rows));
  if (width > INT_MAX - 65536) oc.fail("a width in 0..2^31-65537", std::to_string(width));
  if (rows > 1 && logits.strides[0] < width)
    oc.fail(fmt::format("a row stride >= width = {}", width), std::to_string(logits.strides[0]));
  const LogitsDType dtype = logits_dtype_of(logits.dtype);
  const WorkspaceLayout l = workspace_layout(op, rows, width, block, dtype);
  if ((l.maxima_width + kernels::kTopBlocksThreads - 1) / kernels::kTopBlocksThreads > 65535)
    throw ArgumentError(fmt::format("{}: block: expected at most {} blocks per row (width / block), got {}", op,
                                    65535 * kernels::kTopBlocksThreads, l.maxima_width));
  TensorChecks lc(op, "lengths", lengths);
  lc.dtype({DType::i32}).rank({1, 2}).contiguous().not_null().aligned(4);
  const int n = options.next_n;
  if (n < 0 || n > 64)
    throw ArgumentError(fmt::format("{}: options.next_n: expected 0 (per-row lengths) or 1..64, got {}", op, n));
  if (lengths.rank == 2) {
    if (lengths.shape[0] * lengths.shape[1] != rows || (n != 0 && lengths.shape[1] != n))
      lc.fail(fmt::format("[B, next_n] with B * next_n = rows = {}{}", rows,
                          n != 0 ? fmt::format(" and next_n = options.next_n = {}", n) : std::string()),
              lc.shape());
  } else if (n > 0) {
    if (lengths.shape[0] * n != rows) lc.fail(fmt::format("[B] with B * next_n ({}) = rows = {}", n, rows), lc.shape());
  } else {
    lc.dim(0, rows, "rows = logits.shape[0]");
  }
  TensorChecks bc(op, "blocks", blocks);
  bc.dtype({DType::i32}).rank({2}).dim(0, rows, "rows = logits.shape[0]").contiguous().not_null().aligned(4);
  const std::int64_t k = blocks.shape[1];
  if (k < 1 || k > kMaxTopk) bc.fail(fmt::format("k_blocks = blocks.shape[1] in 1..{}", kMaxTopk), std::to_string(k));
  TensorChecks wc(op, "workspace", workspace);
  wc.dtype({DType::u8}).rank({1}).contiguous().not_null().aligned(16);
  if (workspace.numel() < l.bytes)
    wc.fail(fmt::format("at least top_blocks_workspace_bytes(rows, width, block, dtype) = {} bytes", l.bytes),
            std::to_string(workspace.numel()));

  auto* base = static_cast<unsigned char*>(workspace.data);
  const TensorView maxima =
      TensorView::contiguous(base + l.maxima_offset, logits.dtype, {rows, l.maxima_width}).with_strides({l.maxima_stride, 1});
  const TensorView counts = TensorView::contiguous(base + l.counts_offset, DType::i32, {rows});
  const TensorView topk_workspace = TensorView::contiguous(base, DType::u8, {l.counts_offset});
  TopkOptions to;
  to.sorted = true;
  const TopkCall topk_call = check_topk(op, maxima, counts, blocks, topk_workspace, to);
  if (rows == 0) return;

  const LoadedKernel& kernel = loaded_kernel(op, {dtype, Arch{}}, stream);
  const TopkLaunch topk_launch = prepare_topk(op, topk_call, stream);
  kernels::TopBlocksParams p{};
  p.logits = logits.data;
  p.lengths = static_cast<const int*>(lengths.data);
  p.maxima = maxima.data;
  p.block_counts = static_cast<int*>(counts.data);
  p.indices = static_cast<int*>(blocks.data);
  p.logits_stride = rows > 1 ? logits.strides[0] : width;
  p.maxima_stride = l.maxima_stride;
  p.width = static_cast<int>(width);
  p.block = block;
  p.k = static_cast<int>(k);
  p.lengths_next_n = lengths.rank == 1 ? n : 0;  // [B, next_n]: one length per row
  p.keep_newest = options.keep_newest ? 1 : 0;
  p.phase = kernels::kTopBlocksMaxima;
  void* args[] = {&p};
  const auto chunks = static_cast<unsigned>((l.maxima_width + kernels::kTopBlocksThreads - 1) / kernels::kTopBlocksThreads);
  launch_kernel(kernel, static_cast<unsigned>(rows), chunks, 1, stream, args);
  enqueue(topk_launch, stream);
  if (options.keep_newest) {
    p.phase = kernels::kTopBlocksNewest;
    launch_kernel(kernel, static_cast<unsigned>(rows), 1, 1, stream, args);
  }
}

void warm_top_blocks(LogitsDType logits) {
  TopBlocksConfig fields{logits, Arch{9, 0, true}};  // the fields first, named even without a GPU
  fields.check_supported();
  current_or_primary_context("warm_top_blocks");
  loaded_kernel("warm_top_blocks", {logits, Arch{}}, nullptr);
  warm_topk(logits);
}

}  // namespace flash_indexer
