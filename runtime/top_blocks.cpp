// The first level of two-level indexing: configuration keys and codegen (the call: top_blocks_call.cpp).
#include <fmt/format.h>

#include "../kernels/top_blocks_params.cuh"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "top_blocks_kernel.hpp"

namespace flash_indexer {

std::string TopBlocksConfig::key() const { return fmt::format("top_blocks.in-{}.{}", logits_name(logits), arch.name()); }

TopBlocksConfig TopBlocksConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const auto in = parts.size() == 3 && parts[1].starts_with("in-") ? logits_from_name(parts[1].substr(3)) : std::nullopt;
  if (parts.size() != 3 || parts[0] != "top_blocks" || !in)
    throw ArgumentError(fmt::format("kernel key \"{}\": expected top_blocks.in-<f32|f16|bf16>.<arch>", key));
  TopBlocksConfig c;
  c.logits = *in;
  c.arch = Arch::parse(parts[2], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void TopBlocksConfig::check_supported() const {
  if (arch.major < 8)
    throw ArgumentError(
        fmt::format("top_blocks configuration {}: expected an arch of sm_80 or newer, got {}", key(), arch.name()));
  if (logits != LogitsDType::f32 && logits != LogitsDType::f16 && logits != LogitsDType::bf16)
    throw ArgumentError(
        fmt::format("top_blocks configuration {}: expected logits f32, f16 or bf16, got {}", key(), static_cast<int>(logits)));
}

std::vector<TopBlocksConfig> supported_top_blocks_configs(const Arch& arch) {
  std::vector<TopBlocksConfig> configs;
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) configs.push_back({dtype, arch});
  return configs;
}

KernelSpec top_blocks_kernel_spec(const TopBlocksConfig& c) {
  c.check_supported();
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = kernels::kTopBlocksThreads;
  spec.smem_bytes = 0;  // static only
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"top_blocks.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}(const flash_indexer::kernels::TopBlocksParams p) {{\n"
      "  flash_indexer::kernels::top_blocks<flash_indexer::kernels::LogitsOut::{in}>(p);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
      fmt::arg("in", logits_name(c.logits)));
  spec.config = {{"kind", "top_blocks"}, {"logits", logits_name(c.logits)}, {"arch", c.arch.name()}};
  return spec;
}

}  // namespace flash_indexer
