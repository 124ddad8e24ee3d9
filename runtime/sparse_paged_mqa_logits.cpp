// Sparse paged MQA logits (docs/design/two-level.md): configuration keys, codegen, checks and launch.
#include "flash_indexer/sparse_paged_mqa_logits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "../kernels/sparse_paged_mqa_logits_params.cuh"
#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "kernel_registry.hpp"
#include "paged_mqa_logits_kernel.hpp"
#include "paged_mqa_logits_call.hpp"
#include "sparse_paged_mqa_logits_call.hpp"
#include "sparse_paged_mqa_logits_kernel.hpp"
#include "tensor_checks.hpp"

namespace flash_indexer {

std::string SparsePagedMqaLogitsConfig::key() const {
  return fmt::format("sparse_paged_mqa_logits.{}.h{}.d{}.cb{}.hist{}.out-{}.kv-{}.{}", variant_name(variant), heads, head_dim,
                     candidate_block, histogram ? 1 : 0, logits_name(logits), kv_name(kv), arch.name());
}

// `automatic` takes the sm90 kernel on sm_90a: a wgmma per 64 gathered keys against the portable kernel's
// FP32 dot products on CUDA cores (docs/benchmarks/decode.md, the two-level table).
SparsePagedMqaLogitsConfig SparsePagedMqaLogitsConfig::resolved() const {
  SparsePagedMqaLogitsConfig c = *this;
  if (c.variant == PagedMqaLogitsVariant::automatic)
    c.variant =
        c.arch.is_sm90a() && !portable_forced_by_environment() ? PagedMqaLogitsVariant::sm90 : PagedMqaLogitsVariant::portable;
  return c;
}

SparsePagedMqaLogitsConfig SparsePagedMqaLogitsConfig::parse_key(std::string_view key) {
  const std::vector<std::string_view> parts = split_key(key);
  const auto kv = parts.size() == 9 && parts[7].starts_with("kv-") ? kv_from_name(parts[7].substr(3)) : std::nullopt;
  if (parts.size() != 9 || parts[0] != "sparse_paged_mqa_logits" || (parts[1] != "portable" && parts[1] != "sm90") || !kv)
    throw ArgumentError(
        fmt::format("kernel key \"{}\": expected sparse_paged_mqa_logits.<portable|sm90>.h<heads>.d<head_dim>."
                    "cb<candidate_block>.hist<0|1>.out-<f32|f16|bf16>.kv-<fp8|mxfp4>.<arch>",
                    key));
  SparsePagedMqaLogitsConfig c;
  c.variant = parts[1] == "sm90" ? PagedMqaLogitsVariant::sm90 : PagedMqaLogitsVariant::portable;
  c.heads = parse_int_after(parts[2], "h", key);
  c.head_dim = parse_int_after(parts[3], "d", key);
  c.candidate_block = parse_int_after(parts[4], "cb", key);
  const int hist = parse_int_after(parts[5], "hist", key);
  if (hist != 0 && hist != 1) throw ArgumentError(fmt::format("kernel key \"{}\": expected hist0 or hist1", key));
  c.histogram = hist == 1;
  const auto out = parts[6].starts_with("out-") ? logits_from_name(parts[6].substr(4)) : std::nullopt;
  if (!out)
    throw ArgumentError(fmt::format("kernel key \"{}\": expected out-f32, out-f16 or out-bf16, got \"{}\"", key, parts[6]));
  c.logits = *out;
  c.kv = *kv;
  c.arch = Arch::parse(parts[8], fmt::format("kernel key \"{}\"", key));
  c.check_supported();
  return c;
}

void SparsePagedMqaLogitsConfig::check_supported() const {
  auto fail = [&](std::string_view what, int got) {
    throw ArgumentError(fmt::format("sparse_paged_mqa_logits configuration {}: expected {}, got {}", key(), what, got));
  };
  // The indexers that publish candidate blocks (DeepSeek-V4.1: H 32 or 64, D 128).
  if (heads != 32 && heads != 64) fail("heads 32 or 64", heads);
  if (head_dim != 128) fail("head_dim 128", head_dim);
  if (candidate_block != 8 && candidate_block != 16) fail("candidate_block 8 or 16", candidate_block);
  if (logits != LogitsDType::f32 && logits != LogitsDType::f16 && logits != LogitsDType::bf16)
    fail("logits f32, f16 or bf16", static_cast<int>(logits));
  if (kv != KvFormat::fp8 && kv != KvFormat::mxfp4) fail("kv fp8 or mxfp4", static_cast<int>(kv));
  if (arch.major < 8) fail("an arch of sm_80 or newer", arch.major * 10 + arch.minor);
  if (variant == PagedMqaLogitsVariant::sm90 && !arch.is_sm90a())
    throw ArgumentError(fmt::format("sparse_paged_mqa_logits configuration {}: the sm90 kernel needs sm_90a (H100/H200), got {}",
                                    key(), arch.name()));
  if (variant != PagedMqaLogitsVariant::automatic && variant != PagedMqaLogitsVariant::portable &&
      variant != PagedMqaLogitsVariant::sm90)
    fail("variant automatic, portable or sm90", static_cast<int>(variant));
}

std::vector<SparsePagedMqaLogitsConfig> supported_sparse_paged_mqa_logits_configs(const Arch& arch) {
  std::vector<SparsePagedMqaLogitsConfig> configs;
  for (KvFormat kv : {KvFormat::fp8, KvFormat::mxfp4})
    for (int heads : {32, 64})
      for (int block : {8, 16})
        for (bool histogram : {false, true})
          for (LogitsDType logits : {LogitsDType::f32, LogitsDType::f16, LogitsDType::bf16})
            for (PagedMqaLogitsVariant variant : {PagedMqaLogitsVariant::portable, PagedMqaLogitsVariant::sm90})
              if (variant == PagedMqaLogitsVariant::portable || arch.is_sm90a())
                configs.push_back({heads, 128, block, histogram, logits, kv, arch, variant});
  return configs;
}

KernelSpec sparse_paged_mqa_logits_kernel_spec(const SparsePagedMqaLogitsConfig& config) {
  const SparsePagedMqaLogitsConfig c = config.resolved();
  c.check_supported();
  const bool sm90 = c.variant == PagedMqaLogitsVariant::sm90;
  KernelSpec spec;
  spec.key = c.key();
  spec.arch = c.arch;
  spec.entry = kernel_entry_name(spec.key);
  spec.threads = sm90 ? kernels::kSparseSm90Threads : kernels::kSparsePortableThreads;
  spec.smem_bytes = static_cast<unsigned>(
      sm90 ? kernels::sparse_sm90_layout(c.heads, c.head_dim, c.candidate_block, c.histogram, c.kv == KvFormat::mxfp4).bytes
           : kernels::sparse_portable_smem_bytes(c.heads, c.head_dim));
  spec.source = fmt::format(
      "// {key}\n"
      "#include \"sparse_paged_mqa_logits_{variant}.cuh\"\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}(const "
      "{params} "
      "p) {{\n"
      "  flash_indexer::kernels::sparse_paged_mqa_logits_{variant}<{h}, {d}, {cb}, {hist}, "
      "flash_indexer::kernels::LogitsOut::{out}{mxfp4}>(p);\n"
      "}}\n",
      fmt::arg("key", spec.key), fmt::arg("variant", variant_name(c.variant)),
      // The sm90 kernel's TMA map is read in place from parameter space (__grid_constant__), not copied.
      fmt::arg("params", sm90 ? "__grid_constant__ flash_indexer::kernels::SparsePagedMqaLogitsSm90Params"
                              : "flash_indexer::kernels::SparsePagedMqaLogitsParams"),
      fmt::arg("threads", spec.threads), fmt::arg("entry", spec.entry), fmt::arg("h", c.heads), fmt::arg("d", c.head_dim),
      fmt::arg("cb", c.candidate_block), fmt::arg("hist", c.histogram ? "true" : "false"), fmt::arg("out", logits_name(c.logits)),
      fmt::arg("mxfp4", c.kv == KvFormat::mxfp4 ? ", true" : ""));
  spec.variant = static_cast<int>(c.variant);
  spec.config = {{"kind", "sparse_paged_mqa_logits"},
                 {"variant", variant_name(c.variant)},
                 {"heads", c.heads},
                 {"head_dim", c.head_dim},
                 {"candidate_block", c.candidate_block},
                 {"histogram", c.histogram},
                 {"logits", logits_name(c.logits)},
                 {"kv", kv_name(c.kv)},
                 {"arch", c.arch.name()}};
  return spec;
}

namespace {

struct ConfigHash {
  std::size_t operator()(const SparsePagedMqaLogitsConfig& c) const {
    return ((((static_cast<std::size_t>(c.heads) * 131 + c.head_dim) * 17 + c.candidate_block) * 7 +
             static_cast<std::size_t>(c.logits)) *
                2 +
            c.histogram) *
               2 +
           (c.kv == KvFormat::mxfp4 ? 1 : 0) + 4 * static_cast<std::size_t>(c.variant);
  }
};

KernelRegistry<SparsePagedMqaLogitsConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<SparsePagedMqaLogitsConfig, ConfigHash>();  // never destroyed: see its comment
  return *r;
}

const LoadedKernel& loaded_kernel(std::string_view op, const SparsePagedMqaLogitsConfig& config, CUstream stream) {
  return registry().get_for_current_device(
      op, config, stream, [](const SparsePagedMqaLogitsConfig& c) { return sparse_paged_mqa_logits_kernel_spec(c); });
}

}  // namespace

SparsePagedMqaLogitsCall check_sparse_paged_mqa_logits(std::string_view op, const TensorView& q, const TensorView& kv_cache,
                                                       const TensorView& weights, const TensorView& context_lens,
                                                       const TensorView& block_table, const TensorView& candidates,
                                                       int candidate_block, const TensorView& logits,
                                                       const SparsePagedMqaLogitsOptions& options) {
  // The full-context op's checks of the shared arguments (the logits as [B * next_n, C * block]).
  PagedMqaLogitsOptions paged;
  paged.histogram = options.histogram;
  paged.q_scales = options.q_scales;
  paged.pdl = options.pdl;
  paged.variant = options.variant;
  SparsePagedMqaLogitsCall call;
  call.paged = check_paged_mqa_logits(op, q, kv_cache, weights, context_lens, block_table, logits, paged);
  const PagedMqaLogitsConfig& pc = call.paged.config;
  call.rows = static_cast<std::int64_t>(call.paged.batch) * pc.next_n;
  TensorChecks qc(op, "q", q);
  if (pc.heads != 32 && pc.heads != 64) qc.fail("heads = q.shape[2] in {32, 64}", std::to_string(pc.heads));
  if (pc.head_dim != 128) qc.fail("head_dim 128", std::to_string(pc.head_dim));
  if (candidate_block != 8 && candidate_block != 16)
    throw ArgumentError(fmt::format("{}: candidate_block: expected 8 or 16, got {}", op, candidate_block));
  TensorChecks cc(op, "candidates", candidates);
  cc.dtype({DType::i32}).rank({2}).dim(0, call.rows, "B * next_n").stride(1, 1).not_null().aligned(4);
  const std::int64_t num_candidates = candidates.shape[1];
  if (num_candidates < 0 || num_candidates * candidate_block > INT_MAX - 64)
    cc.fail(fmt::format("C = candidates.shape[1] in 0..{}", (INT_MAX - 64) / candidate_block), std::to_string(num_candidates));
  if (call.rows > 1 && candidates.strides[0] < num_candidates)
    cc.fail(fmt::format("a row stride >= C = {}", num_candidates), std::to_string(candidates.strides[0]));
  TensorChecks oc(op, "logits", logits);
  if (logits.shape[1] != num_candidates * candidate_block)
    oc.fail(fmt::format("logits.shape[1] = C * candidate_block = {}", num_candidates * candidate_block),
            std::to_string(logits.shape[1]));
  if (call.rows > 65535) qc.fail("B * next_n <= 65535 (the grid's rows)", std::to_string(call.rows));
  call.config = {pc.heads, pc.head_dim, candidate_block, pc.histogram, pc.logits, pc.kv, Arch{}, pc.variant};
  call.params = {call.paged.params,
                 static_cast<const int*>(candidates.data),
                 candidates.strides[0],
                 static_cast<int>(num_candidates),
                 pc.next_n,
                 options.masked_nan ? 1 : 0};
  return call;
}

kernels::SparsePagedMqaLogitsSm90Params sparse_sm90_params(const SparsePagedMqaLogitsCall& call) {
  kernels::SparsePagedMqaLogitsSm90Params sp{};
  sp.s = call.params;  // no tensor map: FP8 tiles are copied by threads, MXFP4 ones by bulk copies
  return sp;
}

void sparse_paged_mqa_logits(const TensorView& q, const TensorView& kv_cache, const TensorView& weights,
                             const TensorView& context_lens, const TensorView& block_table, const TensorView& candidates,
                             int candidate_block, const TensorView& logits, Stream stream,
                             const SparsePagedMqaLogitsOptions& options) {
  constexpr std::string_view op = "sparse_paged_mqa_logits";
  const SparsePagedMqaLogitsCall call = check_sparse_paged_mqa_logits(op, q, kv_cache, weights, context_lens, block_table,
                                                                      candidates, candidate_block, logits, options);
  if (call.empty()) return;  // nothing to write
  const std::int64_t rows = call.rows;
  const LoadedKernel& kernel = loaded_kernel(op, call.config, stream);
  const std::int64_t tiles =
      (static_cast<std::int64_t>(call.params.num_candidates) * candidate_block + kernels::kSparseTile - 1) / kernels::kSparseTile;
  if (kernel.variant != static_cast<int>(PagedMqaLogitsVariant::sm90)) {
    kernels::SparsePagedMqaLogitsParams p = call.params;
    void* args[] = {&p};
    return launch_kernel(kernel, static_cast<unsigned>(tiles), static_cast<unsigned>(rows), 1, stream, args, options.pdl);
  }
  kernels::SparsePagedMqaLogitsSm90Params sp = sparse_sm90_params(call);
  // Tiles per CTA: one wave of the kernel's CTAs where the work fits it (a short row's tiles spread over
  // the SMs), else ranges of up to kSparseSm90MaxTiles (the resolution and the query load amortized).
  const std::int64_t slots = static_cast<std::int64_t>(std::max(kernel.multiprocessors, 1)) * std::max(kernel.ctas_per_sm, 1);
  sp.tiles_per_cta =
      static_cast<int>(std::clamp<std::int64_t>((rows * tiles + slots - 1) / slots, 1, kernels::kSparseSm90MaxTiles));
  void* args[] = {&sp};
  launch_kernel(kernel, static_cast<unsigned>((tiles + sp.tiles_per_cta - 1) / sp.tiles_per_cta), static_cast<unsigned>(rows), 1,
                stream, args, options.pdl);
}

void warm_sparse_paged_mqa_logits(const SparsePagedMqaLogitsConfig& config) {
  SparsePagedMqaLogitsConfig fields = config;  // the fields first: a bad configuration is named even without a GPU
  fields.arch = Arch{9, 0, true};
  fields.check_supported();
  if (config.arch != Arch{})
    return compile_into_disk_cache("warm_sparse_paged_mqa_logits", sparse_paged_mqa_logits_kernel_spec(config));
  current_or_primary_context("warm_sparse_paged_mqa_logits");
  loaded_kernel("warm_sparse_paged_mqa_logits", config, nullptr);
}

}  // namespace flash_indexer
