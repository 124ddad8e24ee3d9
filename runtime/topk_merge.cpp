// The merge of candidate lists: configuration keys and codegen (the call itself: topk_merge_call.cpp).
#include <fmt/format.h>

#include "../kernels/topk_merge_params.cuh"
#include "../kernels/topk_params.cuh"
#include "flash_indexer/error.hpp"
#include "flash_indexer/topk.hpp"
#include "kernel_key.hpp"
#include "topk_merge_kernel.hpp"

namespace flash_indexer {

static_assert(kernels::kTopkMergeMaxCandidates >= 16 * kernels::kMaxTopk, "16 ranks of k = kMaxTopk");

std::string TopkMergeConfig::key() const { return fmt::format("topk_merge.in-{}.{}", logits_name(values), arch.name()); }

TopkMergeConfig TopkMergeConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const auto in = parts.size() == 3 && parts[1].starts_with("in-") ? logits_from_name(parts[1].substr(3)) : std::nullopt;
  if (parts.size() != 3 || parts[0] != "topk_merge" || !in)
    throw ArgumentError(fmt::format("kernel key \"{}\": expected topk_merge.in-<f32|f16|bf16>.<arch>", key));
  TopkMergeConfig c;
  c.values = *in;
  c.arch = Arch::parse(parts[2], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void TopkMergeConfig::check_supported() const {
  if (arch.major < 8)
    throw ArgumentError(
        fmt::format("topk_merge configuration {}: expected an arch of sm_80 or newer, got {}", key(), arch.name()));
  if (values != LogitsDType::f32 && values != LogitsDType::f16 && values != LogitsDType::bf16)
    throw ArgumentError(
        fmt::format("topk_merge configuration {}: expected values f32, f16 or bf16, got {}", key(), static_cast<int>(values)));
}

std::vector<TopkMergeConfig> supported_topk_merge_configs(const Arch& arch) {
  std::vector<TopkMergeConfig> configs;
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) configs.push_back({dtype, arch});
  return configs;
}

KernelSpec topk_merge_kernel_spec(const TopkMergeConfig& c) {
  c.check_supported();
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = kernels::kTopkMergeThreads;
  spec.smem_bytes = 0;  // static only
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"topk_merge.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}(const flash_indexer::kernels::TopkMergeParams p) {{\n"
      "  flash_indexer::kernels::topk_merge<flash_indexer::kernels::LogitsOut::{in}>(p);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
      fmt::arg("in", logits_name(c.values)));
  spec.config = {{"kind", "topk_merge"}, {"values", logits_name(c.values)}, {"arch", c.arch.name()}};
  return spec;
}

}  // namespace flash_indexer
