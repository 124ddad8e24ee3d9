// Paged MQA logits: configuration keys, codegen, argument validation and the launch.
#include "flash_indexer/paged_mqa_logits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <climits>

#include "../kernels/paged_mqa_logits_params.cuh"
#include "driver.hpp"
#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "kernel_registry.hpp"
#include "paged_mqa_logits_kernel.hpp"
#include "tensor_checks.hpp"

namespace flash_indexer {
namespace {

constexpr std::string_view kOp = "paged_mqa_logits";

// The hot-path registry key: the configuration without the arch (the context determines it).
struct ConfigHash {
  std::size_t operator()(const PagedMqaLogitsConfig& c) const {
    return (((((static_cast<std::size_t>(c.next_n) * 131 + c.heads) * 131 + c.head_dim) * 131 + c.block_size) * 7 +
            static_cast<std::size_t>(c.logits)) * 2 + c.histogram) * 3 + static_cast<std::size_t>(c.variant);
  }
};

KernelRegistry<PagedMqaLogitsConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<PagedMqaLogitsConfig, ConfigHash>();  // never destroyed: see its comment
  return *r;
}

// The registry keys the requested variant (automatic included); the spec resolves it for the device and
// rejects a forced sm90 that does not fit it.
const LoadedKernel& loaded_kernel(const PagedMqaLogitsConfig& config, CUstream stream) {
  return registry().get_for_current_device(
      kOp, config, stream, [](const PagedMqaLogitsConfig& c) { return paged_mqa_logits_kernel_spec(c); });
}

struct Launch {
  PagedMqaLogitsConfig config;
  kernels::PagedMqaLogitsParams params{};
  unsigned grid_x = 0;
  unsigned grid_y = 0;
};

// Every argument check of the op, in one place.
Launch validate(const TensorView& q, const TensorView& kv_cache, const TensorView& weights,
                const TensorView& context_lens, const TensorView& block_table, const TensorView& logits,
                const PagedMqaLogitsOptions& options) {
  Launch l;
  TensorChecks qc(kOp, "q", q);
  qc.dtype({DType::fp8_e4m3}).rank({4}).contiguous().not_null().aligned(16);
  const std::int64_t batch = q.shape[0];
  l.config.next_n = static_cast<int>(q.shape[1]);
  l.config.heads = static_cast<int>(q.shape[2]);
  l.config.head_dim = static_cast<int>(q.shape[3]);
  if (batch < 0 || batch > 65535) qc.fail("batch size q.shape[0] in 0..65535", std::to_string(batch));
  if (q.shape[1] < 1 || q.shape[1] > 8) qc.fail("next_n = q.shape[1] in 1..8", std::to_string(q.shape[1]));
  if (q.shape[2] != 16 && q.shape[2] != 32 && q.shape[2] != 64)
    qc.fail("heads = q.shape[2] in {16, 32, 64}", std::to_string(q.shape[2]));
  if (q.shape[3] != 64 && q.shape[3] != 128) qc.fail("head_dim = q.shape[3] in {64, 128}", std::to_string(q.shape[3]));
  const std::int64_t next_n = l.config.next_n, heads = l.config.heads, head_dim = l.config.head_dim;
  const std::int64_t rows = batch * next_n;

  TensorChecks kc(kOp, "kv_cache", kv_cache);
  kc.dtype({DType::u8, DType::fp8_e4m3}).rank({4}).not_null().aligned(16);
  if (kv_cache.shape[1] != 64) kc.fail("block_size = kv_cache.shape[1] = 64", std::to_string(kv_cache.shape[1]));
  l.config.block_size = 64;
  const std::int64_t token_bytes = head_dim + 4;
  kc.dim(2, 1, "one KV head").dim(3, token_bytes, "head_dim FP8 bytes + one FP32 scale per token");
  kc.stride(3, 1).stride(2, token_bytes).stride(1, token_bytes);
  const std::int64_t num_blocks = kv_cache.shape[0], block_stride = kv_cache.strides[0];
  if (num_blocks < 0 || num_blocks > INT_MAX) kc.fail("num_blocks in 0..2^31-1", std::to_string(num_blocks));
  if (num_blocks > 1 && (block_stride < 64 * token_bytes || block_stride % 16 != 0))
    kc.fail(fmt::format("a block stride >= {} bytes and a multiple of 16", 64 * token_bytes), std::to_string(block_stride));

  TensorChecks wc(kOp, "weights", weights);
  wc.dtype({DType::f32}).rank({2}).dim(0, rows, "B * next_n").dim(1, heads, "heads").contiguous().not_null().aligned(4);

  TensorChecks lc(kOp, "context_lens", context_lens);
  lc.dtype({DType::i32}).rank({1, 2}).dim(0, batch, "B").contiguous().not_null().aligned(4);
  if (context_lens.rank == 2) lc.dim(1, next_n, "next_n");

  TensorChecks bc(kOp, "block_table", block_table);
  bc.dtype({DType::i32}).rank({2}).dim(0, batch, "B").stride(1, 1).not_null().aligned(4);
  const std::int64_t max_blocks = block_table.shape[1];
  if (max_blocks < 0 || max_blocks > INT_MAX) bc.fail("max_blocks in 0..2^31-1", std::to_string(max_blocks));
  if (batch > 1 && block_table.strides[0] < max_blocks)
    bc.fail(fmt::format("a row stride >= max_blocks = {}", max_blocks), std::to_string(block_table.strides[0]));

  TensorChecks oc(kOp, "logits", logits);
  oc.dtype({DType::f32, DType::f16, DType::bf16}).rank({2}).dim(0, rows, "B * next_n").stride(1, 1).not_null().aligned(16);
  const std::int64_t width = logits.shape[1];
  if (width < 0 || width > INT_MAX - 64) oc.fail("a width in 0..2^31-65", std::to_string(width));
  if (rows > 1 && logits.strides[0] < width)
    oc.fail(fmt::format("a row stride >= width = {}", width), std::to_string(logits.strides[0]));
  l.config.logits = logits_dtype_of(logits.dtype);

  const TensorView& histogram = options.histogram;
  l.config.histogram = histogram.rank != 0;
  if (l.config.histogram) {
    TensorChecks hc(kOp, "histogram", histogram);
    hc.dtype({DType::i32}).rank({2}).dim(0, rows, "B * next_n").dim(1, kCoarseBins, "coarse bins").contiguous().not_null().aligned(8);
  }

  auto& p = l.params;
  p.q = static_cast<const unsigned char*>(q.data);
  p.kv_cache = static_cast<const unsigned char*>(kv_cache.data);
  p.weights = static_cast<const float*>(weights.data);
  p.context_lens = static_cast<const int*>(context_lens.data);
  p.block_table = static_cast<const int*>(block_table.data);
  p.logits = logits.data;
  p.histogram = static_cast<int*>(histogram.data);
  p.kv_block_stride = block_stride;
  p.block_table_stride = block_table.strides[0];
  p.logits_stride = logits.strides[0];
  p.batch = static_cast<int>(batch);
  p.num_blocks = static_cast<int>(num_blocks);
  p.max_blocks = static_cast<int>(max_blocks);
  p.width = static_cast<int>(width);
  p.lens_2d = context_lens.rank == 2;
  p.fill_masked = options.fill_masked;
  l.config.variant = options.variant;
  l.grid_x = static_cast<unsigned>((width + l.config.block_size - 1) / l.config.block_size);
  l.grid_y = static_cast<unsigned>(batch);
  return l;
}

}  // namespace

const char* variant_name(PagedMqaLogitsVariant v) {
  switch (v) {
    case PagedMqaLogitsVariant::automatic: return "auto";
    case PagedMqaLogitsVariant::portable: return "portable";
    case PagedMqaLogitsVariant::sm90: return "sm90";
  }
  return "?";
}

std::string PagedMqaLogitsConfig::key() const {
  return fmt::format("paged_mqa_logits.{}.n{}.h{}.d{}.bs{}.hist{}.out-{}.kv-fp8.{}", variant_name(variant), next_n, heads,
                     head_dim, block_size, histogram ? 1 : 0, logits_name(logits), arch.name());
}

namespace {
bool portable_forced_by_environment() {
  static const bool forced = [] {
    const char* v = std::getenv("FLASH_INDEXER_KERNEL");
    return v != nullptr && std::string_view(v) == "portable";
  }();
  return forced;
}
bool sm90_applies(const PagedMqaLogitsConfig& c) {
  return c.arch.major == 9 && c.arch.minor == 0 && c.arch.arch_specific && c.next_n <= kernels::kSm90MaxNextN;
}
}  // namespace

PagedMqaLogitsConfig PagedMqaLogitsConfig::resolved() const {
  PagedMqaLogitsConfig c = *this;
  if (c.variant == PagedMqaLogitsVariant::automatic)
    c.variant = sm90_applies(c) && !portable_forced_by_environment() ? PagedMqaLogitsVariant::sm90
                                                                     : PagedMqaLogitsVariant::portable;
  return c;
}

PagedMqaLogitsConfig PagedMqaLogitsConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  if (parts.size() != 10 || parts[0] != "paged_mqa_logits" || (parts[1] != "portable" && parts[1] != "sm90") ||
      parts[8] != "kv-fp8")
    throw Error(fmt::format("kernel key \"{}\": expected paged_mqa_logits.<portable|sm90>.n<next_n>.h<heads>.d<head_dim>."
                            "bs<block_size>.hist<0|1>.out-<f32|f16|bf16>.kv-fp8.<arch>",
                            key));
  PagedMqaLogitsConfig c;
  c.variant = parts[1] == "sm90" ? PagedMqaLogitsVariant::sm90 : PagedMqaLogitsVariant::portable;
  c.next_n = parse_int_after(parts[2], "n", key);
  c.heads = parse_int_after(parts[3], "h", key);
  c.head_dim = parse_int_after(parts[4], "d", key);
  c.block_size = parse_int_after(parts[5], "bs", key);
  const int hist = parse_int_after(parts[6], "hist", key);
  if (hist != 0 && hist != 1) throw Error(fmt::format("kernel key \"{}\": expected hist0 or hist1", key));
  c.histogram = hist == 1;
  const auto out = parts[7].starts_with("out-") ? logits_from_name(parts[7].substr(4)) : std::nullopt;
  if (!out) throw Error(fmt::format("kernel key \"{}\": expected out-f32, out-f16 or out-bf16, got \"{}\"", key, parts[7]));
  c.logits = *out;
  c.arch = Arch::parse(parts[9], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void PagedMqaLogitsConfig::check_supported() const {
  auto fail = [&](std::string_view what, int got) {
    throw Error(fmt::format("paged_mqa_logits configuration {}: expected {}, got {}", key(), what, got));
  };
  if (next_n < 1 || next_n > 8) fail("next_n in 1..8", next_n);
  if (heads != 16 && heads != 32 && heads != 64) fail("heads in {16, 32, 64}", heads);
  if (head_dim != 64 && head_dim != 128) fail("head_dim in {64, 128}", head_dim);
  if (block_size != 64) fail("block_size 64", block_size);
  if (arch.major < 8) fail("an arch of sm_80 or newer", arch.major * 10 + arch.minor);
  if (variant == PagedMqaLogitsVariant::automatic)
    throw Error(fmt::format("paged_mqa_logits configuration {}: the variant must be resolved (resolved())", key()));
  if (variant == PagedMqaLogitsVariant::sm90) {
    if (!(arch.major == 9 && arch.minor == 0 && arch.arch_specific))
      throw Error(fmt::format("paged_mqa_logits configuration {}: the sm90 kernel needs sm_90a (H100/H200), got {}",
                              key(), arch.name()));
    if (next_n > kernels::kSm90MaxNextN) fail("next_n in 1..4 for the sm90 kernel", next_n);
  }
}

std::vector<PagedMqaLogitsConfig> supported_paged_mqa_logits_configs(const Arch& arch) {
  std::vector<PagedMqaLogitsConfig> configs;
  for (int next_n = 1; next_n <= 8; ++next_n)
    for (int heads : {16, 32, 64})
      for (int head_dim : {64, 128})
        for (bool histogram : {false, true})
          for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16}) {
            configs.push_back({next_n, heads, head_dim, 64, histogram, logits, arch, PagedMqaLogitsVariant::portable});
            const PagedMqaLogitsConfig sm90{next_n, heads, head_dim, 64, histogram, logits, arch, PagedMqaLogitsVariant::sm90};
            if (sm90_applies(sm90)) configs.push_back(sm90);
          }
  return configs;
}

KernelSpec paged_mqa_logits_kernel_spec(const PagedMqaLogitsConfig& config) {
  const PagedMqaLogitsConfig c = config.resolved();
  c.check_supported();
  const bool sm90 = c.variant == PagedMqaLogitsVariant::sm90;
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.variant = static_cast<int>(c.variant);
  if (sm90) {
    spec.threads = kernels::sm90_threads(c.next_n * c.heads);
    spec.smem_bytes = static_cast<unsigned>(kernels::sm90_layout(c.next_n, c.heads, c.head_dim, c.histogram).bytes);
    spec.source = fmt::format(
        "// {key}\n"
        "#include \"paged_mqa_logits_sm90.cuh\"\n"
        "extern \"C\" __global__ void __launch_bounds__({threads}, 1) {entry}(const __grid_constant__ "
        "flash_indexer::kernels::PagedMqaLogitsSm90Params p) {{\n"
        "  flash_indexer::kernels::paged_mqa_logits_sm90<{n}, {h}, {d}, {hist}, flash_indexer::kernels::LogitsOut::{out}>(p);\n"
        "}}\n",
        fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
        fmt::arg("n", c.next_n), fmt::arg("h", c.heads), fmt::arg("d", c.head_dim),
        fmt::arg("hist", c.histogram ? "true" : "false"), fmt::arg("out", logits_name(c.logits)));
  } else {
    spec.threads = kernels::kPortableThreads;
    spec.smem_bytes = static_cast<unsigned>(kernels::portable_smem_bytes(c.heads, c.head_dim, c.block_size));
    spec.source = fmt::format(
        "// {key}\n"
        "#include \"paged_mqa_logits_portable.cuh\"\n"
        "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}(const flash_indexer::kernels::PagedMqaLogitsParams p) {{\n"
        "  flash_indexer::kernels::paged_mqa_logits_portable<{n}, {h}, {d}, {bs}, {hist}, flash_indexer::kernels::LogitsOut::{out}>(p);\n"
        "}}\n",
        fmt::arg("key", spec.key), fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry),
        fmt::arg("n", c.next_n), fmt::arg("h", c.heads), fmt::arg("d", c.head_dim), fmt::arg("bs", c.block_size),
        fmt::arg("hist", c.histogram ? "true" : "false"), fmt::arg("out", logits_name(c.logits)));
  }
  spec.config = {{"kind", "paged_mqa_logits"}, {"variant", variant_name(c.variant)}, {"next_n", c.next_n},
                 {"heads", c.heads},           {"head_dim", c.head_dim},  {"block_size", c.block_size},
                 {"histogram", c.histogram},   {"logits", logits_name(c.logits)}, {"kv", "fp8"},
                 {"arch", c.arch.name()}};
  return spec;
}

namespace {

// TMA maps of the sm90 kernel: the key tiles of the paged cache as {D bytes, 64 tokens, block}, and
// the query rows as {D bytes, B * next_n * H}; swizzled as wide as a row (wgmma's K-major layout).
void encode_tensor_maps(kernels::PagedMqaLogitsSm90Params& sp, const PagedMqaLogitsConfig& c) {
  const auto& p = sp.p;
  const CUtensorMapSwizzle swizzle = c.head_dim == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  {
    const std::int64_t block_stride =
        p.num_blocks > 1 ? p.kv_block_stride : (64 * (c.head_dim + 4) + 15) / 16 * 16;  // one block: any stride
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(c.head_dim), 64,
                                static_cast<cuuint64_t>(std::max(p.num_blocks, 1))};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(c.head_dim), static_cast<cuuint64_t>(block_stride)};
    const cuuint32_t box[3] = {static_cast<cuuint32_t>(c.head_dim), 64, 1};
    FI_CU(cuTensorMapEncodeTiled, "paged_mqa_logits: kv_cache tensor map", reinterpret_cast<CUtensorMap*>(&sp.kv_map),
          CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<unsigned char*>(p.kv_cache), dims, strides, box, elem_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  {
    const int n = c.next_n * c.heads;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(c.head_dim), static_cast<cuuint64_t>(p.batch) * n};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(c.head_dim)};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(c.head_dim), static_cast<cuuint32_t>(n)};
    FI_CU(cuTensorMapEncodeTiled, "paged_mqa_logits: q tensor map", reinterpret_cast<CUtensorMap*>(&sp.q_map),
          CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<unsigned char*>(p.q), dims, strides, box, elem_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
}

}  // namespace

void paged_mqa_logits(const TensorView& q, const TensorView& kv_cache, const TensorView& weights,
                      const TensorView& context_lens, const TensorView& block_table, const TensorView& logits,
                      Stream stream, const PagedMqaLogitsOptions& options) {
  Launch l = validate(q, kv_cache, weights, context_lens, block_table, logits, options);
  if (l.grid_x == 0 || l.grid_y == 0) return;  // nothing to write
  const LoadedKernel& kernel = loaded_kernel(l.config, stream);
  if (kernel.variant != static_cast<int>(PagedMqaLogitsVariant::sm90)) {
    void* args[] = {&l.params};
    launch_kernel(kernel, l.grid_x, l.grid_y, 1, stream, args);
    return;
  }
  // Splits of a request: enough CTAs for two per SM over the widest possible batch (the lengths live
  // on the device; the grid depends only on shapes, so a captured launch stays valid).
  kernels::PagedMqaLogitsSm90Params sp{};
  sp.p = l.params;
  PagedMqaLogitsConfig resolved = l.config;
  resolved.variant = PagedMqaLogitsVariant::sm90;
  encode_tensor_maps(sp, resolved);
  const std::int64_t width_blocks = l.grid_x;
  const std::int64_t total = width_blocks * l.grid_y;
  const std::int64_t target_ctas = 2 * static_cast<std::int64_t>(std::max(kernel.multiprocessors, 1));
  sp.blocks_per_split = static_cast<int>(std::clamp<std::int64_t>((total + target_ctas - 1) / target_ctas, 1, 64));
  const auto splits = static_cast<unsigned>((width_blocks + sp.blocks_per_split - 1) / sp.blocks_per_split);
  void* args[] = {&sp};
  launch_kernel(kernel, splits, l.grid_y, 1, stream, args);
}

void warm_paged_mqa_logits(const PagedMqaLogitsConfig& config) { loaded_kernel(config, nullptr); }

}  // namespace flash_indexer
