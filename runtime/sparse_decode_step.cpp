// The sparse decode step: configuration keys, codegen, launch.
#include "sparse_decode_step.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"

namespace flash_indexer {
namespace {

struct ConfigHash {
  std::size_t operator()(const SparseDecodeStepConfig& c) const {
    return ((((static_cast<std::size_t>(c.heads) * 131 + c.head_dim) * 17 + c.candidate_block) * 7 +
             static_cast<std::size_t>(c.logits)) *
                2 +
            (c.kv == KvFormat::mxfp4 ? 1 : 0)) *
               16 +
           static_cast<std::size_t>(c.cluster);
  }
};

KernelRegistry<SparseDecodeStepConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<SparseDecodeStepConfig, ConfigHash>();  // never destroyed, as every registry
  return *r;
}

const LoadedKernel& loaded_kernel(std::string_view op, const SparseDecodeStepConfig& config, CUstream stream) {
  return registry().get_for_current_device(op, config, stream,
                                           [](const SparseDecodeStepConfig& c) { return sparse_decode_step_kernel_spec(c); });
}

int value_bytes(LogitsDType logits) { return logits == LogitsDType::f32 ? 4 : 2; }

}  // namespace

std::string SparseDecodeStepConfig::key() const {
  return fmt::format("sparse_decode_step.sm90.h{}.d{}.cb{}.out-{}.kv-{}.c{}.{}", heads, head_dim, candidate_block,
                     logits_name(logits), kv_name(kv), cluster, arch.name());
}

SparseDecodeStepConfig SparseDecodeStepConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const bool sized = parts.size() == 9;
  const auto out = sized && parts[5].starts_with("out-") ? logits_from_name(parts[5].substr(4)) : std::nullopt;
  const auto kv = sized && parts[6].starts_with("kv-") ? kv_from_name(parts[6].substr(3)) : std::nullopt;
  if (!sized || parts[0] != "sparse_decode_step" || parts[1] != "sm90" || !out || !kv)
    throw ArgumentError(fmt::format(
        "kernel key \"{}\": expected "
        "sparse_decode_step.sm90.h<heads>.d<head_dim>.cb<candidate_block>.out-<f32|f16|bf16>.kv-<fp8|mxfp4>.c<cluster>.<arch>",
        key));
  SparseDecodeStepConfig c;
  c.heads = parse_int_after(parts[2], "h", key);
  c.head_dim = parse_int_after(parts[3], "d", key);
  c.candidate_block = parse_int_after(parts[4], "cb", key);
  c.logits = *out;
  c.kv = *kv;
  c.cluster = parse_int_after(parts[7], "c", key);
  c.arch = Arch::parse(parts[8], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void SparseDecodeStepConfig::check_supported() const {
  const bool cluster_ok = cluster == 1 || cluster == 2 || cluster == 4 || cluster == 8;
  if (!arch.is_sm90a() || (heads != 32 && heads != 64) || head_dim != 128 || (candidate_block != 8 && candidate_block != 16) ||
      (logits != LogitsDType::f32 && logits != LogitsDType::f16 && logits != LogitsDType::bf16) ||
      (kv != KvFormat::fp8 && kv != KvFormat::mxfp4) || !cluster_ok)
    throw ArgumentError(
        fmt::format("sparse_decode_step configuration {}: expected sm_90a, heads 32 or 64, head_dim 128, candidate_block 8 or "
                    "16, logits f32, f16 or bf16, kv fp8 or mxfp4, cluster 1, 2, 4 or 8",
                    key()));
}

std::vector<SparseDecodeStepConfig> supported_sparse_decode_step_configs(const Arch& arch) {
  std::vector<SparseDecodeStepConfig> configs;
  if (!arch.is_sm90a()) return configs;
  for (KvFormat kv : {KvFormat::fp8, KvFormat::mxfp4})
    for (int heads : {32, 64})
      for (int block : {8, 16})
        for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
          for (int cluster = 1; cluster <= kernels::kSparseStepMaxCluster; cluster *= 2)
            configs.push_back({heads, 128, block, logits, kv, cluster, arch});
  return configs;
}

KernelSpec sparse_decode_step_kernel_spec(const SparseDecodeStepConfig& c) {
  c.check_supported();
  const bool mxfp4 = c.kv == KvFormat::mxfp4;
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = kernels::kSparseStepThreads;
  spec.smem_bytes = static_cast<unsigned>(
      kernels::sparse_step_layout(c.heads, c.head_dim, c.candidate_block, value_bytes(c.logits), mxfp4).bytes);
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"sparse_decode_step_sm90.cuh\"\n"
      "extern \"C\" __global__ void {cluster}__launch_bounds__({threads}, 1) {entry}(const __grid_constant__ "
      "flash_indexer::kernels::SparseDecodeStepParams s) {{\n"
      "  flash_indexer::kernels::sparse_decode_step_sm90<{h}, {d}, {cb}, flash_indexer::kernels::LogitsOut::{out}, {mxfp4}, "
      "{c}>(s);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
      fmt::arg("cluster", c.cluster > 1 ? fmt::format("__cluster_dims__({}, 1, 1) ", c.cluster) : std::string()),
      fmt::arg("h", c.heads), fmt::arg("d", c.head_dim), fmt::arg("cb", c.candidate_block),
      fmt::arg("out", logits_name(c.logits)), fmt::arg("mxfp4", mxfp4 ? "true" : "false"), fmt::arg("c", c.cluster));
  spec.config = {
      {"kind", "sparse_decode_step"},    {"heads", c.heads},    {"head_dim", c.head_dim}, {"candidate_block", c.candidate_block},
      {"logits", logits_name(c.logits)}, {"kv", kv_name(c.kv)}, {"cluster", c.cluster},   {"arch", c.arch.name()}};
  return spec;
}

SparseStepCapacity sparse_decode_step_capacity(std::string_view op, const SparseDecodeStepConfig& config, CUstream stream) {
  SparseStepCapacity capacity{};
  SparseDecodeStepConfig c = config;
  for (int i = 0; i < 4; ++i) {
    c.cluster = 1 << i;
    const LoadedKernel& kernel = loaded_kernel(op, c, stream);
    capacity[i] = i == 0 ? kernel.multiprocessors * std::max(kernel.ctas_per_sm, 1) : kernel.max_active_clusters[i];
  }
  return capacity;
}

int sparse_decode_step_cluster(std::int64_t rows, std::int64_t width, const SparseStepCapacity& capacity) {
  int fewest = 1;
  while (static_cast<std::int64_t>(fewest) * kernels::kSparseStepSegmentColumns < width) fewest *= 2;
  if (fewest > kernels::kSparseStepMaxCluster) return 0;
  for (int cluster = kernels::kSparseStepMaxCluster; cluster > fewest; cluster /= 2)
    if (rows <= capacity[std::countr_zero(static_cast<unsigned>(cluster))]) return cluster;
  return fewest;
}

bool sparse_decode_step_preferred(KvFormat kv, std::int64_t rows, std::int64_t width, const SparseStepCapacity& capacity) {
  if (kv != KvFormat::fp8) return false;
  const int cluster = sparse_decode_step_cluster(rows, width, capacity);
  if (cluster == 0 || rows > capacity[std::countr_zero(static_cast<unsigned>(cluster))]) return false;
  return rows * cluster * 16 >= static_cast<std::int64_t>(capacity[0]) * 15;
}

SparseDecodeStepLaunch prepare_sparse_decode_step(std::string_view op, const SparsePagedMqaLogitsCall& logits,
                                                  const TopkCall& topk, const SparseStepCapacity& capacity, CUstream stream) {
  const std::int64_t width = static_cast<std::int64_t>(logits.params.num_candidates) * logits.config.candidate_block;
  if (logits.empty() || topk.empty() || topk.params.rows != logits.rows || topk.params.width != width)
    throw Error(fmt::format("{}: the sparse decode step does not apply to this call (the plan checks its shapes first)", op));
  SparseDecodeStepConfig c{logits.config.heads,
                           logits.config.head_dim,
                           logits.config.candidate_block,
                           logits.config.logits,
                           logits.config.kv,
                           1,
                           Arch{}};
  c.cluster = sparse_decode_step_cluster(logits.rows, width, capacity);
  if (c.cluster == 0)
    throw Error(fmt::format("{}: the sparse decode step holds rows of up to {} columns, got {}", op,
                            kernels::kSparseStepMaxCluster * kernels::kSparseStepSegmentColumns, width));
  SparseDecodeStepLaunch launch;
  launch.kernel = &loaded_kernel(op, c, stream);
  launch.params.logits = sparse_sm90_params(logits);
  launch.params.topk = topk.params;
  launch.grid = static_cast<unsigned>(logits.rows * c.cluster);
  launch.pdl = logits.paged.pdl;
  return launch;
}

void enqueue(const SparseDecodeStepLaunch& launch, CUstream stream) {
  kernels::SparseDecodeStepParams params = launch.params;
  void* args[] = {&params};
  launch_kernel(*launch.kernel, launch.grid, 1, 1, stream, args, launch.pdl);
}

void warm_sparse_decode_step(const SparseDecodeStepConfig& config) {
  sparse_decode_step_capacity("warm_sparse_decode_step", config, nullptr);
}

}  // namespace flash_indexer
