// Paged MQA logits: configuration keys and codegen (the call itself: paged_mqa_logits_call.cpp).
#include "flash_indexer/paged_mqa_logits.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "../kernels/paged_mqa_logits_params.cuh"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "paged_mqa_logits_kernel.hpp"

namespace flash_indexer {

const char* variant_name(PagedMqaLogitsVariant v) {
  switch (v) {
    case PagedMqaLogitsVariant::automatic: return "auto";
    case PagedMqaLogitsVariant::portable: return "portable";
    case PagedMqaLogitsVariant::sm90: return "sm90";
  }
  return "?";
}

std::string PagedMqaLogitsConfig::key() const {
  return fmt::format("paged_mqa_logits.{}.n{}.h{}.d{}.bs{}.hist{}.out-{}.kv-{}.{}", variant_name(variant), next_n, heads,
                     head_dim, block_size, histogram ? 1 : 0, logits_name(logits), kv_name(kv), arch.name());
}

bool portable_forced_by_environment() {
  static const bool forced = [] {
    const char* v = std::getenv("FLASH_INDEXER_KERNEL");
    return v != nullptr && std::string_view(v) == "portable";
  }();
  return forced;
}

namespace {

// The MXFP4 configurations the kernels are built for (what the DeepSeek-V4 indexers run): next_n 1..4 on
// the portable kernel, 1..6 (up to 5 draft tokens) on the sm90 kernel.
bool mxfp4_supported(int next_n, int heads, int head_dim, bool sm90) {
  return next_n >= 1 && next_n <= (sm90 ? kernels::kSm90MaxNextN : 4) && (heads == 32 || heads == 64) && head_dim == 128;
}

// Where the sm90 kernel runs: next_n <= 6, both caches. Past N = next_n * heads = 256 (next_n 5-6 at
// H 64) as groups of rows of a smaller kernel (kernels::sm90_n_wide, sm90_group_rows).
bool sm90_builds(const PagedMqaLogitsConfig& c) {
  return c.arch.is_sm90a() && c.next_n <= kernels::kSm90MaxNextN &&
         (c.kv == KvFormat::fp8 || mxfp4_supported(c.next_n, c.heads, c.head_dim, true));
}
}  // namespace

// `automatic` takes the sm90 kernel wherever it builds, the MXFP4 cache included (its form converts the
// keys to E4M3 straight into the wgmma's register fragments: about 40x the portable kernel at B 64 x 64K,
// docs/design/mxfp4.md). Its logits bytes do not depend on the split (CTAs of 1-256 blocks, FP8 and
// MXFP4), which the GPU tests check.
PagedMqaLogitsConfig PagedMqaLogitsConfig::resolved() const {
  PagedMqaLogitsConfig c = *this;
  if (c.variant == PagedMqaLogitsVariant::automatic)
    c.variant =
        sm90_builds(c) && !portable_forced_by_environment() ? PagedMqaLogitsVariant::sm90 : PagedMqaLogitsVariant::portable;
  return c;
}

PagedMqaLogitsConfig PagedMqaLogitsConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const auto kv = parts.size() == 10 && parts[8].starts_with("kv-") ? kv_from_name(parts[8].substr(3)) : std::nullopt;
  if (parts.size() != 10 || parts[0] != "paged_mqa_logits" || (parts[1] != "portable" && parts[1] != "sm90") || !kv)
    throw ArgumentError(
        fmt::format("kernel key \"{}\": expected paged_mqa_logits.<portable|sm90>.n<next_n>.h<heads>.d<head_dim>."
                    "bs<block_size>.hist<0|1>.out-<f32|f16|bf16>.kv-<fp8|mxfp4>.<arch>",
                    key));
  PagedMqaLogitsConfig c;
  c.variant = parts[1] == "sm90" ? PagedMqaLogitsVariant::sm90 : PagedMqaLogitsVariant::portable;
  c.next_n = parse_int_after(parts[2], "n", key);
  c.heads = parse_int_after(parts[3], "h", key);
  c.head_dim = parse_int_after(parts[4], "d", key);
  c.block_size = parse_int_after(parts[5], "bs", key);
  const int hist = parse_int_after(parts[6], "hist", key);
  if (hist != 0 && hist != 1) throw ArgumentError(fmt::format("kernel key \"{}\": expected hist0 or hist1", key));
  c.histogram = hist == 1;
  const auto out = parts[7].starts_with("out-") ? logits_from_name(parts[7].substr(4)) : std::nullopt;
  if (!out)
    throw ArgumentError(fmt::format("kernel key \"{}\": expected out-f32, out-f16 or out-bf16, got \"{}\"", key, parts[7]));
  c.logits = *out;
  c.kv = *kv;
  c.arch = Arch::parse(parts[9], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void PagedMqaLogitsConfig::check_supported() const {
  auto fail = [&](std::string_view what, int got) {
    throw ArgumentError(fmt::format("paged_mqa_logits configuration {}: expected {}, got {}", key(), what, got));
  };
  if (next_n < 1 || next_n > 8) fail("next_n in 1..8", next_n);
  if (heads != 16 && heads != 32 && heads != 64) fail("heads in {16, 32, 64}", heads);
  if (head_dim != 64 && head_dim != 128) fail("head_dim in {64, 128}", head_dim);
  if (block_size != 64) fail("block_size 64", block_size);
  if (logits != LogitsDType::f32 && logits != LogitsDType::f16 && logits != LogitsDType::bf16)
    fail("logits f32, f16 or bf16", static_cast<int>(logits));
  if (arch.major < 8) fail("an arch of sm_80 or newer", arch.major * 10 + arch.minor);
  if (variant == PagedMqaLogitsVariant::automatic)
    throw ArgumentError(fmt::format("paged_mqa_logits configuration {}: the variant must be resolved (resolved())", key()));
  if (variant == PagedMqaLogitsVariant::sm90) {
    if (!arch.is_sm90a())
      throw ArgumentError(
          fmt::format("paged_mqa_logits configuration {}: the sm90 kernel needs sm_90a (H100/H200), got {}", key(), arch.name()));
    if (next_n > kernels::kSm90MaxNextN) fail("next_n in 1..6 for the sm90 kernel", next_n);
  }
  if (kv == KvFormat::mxfp4 && !mxfp4_supported(next_n, heads, head_dim, variant == PagedMqaLogitsVariant::sm90))
    throw ArgumentError(
        fmt::format("paged_mqa_logits configuration {}: the MXFP4 cache is built for next_n 1..4 (1..6 on the sm90 kernel, "
                    "sm_90a), heads 32 or 64 and head_dim 128",
                    key()));
  if (kv != KvFormat::fp8 && kv != KvFormat::mxfp4) fail("kv fp8 or mxfp4", static_cast<int>(kv));
}

void check_paged_mqa_logits_fields(const PagedMqaLogitsConfig& config) {
  PagedMqaLogitsConfig c = config;
  c.arch = Arch{9, 0, true};
  if (config.variant != PagedMqaLogitsVariant::portable) {
    c.variant = PagedMqaLogitsVariant::sm90;
    try {
      return c.check_supported();
    } catch (const ArgumentError&) {  // named by the portable kernel's check below
    }
  }
  c.variant = PagedMqaLogitsVariant::portable;
  c.check_supported();
}

std::vector<PagedMqaLogitsConfig> supported_paged_mqa_logits_configs(const Arch& arch) {
  std::vector<PagedMqaLogitsConfig> configs;
  for (int next_n = 1; next_n <= 8; ++next_n)
    for (int heads : {16, 32, 64})
      for (int head_dim : {64, 128})
        for (bool histogram : {false, true})
          for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) {
            configs.push_back({next_n, heads, head_dim, 64, histogram, logits, arch, PagedMqaLogitsVariant::portable});
            // A configuration past one wgmma tile runs a smaller kernel's rows, listed once as itself.
            const PagedMqaLogitsConfig sm90{next_n, heads, head_dim, 64, histogram, logits, arch, PagedMqaLogitsVariant::sm90};
            const bool own_sm90 = kernels::sm90_n_wide(next_n, heads);
            if (own_sm90 && sm90_builds(sm90)) configs.push_back(sm90);
            if (mxfp4_supported(next_n, heads, head_dim, false))
              configs.push_back(
                  {next_n, heads, head_dim, 64, histogram, logits, arch, PagedMqaLogitsVariant::portable, KvFormat::mxfp4});
            PagedMqaLogitsConfig sm90_mxfp4 = sm90;
            sm90_mxfp4.kv = KvFormat::mxfp4;
            if (own_sm90 && sm90_builds(sm90_mxfp4)) configs.push_back(sm90_mxfp4);
          }
  return configs;
}

KernelSpec paged_mqa_logits_kernel_spec(const PagedMqaLogitsConfig& config) {
  PagedMqaLogitsConfig c = config.resolved();
  c.check_supported();
  // Past one wgmma tile the call runs as groups of rows of a smaller kernel (prepare_paged_mqa_logits).
  if (c.variant == PagedMqaLogitsVariant::sm90 && !kernels::sm90_n_wide(c.next_n, c.heads))
    c.next_n = kernels::sm90_group_rows(c.next_n);
  const bool sm90 = c.variant == PagedMqaLogitsVariant::sm90;
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.variant = static_cast<int>(c.variant);
  if (sm90) {
    const bool mxfp4 = c.kv == KvFormat::mxfp4;
    const kernels::Sm90PagedForm form = kernels::sm90_paged_form(c.next_n, c.heads, mxfp4);
    spec.threads = static_cast<unsigned>(form.threads);
    const bool ranges = form.has_ranges;  // a ranges form besides the common kernel
    spec.smem_bytes = static_cast<unsigned>(kernels::sm90_layout(c.next_n, c.heads, c.head_dim, c.histogram, 0, mxfp4).bytes);
    spec.source = fmt::format(
        "// {key}\n"
        "#include \"{header}.cuh\"\n"
        "extern \"C\" __global__ void __launch_bounds__({threads}, {ctas}) {entry}(const __grid_constant__ "
        "flash_indexer::kernels::PagedMqaLogitsSm90Params p) {{\n"
        "  flash_indexer::kernels::{function}<{n}, {h}, {d}, {hist}, flash_indexer::kernels::LogitsOut::{out}{mxfp4}>(p);\n"
        "}}\n",
        fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry), fmt::arg("n", c.next_n),
        fmt::arg("h", c.heads), fmt::arg("d", c.head_dim), fmt::arg("hist", c.histogram ? "true" : "false"),
        fmt::arg("out", logits_name(c.logits)), fmt::arg("mxfp4", mxfp4 ? ", true" : ""),
        fmt::arg("function", ranges ? "paged_mqa_logits_sm90_direct" : "paged_mqa_logits_sm90"),
        fmt::arg("header", ranges ? "paged_mqa_logits_sm90_ranges" : "paged_mqa_logits_sm90"),
        // Two CTAs per SM up to N = 64 (at most 80 registers): ptxas stays there by itself for FP8, not
        // with the MXFP4 conversion in the consumers, so it is told.
        fmt::arg("ctas", mxfp4 && c.next_n * c.heads <= 64 ? 2 : 1));
  } else {
    spec.threads = kernels::kPortableThreads;
    spec.smem_bytes = static_cast<unsigned>(kernels::portable_smem_bytes(c.heads, c.head_dim, c.block_size));
    spec.source = fmt::format(
        "// {key}\n"
        "#include \"paged_mqa_logits_portable.cuh\"\n"
        "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}(const flash_indexer::kernels::PagedMqaLogitsParams p) "
        "{{\n"
        "  flash_indexer::kernels::paged_mqa_logits_portable<{n}, {h}, {d}, {bs}, {hist}, "
        "flash_indexer::kernels::LogitsOut::{out}{mxfp4}>(p);\n"
        "}}\n",
        fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry), fmt::arg("n", c.next_n),
        fmt::arg("h", c.heads), fmt::arg("d", c.head_dim), fmt::arg("bs", c.block_size),
        fmt::arg("hist", c.histogram ? "true" : "false"), fmt::arg("out", logits_name(c.logits)),
        fmt::arg("mxfp4", c.kv == KvFormat::mxfp4 ? ", true" : ""));
  }
  spec.config = {{"kind", "paged_mqa_logits"}, {"variant", variant_name(c.variant)},
                 {"next_n", c.next_n},         {"heads", c.heads},
                 {"head_dim", c.head_dim},     {"block_size", c.block_size},
                 {"histogram", c.histogram},   {"logits", logits_name(c.logits)},
                 {"kv", kv_name(c.kv)},        {"arch", c.arch.name()}};
  return spec;
}

}  // namespace flash_indexer
