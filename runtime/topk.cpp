// Top-k selection: configuration keys, codegen, argument validation and the launch.
#include "flash_indexer/topk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "../kernels/topk_params.cuh"
#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "kernel_registry.hpp"
#include "tensor_checks.hpp"
#include "topk_kernel.hpp"

namespace flash_indexer {
namespace {

static_assert(kMaxTopk == kernels::kMaxTopk);
static_assert(sizeof(TopkRowReport) == kernels::kTopkReportInts * sizeof(std::int32_t));

constexpr std::string_view kOp = "topk";

struct ConfigHash {
  std::size_t operator()(const TopkConfig& c) const { return static_cast<std::size_t>(c.logits) * 16 + c.split; }
};

KernelRegistry<TopkConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<TopkConfig, ConfigHash>();  // never destroyed: see its comment
  return *r;
}

const LoadedKernel& loaded_kernel(const TopkConfig& config, CUstream stream) {
  return registry().get_for_current_device(kOp, config, stream, [](const TopkConfig& c) { return topk_kernel_spec(c); });
}

struct Launch {
  TopkConfig config;
  kernels::TopkParams params{};
};

// Every argument check of the op, in one place.
Launch validate(const TensorView& logits, const TensorView& lengths, const TensorView& indices,
                const TensorView& workspace, const TopkOptions& options) {
  Launch l;
  TensorChecks oc(kOp, "logits", logits);
  oc.dtype({DType::f32, DType::f16, DType::bf16}).rank({2}).stride(1, 1).not_null().aligned(dtype_size(logits.dtype));
  const std::int64_t rows = logits.shape[0], width = logits.shape[1];
  if (rows < 0 || rows > INT_MAX) oc.fail("rows = logits.shape[0] in 0..2^31-1", std::to_string(rows));
  // Headroom for a tile's column arithmetic past the row end.
  if (width < 0 || width > INT_MAX - 65536) oc.fail("a width in 0..2^31-65537", std::to_string(width));
  if (rows > 1 && logits.strides[0] < width)
    oc.fail(fmt::format("a row stride >= width = {}", width), std::to_string(logits.strides[0]));
  l.config.logits = logits_dtype_of(logits.dtype);
  if (options.split != 0 && options.split != 1 && options.split != 2 && options.split != 4 && options.split != 8)
    throw Error(fmt::format("topk: options.split: expected 0 (automatic) or 1, 2, 4, 8 CTAs per row, got {}", options.split));
  if (rows * std::max(options.split, 1) > INT_MAX)
    throw Error(fmt::format("topk: options.split: expected rows * split <= 2^31-1 (the grid), got {} rows * {}", rows,
                            options.split));

  TensorChecks lc(kOp, "lengths", lengths);
  lc.dtype({DType::i32}).rank({1, 2}).contiguous().not_null().aligned(4);
  if (options.next_n < 0 || options.next_n > 64)
    throw Error(fmt::format("topk: options.next_n: expected 0 (per-row lengths) or 1..64, got {}", options.next_n));
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

  TensorChecks ic(kOp, "indices", indices);
  ic.dtype({DType::i32}).rank({2}).dim(0, rows, "rows").contiguous().not_null().aligned(4);
  const std::int64_t k = indices.shape[1];
  if (k < 1 || k > kMaxTopk) ic.fail(fmt::format("k = indices.shape[1] in 1..{}", kMaxTopk), std::to_string(k));


  if (options.values.rank != 0) {
    TensorChecks vc(kOp, "values", options.values);
    vc.dtype({DType::f32}).rank({2}).dim(0, rows, "rows").dim(1, k, "k").contiguous().not_null().aligned(4);
  }
  if (options.histogram.rank != 0) {
    TensorChecks hc(kOp, "histogram", options.histogram);
    hc.dtype({DType::i32}).rank({2}).dim(0, rows, "rows").dim(1, kCoarseBins, "coarse bins").contiguous().not_null().aligned(8);
  }

  if (options.block_table.rank != 0) {
    TensorChecks tc(kOp, "block_table", options.block_table);
    tc.dtype({DType::i32}).rank({2}).stride(1, 1).not_null().aligned(4);
    const std::int64_t requests = options.block_table.shape[0];
    if (rows > 0 && (requests < 1 || rows % requests != 0))
      tc.fail(fmt::format("shape[0] = B dividing rows = {}", rows), std::to_string(requests));
    if (requests > 1 && options.block_table.strides[0] < options.block_table.shape[1])
      tc.fail(fmt::format("a row stride >= max_blocks = {}", options.block_table.shape[1]),
              std::to_string(options.block_table.strides[0]));
    if (options.block_table.shape[1] > INT_MAX) tc.fail("max_blocks in 0..2^31-1", std::to_string(options.block_table.shape[1]));
  }

  TensorChecks wc(kOp, "workspace", workspace);
  wc.dtype({DType::u8}).rank({1}).contiguous().not_null().aligned(16);
  const std::size_t need = topk_workspace_bytes(rows);
  if (static_cast<std::size_t>(workspace.shape[0]) < need)
    wc.fail(fmt::format("at least topk_workspace_bytes({}) = {} bytes", rows, need), std::to_string(workspace.shape[0]));

  auto& p = l.params;
  p.logits = logits.data;
  p.lengths = static_cast<const int*>(lengths.data);
  p.histogram = static_cast<const int*>(options.histogram.data);
  p.indices = static_cast<int*>(indices.data);
  p.values = static_cast<float*>(options.values.data);
  p.report = static_cast<int*>(workspace.data);
  p.logits_stride = logits.strides[0];
  p.rows = static_cast<int>(rows);
  p.width = static_cast<int>(width);
  p.lengths_next_n = lengths_next_n;
  p.k = static_cast<int>(k);
  p.sorted = options.sorted;
  if (options.block_table.rank != 0) {
    p.slot_table = static_cast<const int*>(options.block_table.data);
    p.slot_table_stride = options.block_table.strides[0];
    p.slot_table_blocks = static_cast<int>(options.block_table.shape[1]);
    p.slot_rows_per_request = static_cast<int>(rows / std::max<std::int64_t>(options.block_table.shape[0], 1));
  }
  return l;
}

}  // namespace

std::string TopkConfig::key() const {
  return fmt::format("topk.split{}.in-{}.{}", split, logits_name(logits), arch.name());
}

TopkConfig TopkConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const auto in = parts.size() == 4 && parts[2].starts_with("in-") ? logits_from_name(parts[2].substr(3)) : std::nullopt;
  if (parts.size() != 4 || parts[0] != "topk" || !parts[1].starts_with("split") || !in)
    throw Error(fmt::format("kernel key \"{}\": expected topk.split<1|2|4|8>.in-<f32|f16|bf16>.<arch>", key));
  TopkConfig c;
  c.split = parse_int_after(parts[1], "split", key);
  c.logits = *in;
  c.arch = Arch::parse(parts[3], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void TopkConfig::check_supported() const {
  if (arch.major < 8)
    throw Error(fmt::format("topk configuration {}: expected an arch of sm_80 or newer, got {}", key(), arch.name()));
  if (split != 1 && split != 2 && split != 4 && split != 8)
    throw Error(fmt::format("topk configuration {}: expected split 1, 2, 4 or 8, got {}", key(), split));
  if (split > 1 && arch.major < 9)
    throw Error(fmt::format("topk configuration {}: split {} needs thread-block clusters (sm_90 or newer), got {}", key(),
                            split, arch.name()));
}

std::vector<int> supported_topk_splits(const Arch& arch) {
  if (arch.major < 9) return {1};
  return {1, 2, 4, 8};
}

std::vector<TopkConfig> supported_topk_configs(const Arch& arch) {
  std::vector<TopkConfig> configs;
  for (int split : supported_topk_splits(arch))
    for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) configs.push_back({dtype, arch, split});
  return configs;
}

// Smallest row segment per CTA worth a cluster split (columns of the widest row).
constexpr std::int64_t kTopkMinSegment = 4096;
// Clusters of 4 or 8 only while they fill at most this share of the SMs; 2 while the grid fits in
// one wave; then 1. Measured on the H200 (docs/device-runs.md, run 14, `flash-indexer bench topk
// --rows 8,16,24,32 --lengths 131072 --k 2048 --split 1,2,4,8`, and the grid of run 14), k = 2048,
// 128K columns, microseconds for FP32 / FP16 with the histogram given:
//   rows  split 1      2      4      8
//      8   50.6/48.0  32.2/30.1  22.2/20.7  18.1/16.5
//     16   50.8/47.9  32.2/30.0  22.7/20.6  29.2/26.3
//     24   51.0/48.1  32.5/30.1  23.3/21.2  30.2/27.3
//     32   51.0/48.1  32.5/30.2  37.8/34.7  40.8/37.0
// (64 rows: split 2 beats 1 and 4; 128 rows: split 1 beats 2.) A cluster of 4 or 8 that would fill
// more than about 3/4 of the SMs slows down: such clusters are placed per GPC, and the leader's serial
// refinement leaves its CTAs idle.
static int cluster_ctas_limit(int multiprocessors, int split) { return split <= 2 ? multiprocessors : multiprocessors * 3 / 4; }

int automatic_topk_split(std::int64_t rows, std::int64_t width, int multiprocessors, const Arch& arch) {
  int split = 1;
  for (int c : supported_topk_splits(arch))
    if (rows * c <= cluster_ctas_limit(multiprocessors, c) && width >= static_cast<std::int64_t>(c) * kTopkMinSegment)
      split = c;
  return split;
}

KernelSpec topk_kernel_spec(const TopkConfig& c) {
  c.check_supported();
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = kernels::kTopkThreads;
  spec.smem_bytes = 0;  // static shared memory only
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"topk_split.cuh\"\n"
      "extern \"C\" __global__ void {cluster}__launch_bounds__({threads}) {entry}(const flash_indexer::kernels::TopkParams p) {{\n"
      "  flash_indexer::kernels::topk_split<flash_indexer::kernels::LogitsOut::{in}, {split}>(p);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
      fmt::arg("cluster", c.split > 1 ? fmt::format("__cluster_dims__({}, 1, 1) ", c.split) : std::string()),
      fmt::arg("in", logits_name(c.logits)), fmt::arg("split", c.split));
  spec.config = {{"kind", "topk"},
                 {"variant", "split"},
                 {"split", c.split},
                 {"logits", logits_name(c.logits)},
                 {"arch", c.arch.name()}};
  return spec;
}

std::size_t topk_workspace_bytes(std::int64_t rows) {
  return static_cast<std::size_t>(std::max<std::int64_t>(rows, 1)) * sizeof(TopkRowReport);
}

void topk(const TensorView& logits, const TensorView& lengths, const TensorView& indices, const TensorView& workspace,
          Stream stream, const TopkOptions& options) {
  Launch l = validate(logits, lengths, indices, workspace, options);
  if (l.params.rows == 0) return;
  // The one-CTA kernel exists on every arch; it tells the device's arch and size for the choice.
  l.config.split = 1;
  const LoadedKernel& one_cta = loaded_kernel(l.config, stream);
  l.config.split = options.split != 0 ? options.split
                                      : automatic_topk_split(l.params.rows, l.params.width, one_cta.multiprocessors, one_cta.arch);
  if (l.config.split > 1 && one_cta.arch.major < 9)
    throw Error(fmt::format("topk: options.split = {}: thread-block clusters need sm_90 or newer, this device is {}",
                            l.config.split, one_cta.arch.name()));
  const LoadedKernel& kernel = l.config.split == 1 ? one_cta : loaded_kernel(l.config, stream);
  void* args[] = {&l.params};
  launch_kernel(kernel, static_cast<unsigned>(l.params.rows) * static_cast<unsigned>(l.config.split), 1, 1, stream, args);
}

void warm_topk(const TopkConfig& config) { loaded_kernel(config, nullptr); }

void warm_topk(LogitsDType logits) {
  for (int split : supported_topk_splits(current_device_arch())) loaded_kernel({logits, Arch{}, split}, nullptr);
}

}  // namespace flash_indexer
