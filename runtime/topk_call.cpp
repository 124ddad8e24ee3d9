// The topk call: argument checks, kernel choice, launch; and the public entry points.
#include "topk_call.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <climits>

#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/error.hpp"
#include "dcp_checks.hpp"
#include "kernel_key.hpp"
#include "tensor_checks.hpp"
#include "topk_kernel.hpp"

namespace flash_indexer {
namespace {

struct ConfigHash {
  std::size_t operator()(const TopkConfig& c) const {
    return (((static_cast<std::size_t>(c.logits) * 32 + c.split) * 4 + (c.resident ? 1 : 0) + (c.wide ? 2 : 0)) * 2 +
            (c.registers ? 1 : 0)) *
               2 +
           (c.filter ? 1 : 0);
  }
};

KernelRegistry<TopkConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<TopkConfig, ConfigHash>();  // never destroyed: see its comment
  return *r;
}

const LoadedKernel& loaded_kernel(std::string_view op, const TopkConfig& config, CUstream stream) {
  return registry().get_for_current_device(op, config, stream, [](const TopkConfig& c) { return topk_kernel_spec(c); });
}

}  // namespace

// Every argument check of the op, in one place.
TopkCall check_topk(std::string_view op, const TensorView& logits, const TensorView& lengths, const TensorView& indices,
                    const TensorView& workspace, const TopkOptions& options) {
  TopkCall l;
  TensorChecks oc(op, "logits", logits);
  oc.dtype({DType::f32, DType::f16, DType::bf16}).rank({2}).stride(1, 1).not_null().aligned(dtype_size(logits.dtype));
  const std::int64_t rows = logits.shape[0], width = logits.shape[1];
  if (rows < 0 || rows > INT_MAX) oc.fail("rows = logits.shape[0] in 0..2^31-1", std::to_string(rows));
  // Headroom for a tile's column arithmetic past the row end.
  if (width < 0 || width > INT_MAX - 65536) oc.fail("a width in 0..2^31-65537", std::to_string(width));
  // Row stride 0: every row is the same row (one row broadcast, torch's expand), each with its own length.
  if (rows > 1 && logits.strides[0] != 0 && logits.strides[0] < width)
    oc.fail(fmt::format("a row stride >= width = {}, or 0", width), std::to_string(logits.strides[0]));
  l.logits = logits_dtype_of(logits.dtype);
  if (options.split != 0 && options.split != 1 && options.split != 2 && options.split != 4 && options.split != 8 &&
      options.split != 16)
    throw ArgumentError(
        fmt::format("{}: options.split: expected 0 (automatic) or 1, 2, 4, 8, 16 CTAs per row, got {}", op, options.split));
  if (rows * std::max(options.split, 1) > INT_MAX)
    throw ArgumentError(
        fmt::format("{}: options.split: expected rows * split <= 2^31-1 (the grid), got {} rows * {}", op, rows, options.split));

  TensorChecks lc(op, "lengths", lengths);
  lc.dtype({DType::i32}).rank({1, 2}).contiguous().not_null().aligned(4);
  if (options.next_n < 0 || options.next_n > 64)
    throw ArgumentError(fmt::format("{}: options.next_n: expected 0 (per-row lengths) or 1..64, got {}", op, options.next_n));
  int lengths_next_n = 0;
  if (lengths.rank == 2) {
    if (options.next_n != 0 && options.next_n != lengths.shape[1])
      lc.fail(fmt::format("shape[1] = options.next_n = {}", options.next_n), std::to_string(lengths.shape[1]));
    if (lengths.shape[0] * lengths.shape[1] != rows)
      lc.fail(fmt::format("[B, next_n] with B * next_n = rows = {}", rows), lc.shape());
  } else if (options.next_n > 0) {
    if (lengths.shape[0] * options.next_n != rows)
      lc.fail(fmt::format("[B] with B * next_n ({}) = rows = {}", options.next_n, rows), lc.shape());
    lengths_next_n = options.next_n;
  } else {
    lc.dim(0, rows, "rows");
  }

  TensorChecks ic(op, "indices", indices);
  ic.dtype({DType::i32}).rank({2}).dim(0, rows, "rows").contiguous().not_null().aligned(4);
  const std::int64_t k = indices.shape[1];
  if (k < 1 || k > kMaxTopk) ic.fail(fmt::format("k = indices.shape[1] in 1..{}", kMaxTopk), std::to_string(k));

  if (options.values.rank != 0) {
    TensorChecks vc(op, "values", options.values);
    vc.dtype({DType::f32}).rank({2}).dim(0, rows, "rows").dim(1, k, "k").contiguous().not_null().aligned(4);
  }
  if (options.histogram.rank != 0) check_coarse_histogram(op, options.histogram, rows, "rows");

  if (options.block_table.rank != 0) {
    TensorChecks tc(op, "block_table", options.block_table);
    tc.dtype({DType::i32}).rank({2}).stride(1, 1).not_null().aligned(4);
    const std::int64_t requests = options.block_table.shape[0];
    if (rows > 0 && (requests < 1 || rows % requests != 0))
      tc.fail(fmt::format("shape[0] = B dividing rows = {}", rows), std::to_string(requests));
    if (requests > 1 && options.block_table.strides[0] < options.block_table.shape[1])
      tc.fail(fmt::format("a row stride >= max_blocks = {}", options.block_table.shape[1]),
              std::to_string(options.block_table.strides[0]));
    if (options.block_table.shape[1] > INT_MAX) tc.fail("max_blocks in 0..2^31-1", std::to_string(options.block_table.shape[1]));
  }
  if (options.block_size != 64 && (options.block_table.rank == 0 || options.block_size < 1 || options.block_size > 64 ||
                                   !std::has_single_bit(static_cast<unsigned>(options.block_size))))
    throw ArgumentError(fmt::format("{}: options.block_size: expected {}, got {}", op,
                                    options.block_table.rank == 0 ? "64 without options.block_table"
                                                                  : "a power of two in 1..64 (positions per block_table entry)",
                                    options.block_size));

  if (options.row_starts.rank != 0) {
    TensorChecks sc(op, "row_starts", options.row_starts);
    sc.dtype({DType::i32}).rank({1}).dim(0, rows, "rows").contiguous().not_null().aligned(4);
  }
  if (options.relative && options.row_starts.rank == 0)
    throw ArgumentError(fmt::format("{}: options.relative: indices relative to a window need options.row_starts", op));
  if (options.relative && options.block_table.rank != 0)
    throw ArgumentError(fmt::format("{}: options.relative: expected absolute columns with options.block_table (slots)", op));

  check_dcp_layout(op, "options.dcp", options.dcp);
  if (options.dcp.ranks > 1 && options.block_table.rank != 0)
    throw ArgumentError(
        fmt::format("{}: options.block_table: expected none with options.dcp (the indices are global positions)", op));
  if (options.dcp.ranks > 1 && options.row_starts.rank != 0)
    throw ArgumentError(fmt::format("{}: options.row_starts: expected none with options.dcp (decode rows)", op));

  TensorChecks wc(op, "workspace", workspace);
  wc.dtype({DType::u8}).rank({1}).contiguous().not_null().aligned(16);
  const std::size_t need = topk_workspace_bytes(rows);
  if (static_cast<std::size_t>(workspace.shape[0]) < need)
    wc.fail(fmt::format("at least topk_workspace_bytes({}) = {} bytes", rows, need), std::to_string(workspace.shape[0]));

  l.split = options.split;
  l.pdl = options.pdl;
  auto& p = l.params;
  p.logits = logits.data;
  p.lengths = static_cast<const int*>(lengths.data);
  p.histogram = static_cast<const int*>(options.histogram.data);
  p.indices = static_cast<int*>(indices.data);
  p.values = static_cast<float*>(options.values.data);
  p.row_starts = static_cast<const int*>(options.row_starts.data);
  p.relative = options.relative ? 1 : 0;
  p.report = static_cast<int*>(workspace.data);
  p.logits_stride = logits.strides[0];
  p.rows = static_cast<int>(rows);
  p.width = static_cast<int>(width);
  p.lengths_next_n = lengths_next_n;
  p.k = static_cast<int>(k);
  p.sorted = options.sorted;
  p.dcp_ranks = options.dcp.ranks;
  p.dcp_rank = options.dcp.rank;
  p.dcp_interleave = options.dcp.interleave;
  if (options.block_table.rank != 0) {
    p.slot_table = static_cast<const int*>(options.block_table.data);
    p.slot_table_stride = options.block_table.strides[0];
    p.slot_table_blocks = static_cast<int>(options.block_table.shape[1]);
    p.slot_rows_per_request = static_cast<int>(rows / std::max<std::int64_t>(options.block_table.shape[0], 1));
    p.slot_block_shift = std::countr_zero(static_cast<unsigned>(options.block_size));
  }
  return l;
}

TopkDevice topk_device(std::string_view op, LogitsDType logits, CUstream stream) {
  // The one-CTA kernel exists on every arch; it tells the device's arch and size. The resident
  // selector's one-CTA kernels (two CTAs per SM, and one for the wide form) tell how many clusters of
  // their kind run at once.
  const LoadedKernel& one_cta = loaded_kernel(op, {logits, Arch{}, 1}, stream);
  TopkDevice device{one_cta.arch, one_cta.multiprocessors};
  if (one_cta.arch.major >= 9) {
    const LoadedKernel& resident = loaded_kernel(op, {logits, Arch{}, 1, true, false}, stream);
    const LoadedKernel& wide = loaded_kernel(op, {logits, Arch{}, 1, true, true}, stream);
    for (int i = 0; i < 5; ++i) {
      device.clusters_two_per_sm[i] = resident.max_active_clusters[i];
      device.clusters_one_per_sm[i] = wide.max_active_clusters[i];
    }
  }
  return device;
}

TopkLaunch prepare_topk(std::string_view op, const TopkCall& call, CUstream stream) {
  const TopkDevice device = topk_device(op, call.logits, stream);
  // automatic_topk_split() never asks for a cluster before sm_90; a forced split may.
  if (call.split > 1 && device.arch.major < 9)
    throw ArgumentError(fmt::format("{}: options.split = {}: thread-block clusters need sm_90 or newer, this device is {}", op,
                                    call.split, device.arch.name()));
  const TopkChoice c = choose_topk_kernel(call.params.rows, call.params.width, call.logits, device, call.split);
  if (c.split == 16 && !c.resident)
    throw ArgumentError(
        fmt::format("{}: options.split = 16: a cluster of 16 runs only rows whose segment per CTA stays "
                    "resident ({} {} logits per CTA), got rows of width {}",
                    op, topk_resident_columns(call.logits, device.arch, false), logits_name(call.logits), call.params.width));
  const LoadedKernel& one_cta = loaded_kernel(op, {call.logits, Arch{}, 1}, stream);
  TopkLaunch launch;
  launch.kernel = c.split == 1 && !c.on_chip() && !c.filter
                      ? &one_cta
                      : &loaded_kernel(op, {call.logits, Arch{}, c.split, c.resident, c.wide, c.registers, c.filter}, stream);
  launch.params = call.params;
  if (!c.on_chip() && !c.filter) launch.smem_bytes = static_cast<int>(topk_split_kernel_smem_bytes(device.arch, call.params.k));
  launch.grid = static_cast<unsigned>(call.params.rows) * static_cast<unsigned>(c.split);
  launch.on_chip = c.on_chip();
  launch.pdl = call.pdl;
  return launch;
}

void enqueue(const TopkLaunch& launch, CUstream stream) {
  kernels::TopkParams params = launch.params;
  void* args[] = {&params};
  launch_kernel(*launch.kernel, launch.grid, 1, 1, stream, args, launch.pdl, launch.smem_bytes);
}

void topk(const TensorView& logits, const TensorView& lengths, const TensorView& indices, const TensorView& workspace,
          Stream stream, const TopkOptions& options) {
  const TopkCall call = check_topk("topk", logits, lengths, indices, workspace, options);
  if (call.empty()) return;
  enqueue(prepare_topk("topk", call, stream), stream);
}

void warm_topk(const TopkConfig& config) {
  TopkConfig fields = config;  // the fields first, named even without a GPU
  if (fields.arch == Arch{}) fields.arch = Arch{9, 0, true};
  fields.check_supported();
  if (config.arch != Arch{}) return compile_into_disk_cache("warm_topk", topk_kernel_spec(config));
  current_or_primary_context("warm_topk");
  loaded_kernel("warm_topk", config, nullptr);
}

namespace {
void check_warm_logits(LogitsDType logits) {
  if (logits != LogitsDType::f32 && logits != LogitsDType::f16 && logits != LogitsDType::bf16)
    throw ArgumentError(fmt::format("warm_topk: logits: expected f32, f16 or bf16, got {}", static_cast<int>(logits)));
}
}  // namespace

void warm_topk(LogitsDType logits) {
  check_warm_logits(logits);
  current_or_primary_context("warm_topk");
  for (const TopkConfig& c : supported_topk_configs(current_device_arch()))
    if (c.logits == logits)
      loaded_kernel("warm_topk", {logits, Arch{}, c.split, c.resident, c.wide, c.registers, c.filter}, nullptr);
}

void warm_topk(LogitsDType logits, const Arch& arch) {
  check_warm_logits(logits);
  for (const TopkConfig& c : supported_topk_configs(arch))
    if (c.logits == logits) compile_into_disk_cache("warm_topk", topk_kernel_spec(c));
}

}  // namespace flash_indexer
