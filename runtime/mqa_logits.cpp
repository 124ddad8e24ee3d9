// Ragged (prefill) MQA logits: configuration keys and codegen (the call itself: mqa_logits_call.cpp).
#include "flash_indexer/mqa_logits.hpp"

#include <fmt/format.h>

#include "../kernels/mqa_logits_params.cuh"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "mqa_logits_kernel.hpp"
#include "paged_mqa_logits_kernel.hpp"  // variant_name, portable_forced_by_environment

namespace flash_indexer {
namespace {

// The sm90 kernel's TMA tiles are 64 or 128 bytes wide; head_dim 32 (DeepGEMM's tests use it) runs on the
// portable kernel, which takes any multiple of 16.
bool sm90_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

}  // namespace

std::string MqaLogitsConfig::key() const {
  return fmt::format("mqa_logits.{}.h{}.d{}.hist{}.out-{}.kv-fp8.{}", variant_name(variant), heads, head_dim, histogram ? 1 : 0,
                     logits_name(logits), arch.name());
}

MqaLogitsConfig MqaLogitsConfig::resolved() const {
  MqaLogitsConfig c = *this;
  if (c.variant == MqaLogitsVariant::automatic)
    c.variant = c.arch.is_sm90a() && sm90_head_dim(c.head_dim) && !portable_forced_by_environment() ? MqaLogitsVariant::sm90
                                                                                                    : MqaLogitsVariant::portable;
  return c;
}

MqaLogitsConfig MqaLogitsConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  if (parts.size() != 8 || parts[0] != "mqa_logits" || (parts[1] != "portable" && parts[1] != "sm90") || parts[6] != "kv-fp8")
    throw ArgumentError(fmt::format(
        "kernel key \"{}\": expected mqa_logits.<portable|sm90>.h<heads>.d<head_dim>.hist<0|1>.out-<f32|f16|bf16>.kv-fp8.<arch>",
        key));
  MqaLogitsConfig c;
  c.variant = parts[1] == "sm90" ? MqaLogitsVariant::sm90 : MqaLogitsVariant::portable;
  c.heads = parse_int_after(parts[2], "h", key);
  c.head_dim = parse_int_after(parts[3], "d", key);
  const int hist = parse_int_after(parts[4], "hist", key);
  if (hist != 0 && hist != 1) throw ArgumentError(fmt::format("kernel key \"{}\": expected hist0 or hist1", key));
  c.histogram = hist == 1;
  const auto out = parts[5].starts_with("out-") ? logits_from_name(parts[5].substr(4)) : std::nullopt;
  if (!out)
    throw ArgumentError(fmt::format("kernel key \"{}\": expected out-f32, out-f16 or out-bf16, got \"{}\"", key, parts[5]));
  c.logits = *out;
  c.arch = Arch::parse(parts[7], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void MqaLogitsConfig::check_supported() const {
  auto fail = [&](std::string_view what, int got) {
    throw ArgumentError(fmt::format("mqa_logits configuration {}: expected {}, got {}", key(), what, got));
  };
  if (heads != 16 && heads != 32 && heads != 64) fail("heads in {16, 32, 64}", heads);
  if (head_dim != 32 && head_dim != 64 && head_dim != 128) fail("head_dim in {32, 64, 128}", head_dim);
  if (logits != LogitsDType::f32 && logits != LogitsDType::f16 && logits != LogitsDType::bf16)
    fail("logits f32, f16 or bf16", static_cast<int>(logits));
  if (arch.major < 8) fail("an arch of sm_80 or newer", arch.major * 10 + arch.minor);
  if (variant == MqaLogitsVariant::automatic)
    throw ArgumentError(fmt::format("mqa_logits configuration {}: the variant must be resolved (resolved())", key()));
  if (variant == MqaLogitsVariant::sm90 && !arch.is_sm90a())
    throw ArgumentError(
        fmt::format("mqa_logits configuration {}: the sm90 kernel needs sm_90a (H100/H200), got {}", key(), arch.name()));
  if (variant == MqaLogitsVariant::sm90 && !sm90_head_dim(head_dim))
    fail("head_dim 64 or 128 for the sm90 kernel (32 runs on the portable one)", head_dim);
  if (variant != MqaLogitsVariant::portable && variant != MqaLogitsVariant::sm90)
    fail("variant automatic, portable or sm90", static_cast<int>(variant));
}

std::vector<MqaLogitsConfig> supported_mqa_logits_configs(const Arch& arch) {
  std::vector<MqaLogitsConfig> configs;
  for (int heads : {16, 32, 64})
    for (int head_dim : {32, 64, 128})
      for (bool histogram : {false, true})
        for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) {
          configs.push_back({heads, head_dim, histogram, logits, arch, MqaLogitsVariant::portable});
          if (arch.is_sm90a() && sm90_head_dim(head_dim))
            configs.push_back({heads, head_dim, histogram, logits, arch, MqaLogitsVariant::sm90});
        }
  return configs;
}

KernelSpec mqa_logits_kernel_spec(const MqaLogitsConfig& config) {
  const MqaLogitsConfig c = config.resolved();
  c.check_supported();
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.variant = static_cast<int>(c.variant);
  spec.config = {{"kind", "mqa_logits"},     {"variant", variant_name(c.variant)}, {"heads", c.heads}, {"head_dim", c.head_dim},
                 {"histogram", c.histogram}, {"logits", logits_name(c.logits)},    {"kv", "fp8"},      {"arch", c.arch.name()}};
  // One include and one instantiation; the sm90 kernel takes its tensor maps by __grid_constant__ and
  // holds its SM (one CTA).
  const bool sm90 = c.variant == MqaLogitsVariant::sm90;
  spec.threads = sm90 ? kernels::kMqaSm90Threads : kernels::kMqaThreads;
  spec.smem_bytes = static_cast<unsigned>(sm90 ? kernels::mqa_sm90_layout(c.heads, c.head_dim, c.histogram).bytes
                                               : kernels::mqa_portable_smem_bytes(c.heads, c.head_dim));
  const std::string bounds = sm90 ? fmt::format("{}, 1", spec.threads) : std::to_string(spec.threads);
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"mqa_logits_{v}.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({bounds}) {entry}({param} p) {{\n"
      "  flash_indexer::kernels::mqa_logits_{v}<{h}, {d}, {hist}, flash_indexer::kernels::LogitsOut::{out}>(p);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("v", variant_name(c.variant)), fmt::arg("bounds", bounds),
      fmt::arg("entry", spec.entry),
      fmt::arg("param", sm90 ? "const __grid_constant__ flash_indexer::kernels::MqaLogitsSm90Params"
                             : "const flash_indexer::kernels::MqaLogitsParams"),
      fmt::arg("h", c.heads), fmt::arg("d", c.head_dim), fmt::arg("hist", c.histogram ? "true" : "false"),
      fmt::arg("out", logits_name(c.logits)));
  return spec;
}

}  // namespace flash_indexer
