// The first level of two-level indexing: configuration keys and codegen (the call: top_blocks_call.cpp).
#include <fmt/format.h>

#include "../kernels/top_blocks_params.cuh"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "top_blocks_kernel.hpp"

namespace flash_indexer {

std::string TopBlocksConfig::key() const {
  return fmt::format("top_blocks.{}in-{}.{}", registers ? (wide ? "registerwide." : "register.") : "", logits_name(logits),
                     arch.name());
}

TopBlocksConfig TopBlocksConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const bool form = parts.size() == 4 && (parts[1] == "register" || parts[1] == "registerwide");
  const std::size_t in_at = form ? 2 : 1;
  const auto in =
      (parts.size() == 3 || form) && parts[in_at].starts_with("in-") ? logits_from_name(parts[in_at].substr(3)) : std::nullopt;
  if (!in || parts[0] != "top_blocks")
    throw ArgumentError(fmt::format(
        "kernel key \"{}\": expected top_blocks.in-<f32|f16|bf16>.<arch> or top_blocks.register[wide].in-f32.<arch>", key));
  TopBlocksConfig c;
  c.logits = *in;
  c.registers = form;
  c.wide = form && parts[1] == "registerwide";
  c.arch = Arch::parse(parts[in_at + 1], fmt::format("kernel key \"{}\"", key));
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
  if (registers && logits != LogitsDType::f32)
    throw ArgumentError(fmt::format("top_blocks configuration {}: the register form takes f32 logits", key()));
  if (wide && !registers) throw ArgumentError(fmt::format("top_blocks configuration {}: only the register form is wide", key()));
}

std::vector<TopBlocksConfig> supported_top_blocks_configs(const Arch& arch) {
  std::vector<TopBlocksConfig> configs;
  for (LogitsDType dtype : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) configs.push_back({dtype, arch});
  for (bool wide : {false, true}) configs.push_back({LogitsDType::f32, arch, true, wide});
  return configs;
}

// The register form runs the register top-k selector (kernels/topk_register.cuh) on the blocks'
// maxima: its thread counts and CTAs per SM.
static KernelSpec top_blocks_register_spec(const TopBlocksConfig& c) {
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = c.wide ? 2 * kernels::kTopkThreads : kernels::kTopkThreads;
  spec.smem_bytes = 0;  // static only
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"top_blocks_params.cuh\"\n"
      "#include \"topk_register.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}, {ctas}) {entry}(const "
      "flash_indexer::kernels::TopBlocksRegisterParams p) {{\n"
      "  flash_indexer::kernels::topk_register<flash_indexer::kernels::LogitsOut::f32, {threads}, {columns}, true>(p.topk, "
      "p.block, p.keep_last);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
      fmt::arg("columns", kernels::kRegisterColumns), fmt::arg("ctas", c.wide ? 1 : 2));
  spec.config = {{"kind", "top_blocks"},
                 {"variant", c.wide ? "register-wide" : "register"},
                 {"logits", logits_name(c.logits)},
                 {"arch", c.arch.name()}};
  return spec;
}

KernelSpec top_blocks_kernel_spec(const TopBlocksConfig& c) {
  c.check_supported();
  if (c.registers) return top_blocks_register_spec(c);
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
