// Top-k selection: configuration keys, codegen and the automatic split (the call itself: topk_call.cpp).
#include "flash_indexer/topk.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "../kernels/topk_params.cuh"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "topk_kernel.hpp"

namespace flash_indexer {

static_assert(kMaxTopk == kernels::kMaxTopk);
static_assert(sizeof(TopkRowReport) == kernels::kTopkReportInts * sizeof(std::int32_t));

namespace {
// Parts whose CTAs may take 163 KiB of shared memory or more (sm_80, sm_90, sm_100).
bool has_large_smem(const Arch& arch) { return (arch.major == 8 && arch.minor == 0) || arch.major == 9 || arch.major == 10; }

// The selector's name in the key, before the split.
const char* selector_name(const TopkConfig& c) {
  if (c.registers) return c.wide ? "registerwide" : "register";
  if (c.filter) return "filter";
  return c.wide ? "residentwide" : c.resident ? "resident" : "split";
}
}  // namespace

std::string TopkConfig::key() const {
  return fmt::format("topk.{}{}.in-{}.{}", selector_name(*this), split, logits_name(logits), arch.name());
}

TopkConfig TopkConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const auto in = parts.size() == 4 && parts[2].starts_with("in-") ? logits_from_name(parts[2].substr(3)) : std::nullopt;
  const bool resident = parts.size() == 4 && parts[1].starts_with("resident");
  const bool registers = parts.size() == 4 && parts[1].starts_with("register");
  const bool filter = parts.size() == 4 && parts[1].starts_with("filter");
  const bool wide = (resident && parts[1].starts_with("residentwide")) || (registers && parts[1].starts_with("registerwide"));
  if (parts.size() != 4 || parts[0] != "topk" || !(parts[1].starts_with("split") || resident || registers || filter) || !in)
    throw ArgumentError(
        fmt::format("kernel key \"{}\": expected topk.split<1|2|4|8>.in-<f32|f16|bf16>.<arch>, or "
                    "topk.resident<1|2|4|8|16>..., topk.residentwide<1|2|4|8>..., topk.register1..., "
                    "topk.registerwide1... or topk.filter<1|2|4|8>...",
                    key));
  TopkConfig c;
  c.resident = resident;
  c.registers = registers;
  c.wide = wide;
  c.filter = filter;
  c.split = parse_int_after(parts[1], selector_name(c), key);
  c.logits = *in;
  c.arch = Arch::parse(parts[3], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void TopkConfig::check_supported() const {
  if (arch.major < 8)
    throw ArgumentError(fmt::format("topk configuration {}: expected an arch of sm_80 or newer, got {}", key(), arch.name()));
  if (logits != LogitsDType::f32 && logits != LogitsDType::f16 && logits != LogitsDType::bf16)
    throw ArgumentError(
        fmt::format("topk configuration {}: expected logits f32, f16 or bf16, got {}", key(), static_cast<int>(logits)));
  if (split != 1 && split != 2 && split != 4 && split != 8 && split != 16)
    throw ArgumentError(fmt::format("topk configuration {}: expected split 1, 2, 4, 8 or 16, got {}", key(), split));
  if (split == 16 && (!resident || wide))
    throw ArgumentError(
        fmt::format("topk configuration {}: a cluster of 16 runs only the resident selector's 512-thread form", key()));
  if (registers && (resident || split != 1))
    throw ArgumentError(
        fmt::format("topk configuration {}: the register selector runs one CTA per row (split 1), got split {}", key(), split));
  if (registers && logits != LogitsDType::f32)
    throw ArgumentError(fmt::format("topk configuration {}: the register selector takes f32 logits", key()));
  if (filter && (resident || registers || wide))
    throw ArgumentError(fmt::format("topk configuration {}: the filter selector is neither resident, register nor wide", key()));
  if (filter && !has_large_smem(arch))
    throw ArgumentError(
        fmt::format("topk configuration {}: the filter selector needs 163 KiB of shared memory per CTA "
                    "(sm_80, sm_90, sm_100), got {}",
                    key(), arch.name()));
  if (wide && !registers && (!resident || arch.major < 9))
    throw ArgumentError(
        fmt::format("topk configuration {}: the wide resident selector needs sm_90 or newer, got {}", key(), arch.name()));
  if (split > 1 && arch.major < 9)
    throw ArgumentError(fmt::format("topk configuration {}: split {} needs thread-block clusters (sm_90 or newer), got {}", key(),
                                    split, arch.name()));
}

std::vector<int> supported_topk_splits(const Arch& arch) {
  if (arch.major < 9) return {1};
  return {1, 2, 4, 8};
}

std::vector<TopkConfig> supported_topk_configs(const Arch& arch) {
  std::vector<TopkConfig> configs;
  for (int variant = 0; variant < (arch.major >= 9 ? 3 : 2); ++variant)  // streaming, resident, wide resident
    for (int split : supported_topk_splits(arch))
      for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
        configs.push_back({dtype, arch, split, variant >= 1, variant == 2});
  if (arch.major >= 9)  // the resident selector in clusters of 16 (a non-portable size)
    for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
      configs.push_back({dtype, arch, 16, true, false});
  for (bool wide : {false, true})  // the register selector (FP32), 8 and 16 logits per thread
    configs.push_back({LogitsDType::f32, arch, 1, false, wide, true});
  if (has_large_smem(arch))
    for (int split : supported_topk_splits(arch))
      for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
        configs.push_back({dtype, arch, split, false, false, false, true});
  return configs;
}

// Smallest row segment per CTA worth a cluster split (columns of the widest row).
constexpr std::int64_t kTopkMinSegment = 4096;
// Clusters of 4 or 8 only while they fill at most this share of the SMs; 2 while the grid fits in
// one wave; then 1. A cluster of 4 or 8 that would fill more than about 3/4 of the SMs slows down:
// such clusters are placed per GPC, and the leader's serial refinement leaves its CTAs idle (on the
// H200 at 128K columns, 32 rows take 37.8 µs at split 4 against 32.5 at split 2; the table:
// docs/benchmarks/topk.md, "Cluster size by rows").
static int cluster_ctas_limit(int multiprocessors, int split) { return split <= 2 ? multiprocessors : multiprocessors * 3 / 4; }

// A row of at most 16K logits stays on one CTA (it fits the CTA's resident staging buffer, and the
// register selector's 1024-thread form): at 8K and 16K columns one CTA beats a cluster of 2 for 1-64
// rows, FP32 and FP16, by 0.3-1.1 µs (docs/benchmarks/topk.md).
constexpr std::int64_t kTopkOneCtaWidth = 16384;

int automatic_topk_split(std::int64_t rows, std::int64_t width, int multiprocessors, const Arch& arch) {
  int split = 1;
  if (width <= kTopkOneCtaWidth) return split;
  for (int c : supported_topk_splits(arch))
    if (rows * c <= cluster_ctas_limit(multiprocessors, c) && width >= static_cast<std::int64_t>(c) * kTopkMinSegment) split = c;
  return split;
}

// Stages of the shared-memory staging buffer (kernels/topk_split.cuh), 16 KiB each: 4 where a CTA may
// take 163 KiB or more (sm_80, sm_90, sm_100), so a segment of 16K FP32 logits stays resident (on sm_90
// two such CTAs and their static part share an SM); 2 on the parts with 99 KiB per CTA. Only the sm_90
// form is measured (H200).
static int topk_stages(const Arch& arch) { return has_large_smem(arch) ? 4 : 2; }

unsigned topk_split_kernel_smem_bytes(const Arch& arch, int k) { return kernels::topk_split_smem_bytes(topk_stages(arch), k); }

// The wide resident selector: 1024 threads, 8 stages (128 KiB), one CTA per SM.
constexpr int kTopkWideThreads = 1024;
constexpr int kTopkWideStages = 8;

std::int64_t topk_resident_columns(LogitsDType logits, const Arch& arch, bool wide) {
  return static_cast<std::int64_t>(wide ? kTopkWideStages : topk_stages(arch)) * (kernels::kTopkStageBytes / 16) *
         (16 / (logits == LogitsDType::f32 ? 4 : 2));
}
std::int64_t topk_register_columns(LogitsDType logits, bool wide) {
  if (logits != LogitsDType::f32) return 0;  // 16-bit rows: the resident selector (kernels/topk_register.cuh says why)
  return static_cast<std::int64_t>(wide ? kTopkWideThreads : kernels::kTopkThreads) * kernels::kRegisterColumns;
}

// Two CTAs per SM: the per-row path is latency-bound, and a second CTA hides it.
constexpr int kTopkCtasPerSm = 2;

// The resident selector when the widest row's segment per CTA fits shared memory, in this order (an
// automatic split may grow; a forced one stays):
//   1. the 512-thread form at the split; 2. at a larger split that keeps one CTA per SM;
//   3. the wide form (1024 threads, 128 KiB, one CTA per SM) at the split;
//   4. the 512-thread form at a larger split within one wave of two CTAs per SM; 5. the wide form at a
//   larger split; else the streaming selector at the split.
// A resident row is counted once on chip where a streamed one is read from global memory per pass, so
// a larger split that keeps the row resident wins while the grid stays within one wave (FP32 32 x 128K:
// 49.5 µs streamed at split 2, 31.4 resident at split 8). The wide form is slower where the 512-thread
// form fits (1 x 8K FP32 11.9 against 10.3 µs): its scans and barriers span twice the warps. The
// measurements behind this order: docs/benchmarks/topk.md, "Resident, wide or streamed".
std::int64_t TopkDevice::rows_at_once(int split, bool wide) const {
  const int per_sm = wide ? 1 : 2;
  int i = 0;
  while ((1 << i) < split) ++i;
  const int known = split > 1 && i < 5 ? (wide ? clusters_one_per_sm : clusters_two_per_sm)[i] : 0;
  return known > 0 ? known : static_cast<std::int64_t>(multiprocessors) * per_sm / split;
}

TopkChoice choose_topk_kernel(std::int64_t rows, std::int64_t width, LogitsDType logits, const TopkDevice& device,
                              int requested_split) {
  const Arch& arch = device.arch;
  const int multiprocessors = device.multiprocessors;
  const bool automatic = requested_split == 0;
  const int split = automatic ? automatic_topk_split(rows, width, multiprocessors, arch) : requested_split;
  // An FP32 row on one CTA: the register selector (its 512-thread form where that holds the row). The
  // 1024-thread form runs one CTA per SM instead of two, so it is taken only for rows past 8K: at 8K it
  // is 30 % slower at 512 rows (docs/benchmarks/topk.md, "The register selector").
  if (split == 1 && width <= topk_register_columns(logits, true))
    return TopkChoice{1, false, width > topk_register_columns(logits, false), true};
  const std::int64_t per = logits == LogitsDType::f32 ? 4 : 8;  // logits per 16-byte vector
  const std::int64_t sms = multiprocessors;
  auto segment = [&](int s) { return ((width + s - 1) / s + per - 1) / per * per; };
  auto fits = [&](int s) { return segment(s) <= topk_resident_columns(logits, arch, false); };
  auto fits_wide = [&](int s) {
    return arch.major >= 9 && rows <= device.rows_at_once(s, true) && segment(s) <= topk_resident_columns(logits, arch, true);
  };
  TopkChoice c{split, fits(split), false};
  if (split == 16) return c;  // only the resident 512-thread form runs clusters of 16 (prepare_topk says so)
  auto grow = [&](auto&& ok) {
    for (int s : supported_topk_splits(arch))
      if (s > c.split && ok(s)) {
        c.split = s;
        return true;
      }
    return false;
  };
  if (!c.resident && automatic) c.resident = grow([&](int s) { return fits(s) && rows * s <= sms; });
  if (!c.resident) c.resident = c.wide = fits_wide(c.split);
  if (!c.resident && automatic) c.resident = grow([&](int s) { return fits(s) && rows <= device.rows_at_once(s, false); });
  if (!c.resident && automatic) c.resident = c.wide = grow(fits_wide);
  // A cluster of 16 (512 threads) where a cluster of 8 fills at least half of its CTAs' buffers (or
  // needs the wide form), while its CTAs take at most half of the SMs: the shorter segment per CTA then
  // outweighs the larger exchange (FP32 1 x 256K 22.1 µs at 8, wide, against 17.1 at 16), and with more
  // rows it does not (8 x 256K 22.4 against 23.4). docs/benchmarks/topk.md, "Clusters of 16".
  if (automatic && arch.major >= 9 && c.resident && c.split == 8 && rows * 16 * 2 <= sms &&
      rows <= device.rows_at_once(16, false) && fits(16) && segment(8) * 2 >= topk_resident_columns(logits, arch, false)) {
    c.split = 16;
    c.wide = false;
  }
  // A streamed row: the filter selector where its bitmaps hold the segment. A CTA of it streams at
  // about half an SM's share of the bandwidth, so an automatic split of 1 becomes 2 where the grid stays
  // within two CTAs per SM (64 x 128K FP32 given the histogram: 33.3 -> 24.0 µs). A cluster of 4 only
  // where one CTA per SM holds the grid: there it beats 2 (16 x 256K FP32 26.3 against 38.0 µs), with
  // more rows it takes a second wave and loses (64 x 256K 57.8 against 44.0). docs/benchmarks/topk.md,
  // "The filter selector's split".
  if (!c.resident) c.filter = has_large_smem(arch) && segment(c.split) <= kernels::kFilterColumns;
  if (c.filter && automatic && arch.major >= 9) {
    for (int s : {4, 2})
      if (s > c.split && rows * s <= sms && rows <= device.rows_at_once(s, false) && segment(s) >= kTopkMinSegment) {
        c.split = s;
        break;
      }
    if (c.split == 1 && rows * 2 <= kTopkCtasPerSm * sms && rows <= device.rows_at_once(2, false) &&
        segment(2) >= kTopkMinSegment)
      c.split = 2;
  }
  return c;
}

static KernelSpec topk_register_spec(const TopkConfig& c) {
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = c.wide ? kTopkWideThreads : kernels::kTopkThreads;
  spec.smem_bytes = 0;  // static only
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"topk_register.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}, {ctas}) {entry}(const flash_indexer::kernels::TopkParams p) {{\n"
      "  flash_indexer::kernels::topk_register<flash_indexer::kernels::LogitsOut::{in}, {threads}, {columns}>(p);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
      fmt::arg("in", logits_name(c.logits)), fmt::arg("columns", kernels::kRegisterColumns),
      fmt::arg("ctas", c.wide ? 1 : kTopkCtasPerSm));
  spec.config = {{"kind", "topk"},
                 {"variant", c.wide ? "register-wide" : "register"},
                 {"split", c.split},
                 {"logits", logits_name(c.logits)},
                 {"arch", c.arch.name()}};
  return spec;
}

// The filter selector: 512 threads, two CTAs per SM; its two bitmaps are the dynamic shared memory.
static KernelSpec topk_filter_spec(const TopkConfig& c) {
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = kernels::kTopkThreads;
  spec.smem_bytes = 2 * kernels::kFilterColumns / 8;
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"topk_filter.cuh\"\n"
      "extern \"C\" __global__ void {cluster}__launch_bounds__({threads}, {ctas}) {entry}(const "
      "flash_indexer::kernels::TopkParams p) {{\n"
      "  flash_indexer::kernels::topk_filter<flash_indexer::kernels::LogitsOut::{in}, {split}>(p);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
      fmt::arg("cluster", c.split > 1 ? fmt::format("__cluster_dims__({}, 1, 1) ", c.split) : std::string()),
      fmt::arg("in", logits_name(c.logits)), fmt::arg("split", c.split), fmt::arg("ctas", kTopkCtasPerSm));
  spec.config = {
      {"kind", "topk"}, {"variant", "filter"}, {"split", c.split}, {"logits", logits_name(c.logits)}, {"arch", c.arch.name()}};
  return spec;
}

KernelSpec topk_kernel_spec(const TopkConfig& c) {
  c.check_supported();
  if (c.registers) return topk_register_spec(c);
  if (c.filter) return topk_filter_spec(c);
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = c.wide ? kTopkWideThreads : kernels::kTopkThreads;
  const int stages = c.wide ? kTopkWideStages : topk_stages(c.arch);
  // The staging ring; the split selector's also its selected columns, for the largest k (a call passes its
  // own k's size, topk_split_kernel_smem_bytes).
  spec.smem_bytes = c.resident ? static_cast<unsigned>(stages * kernels::kTopkStageBytes)
                               : kernels::topk_split_smem_bytes(stages, kernels::kMaxTopk);
  // The resident selector takes its thread count as a template argument; the streaming one is 512 only.
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"{header}.cuh\"\n"
      "extern \"C\" __global__ void {cluster}__launch_bounds__({threads}, {ctas}) {entry}(const "
      "flash_indexer::kernels::TopkParams p) {{\n"
      "  flash_indexer::kernels::{header}<flash_indexer::kernels::LogitsOut::{in}, {split}, {stages}{threads_arg}>(p);\n"
      "}}\n",
      fmt::arg("header", c.resident ? "topk_resident" : "topk_split"), fmt::arg("key", spec.key),
      fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
      fmt::arg("cluster", c.split > 1 ? fmt::format("__cluster_dims__({}, 1, 1) ", c.split) : std::string()),
      fmt::arg("in", logits_name(c.logits)), fmt::arg("split", c.split), fmt::arg("stages", stages),
      fmt::arg("threads_arg", c.resident ? fmt::format(", {}", spec.threads) : std::string()),
      fmt::arg("ctas", c.wide ? 1 : kTopkCtasPerSm));
  spec.config = {{"kind", "topk"},
                 {"variant", c.wide       ? "resident-wide"
                             : c.resident ? "resident"
                                          : "split"},
                 {"split", c.split},
                 {"logits", logits_name(c.logits)},
                 {"arch", c.arch.name()}};
  return spec;
}

std::size_t topk_workspace_bytes(std::int64_t rows) {
  return static_cast<std::size_t>(std::max<std::int64_t>(rows, 1)) * sizeof(TopkRowReport);
}

}  // namespace flash_indexer
