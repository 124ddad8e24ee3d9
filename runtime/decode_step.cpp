// The one-pass decode step: configuration keys, codegen, launch.
#include "decode_step.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/reference.hpp"
#include "kernel_key.hpp"

namespace flash_indexer {
namespace {

struct ConfigHash {
  std::size_t operator()(const DecodeStepConfig& c) const {
    return (((static_cast<std::size_t>(c.next_n) * 131 + c.heads) * 131 + c.head_dim) * 7 +
            static_cast<std::size_t>(c.logits) * 2 + (c.kv == KvFormat::mxfp4 ? 1 : 0)) *
               2 +
           static_cast<std::size_t>(c.form);
  }
};

KernelRegistry<DecodeStepConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<DecodeStepConfig, ConfigHash>();  // never destroyed, as every registry
  return *r;
}

const LoadedKernel& loaded_kernel(std::string_view op, const DecodeStepConfig& config, CUstream stream) {
  return registry().get_for_current_device(op, config, stream,
                                           [](const DecodeStepConfig& c) { return decode_step_kernel_spec(c); });
}

// Each grid form's name in kernel keys and its enumerator in the generated source.
struct StepFormNames {
  kernels::StepForm form;
  std::string_view key, enumerator;
};
constexpr StepFormNames kStepForms[] = {{kernels::StepForm::last_cta, "last", "last_cta"},
                                        {kernels::StepForm::spread, "spread", "spread"}};

static_assert(kStepForms[static_cast<int>(kernels::StepForm::last_cta)].form == kernels::StepForm::last_cta &&
                  kStepForms[static_cast<int>(kernels::StepForm::spread)].form == kernels::StepForm::spread,
              "indexed by the form's value");
const StepFormNames& names_of(kernels::StepForm f) { return kStepForms[static_cast<int>(f)]; }
std::string_view form_name(kernels::StepForm f) { return names_of(f).key; }

std::optional<kernels::StepForm> form_from_name(std::string_view name) {
  for (const StepFormNames& n : kStepForms)
    if (n.key == name) return n.form;
  return std::nullopt;
}

// The dynamic shared memory of a launch: the logits kernel's layout, or the selection's for the width
// if that is larger.
int step_smem_bytes(const DecodeStepConfig& c, int width) {
  const int layout = kernels::sm90_layout(c.next_n, c.heads, c.head_dim, true, 0, c.kv == KvFormat::mxfp4).bytes;
  return std::max(layout, kernels::decode_step_select_bytes(width));
}

// The lowest key in [kMinKey, kMaxKey] (TopkInput's order-preserving key of the stored dtype,
// kernels/topk_common.cuh) whose value has a coarse bin <= b, for every bin b: what the device's
// lowest_key_of_bins_to finds, by the same definition (the key-to-bin map is monotone).
std::array<unsigned int, kCoarseBins> make_coarse_lowest_keys(LogitsDType dtype) {
  const bool f32 = dtype == LogitsDType::f32;
  const unsigned int infinity = dtype == LogitsDType::f16 ? 0x7c00u : 0x7f80u;
  const unsigned int min_key = f32 ? 0x007fffffu : ~(infinity | 0x8000u) & 0xffffu;
  const unsigned int max_key = f32 ? 0xff800000u : (infinity | 0x8000u);
  const auto bin_of_key = [&](unsigned int k) {
    if (f32) return coarse_bin(float_from_bits((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k));
    const auto h = static_cast<std::uint16_t>(((k & 0x8000u) ? (k ^ 0x8000u) : ~k) & 0xffffu);
    return coarse_bin(dtype == LogitsDType::f16 ? reference::f16_bits_to_float(h) : reference::bf16_bits_to_float(h));
  };
  std::array<unsigned int, kCoarseBins> keys{};
  for (int b = 0; b < kCoarseBins; ++b) {
    unsigned long long lo = min_key, hi = max_key;  // bin(max_key) = 0 <= b
    while (lo < hi) {
      const unsigned long long mid = (lo + hi) / 2;
      if (bin_of_key(static_cast<unsigned int>(mid)) <= b) hi = mid;
      else lo = mid + 1;
    }
    keys[b] = static_cast<unsigned int>(lo);
  }
  return keys;
}

static_assert(sizeof(kernels::DecodeStepParams::coarse_lowest_key) == kCoarseBins * 4, "one key per coarse bin");

}  // namespace

const std::array<unsigned int, kCoarseBins>& decode_step_coarse_lowest_keys(LogitsDType dtype) {
  static const std::array<unsigned int, kCoarseBins> f32 = make_coarse_lowest_keys(LogitsDType::f32);
  static const std::array<unsigned int, kCoarseBins> f16 = make_coarse_lowest_keys(LogitsDType::f16);
  static const std::array<unsigned int, kCoarseBins> bf16 = make_coarse_lowest_keys(LogitsDType::bf16);
  return dtype == LogitsDType::f32 ? f32 : dtype == LogitsDType::f16 ? f16 : bf16;
}

std::string DecodeStepConfig::key() const {
  return fmt::format("decode_step.sm90.n{}.h{}.d{}.out-{}.kv-{}.{}.{}", next_n, heads, head_dim, logits_name(logits), kv_name(kv),
                     form_name(form), arch.name());
}

DecodeStepConfig DecodeStepConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const bool sized = parts.size() == 9;
  const auto out = sized && parts[5].starts_with("out-") ? logits_from_name(parts[5].substr(4)) : std::nullopt;
  const auto kv = sized && parts[6].starts_with("kv-") ? kv_from_name(parts[6].substr(3)) : std::nullopt;
  const auto form = sized ? form_from_name(parts[7]) : std::nullopt;
  if (!sized || parts[0] != "decode_step" || parts[1] != "sm90" || !out || !kv || !form)
    throw ArgumentError(
        fmt::format("kernel key \"{}\": expected "
                    "decode_step.sm90.n<next_n>.h<heads>.d<head_dim>.out-<f32|f16|bf16>.kv-<fp8|mxfp4>.<last|spread>.<arch>",
                    key));
  DecodeStepConfig c;
  c.next_n = parse_int_after(parts[2], "n", key);
  c.heads = parse_int_after(parts[3], "h", key);
  c.head_dim = parse_int_after(parts[4], "d", key);
  c.logits = *out;
  c.kv = *kv;
  c.form = *form;
  c.arch = Arch::parse(parts[8], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

bool decode_step_builds(int next_n, int heads, int head_dim, KvFormat kv, const Arch& arch) {
  return arch.is_sm90a() && next_n >= 1 && next_n <= kStepMaxNextN && (heads == 32 || heads == 64) && head_dim == 128 &&
         (kv == KvFormat::fp8 || kv == KvFormat::mxfp4);
}

void DecodeStepConfig::check_supported() const {
  if (!decode_step_builds(next_n, heads, head_dim, kv, arch))
    throw ArgumentError(
        fmt::format("decode_step configuration {}: expected sm_90a, next_n 1..4, heads 32 or 64, head_dim 128", key()));
}

std::vector<DecodeStepConfig> supported_decode_step_configs(const Arch& arch) {
  std::vector<DecodeStepConfig> configs;
  if (!arch.is_sm90a()) return configs;
  for (int next_n = 1; next_n <= kStepMaxNextN; ++next_n)
    for (int heads : {32, 64})
      for (KvFormat kv : {KvFormat::fp8, KvFormat::mxfp4})
        for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
          for (kernels::StepForm form : {kernels::StepForm::last_cta, kernels::StepForm::spread})
            configs.push_back({next_n, heads, 128, logits, kv, form, arch});
  return configs;
}

KernelSpec decode_step_kernel_spec(const DecodeStepConfig& c) {
  c.check_supported();
  const bool mxfp4 = c.kv == KvFormat::mxfp4;
  const kernels::Sm90PagedForm form = kernels::sm90_paged_form(c.next_n, c.heads, mxfp4);
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = static_cast<unsigned>(form.threads);
  spec.smem_bytes = static_cast<unsigned>(step_smem_bytes(c, kernels::kStepMaxWidth));
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"decode_step.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}, {ctas}) {entry}(const __grid_constant__ "
      "flash_indexer::kernels::DecodeStepParams s) {{\n"
      "  flash_indexer::kernels::decode_step_sm90<{n}, {h}, {d}, flash_indexer::kernels::LogitsOut::{out}, {mxfp4}, "
      "flash_indexer::kernels::StepForm::{form}>(s);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry), fmt::arg("n", c.next_n),
      fmt::arg("h", c.heads), fmt::arg("d", c.head_dim), fmt::arg("out", logits_name(c.logits)),
      fmt::arg("mxfp4", mxfp4 ? "true" : "false"), fmt::arg("form", names_of(c.form).enumerator),
      // Two CTAs per SM wherever the logits kernel has them (N <= 64), so that the selection's code
      // cannot cost the logits their occupancy.
      fmt::arg("ctas", form.consumer_n <= 64 ? 2 : 1));
  spec.config = {{"kind", "decode_step"},           {"next_n", c.next_n},  {"heads", c.heads},          {"head_dim", c.head_dim},
                 {"logits", logits_name(c.logits)}, {"kv", kv_name(c.kv)}, {"form", form_name(c.form)}, {"arch", c.arch.name()}};
  return spec;
}

DecodeStepLaunch prepare_decode_step(std::string_view op, const PagedMqaLogitsCall& logits, const kernels::TopkParams& topk,
                                     const DecodeStepScratch& scratch, CUstream stream) {
  const PagedMqaLogitsLaunch grid = prepare_paged_mqa_logits(op, logits, stream, true, false);
  if (!grid.sm90 || logits.params.histogram == nullptr || topk.width > kernels::kStepMaxWidth)
    throw Error(fmt::format("{}: the one-pass step does not apply to this call (the plan checks its shapes first)", op));
  DecodeStepConfig c{grid.sm90_params.p.rows_per_request > 1 ? 1 : logits.config.next_n,
                     logits.config.heads,
                     logits.config.head_dim,
                     logits.config.logits,
                     logits.config.kv,
                     kernels::StepForm::spread,
                     Arch{}};
  DecodeStepLaunch launch;
  launch.params.logits = grid.sm90_params;
  launch.params.topk = topk;
  launch.params.arrivals = scratch.arrivals;
  launch.params.width_blocks = static_cast<int>(logits.width_blocks);
  launch.grid_x = grid.grid_x;
  launch.grid_y = grid.grid_y;
  // The spread form where every CTA is resident at once (its CTAs wait for their row's others), the
  // scratch holds the rows and the bitmaps hold a CTA's words of each of its query rows; else the
  // last-CTA form.
  const std::int64_t ctas = static_cast<std::int64_t>(grid.grid_x) * grid.grid_y;
  const std::int64_t rows = static_cast<std::int64_t>(grid.grid_y) * c.next_n;
  const bool spread_fits = scratch.spread != nullptr && rows <= scratch.spread_rows && topk.width % 64 == 0 &&
                           grid.grid_x <= kernels::decode_step_spread_slots(topk.width) &&
                           static_cast<std::int64_t>(c.next_n) * grid.sm90_params.blocks_per_split <= (topk.width + 63) / 64;
  launch.kernel = spread_fits ? &loaded_kernel(op, c, stream) : nullptr;
  if (launch.kernel == nullptr || ctas > static_cast<std::int64_t>(launch.kernel->multiprocessors) * launch.kernel->ctas_per_sm) {
    c.form = kernels::StepForm::last_cta;
    launch.kernel = &loaded_kernel(op, c, stream);
  }
  launch.form = c.form;
  if (launch.form == kernels::StepForm::spread) {
    auto* base = static_cast<unsigned char*>(scratch.spread);
    launch.params.filtered = scratch.filtered;
    launch.params.spread_candidates_count = scratch.candidates_count;
    launch.params.spread_list = static_cast<int>(kernels::decode_step_spread_list(topk.width));
    launch.params.spread_slots = static_cast<int>(kernels::decode_step_spread_slots(topk.width));
    // The candidates of every row, then the counts of every row: decode_step_spread_row_bytes(width) per row.
    launch.params.spread_candidates = reinterpret_cast<unsigned long long*>(base);
    launch.params.spread_counts =
        reinterpret_cast<unsigned long long*>(base + scratch.spread_rows * launch.params.spread_list * 8);
    static_assert(kernels::decode_step_spread_row_bytes(64) == 64 * 8 + 8, "the layout above");
  }
  launch.smem_bytes = step_smem_bytes(c, topk.width);
  const auto& keys = decode_step_coarse_lowest_keys(c.logits);
  std::copy(keys.begin(), keys.end(), launch.params.coarse_lowest_key);
  return launch;
}

void enqueue(const DecodeStepLaunch& launch, CUstream stream) {
  kernels::DecodeStepParams params = launch.params;
  void* args[] = {&params};
  launch_kernel(*launch.kernel, launch.grid_x, launch.grid_y, 1, stream, args, false, launch.smem_bytes,
                launch.form == kernels::StepForm::spread);
}

void warm_decode_step(int next_n, int heads, int head_dim, LogitsDType logits, KvFormat kv) {
  const bool flattens = kernels::sm90_paged_form(next_n, heads, kv == KvFormat::mxfp4).flatten_max_row_blocks > 0;
  for (int n : {next_n, 1}) {
    if (n != next_n && !flattens) continue;
    for (kernels::StepForm form : {kernels::StepForm::last_cta, kernels::StepForm::spread})
      loaded_kernel("warm_decode_step", {n, heads, head_dim, logits, kv, form, Arch{}}, nullptr);
  }
}

}  // namespace flash_indexer
