// The ragged (prefill) mqa_logits call: argument checks (all in check_mqa_logits), kernel lookup, launch.
#include "mqa_logits_call.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "../kernels/mqa_logits_params.cuh"
#include "driver.hpp"
#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/mqa_logits.hpp"
#include "kernel_key.hpp"
#include "kernel_registry.hpp"
#include "mqa_logits_kernel.hpp"
#include "tensor_checks.hpp"

namespace flash_indexer {
namespace {

struct ConfigHash {
  std::size_t operator()(const MqaLogitsConfig& c) const {
    return (((static_cast<std::size_t>(c.heads) * 131 + c.head_dim) * 7 + static_cast<std::size_t>(c.logits)) * 2 + c.histogram) *
               3 +
           static_cast<std::size_t>(c.variant);
  }
};

KernelRegistry<MqaLogitsConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<MqaLogitsConfig, ConfigHash>();  // never destroyed: see its comment
  return *r;
}

const LoadedKernel& loaded_kernel(std::string_view op, const MqaLogitsConfig& config, CUstream stream) {
  return registry().get_for_current_device(op, config, stream,
                                           [](const MqaLogitsConfig& c) { return mqa_logits_kernel_spec(c); });
}

// TMA maps of the sm90 kernel: key tiles {D bytes, 64 keys} of kv [N, D] (rows past N read as zeros) and
// the query rows {D bytes, 128 rows} of q [T * H, D]; swizzled as wide as a row (wgmma's K-major layout).
void encode_tensor_maps(kernels::MqaLogitsSm90Params& sp, int heads, int head_dim) {
  const auto& p = sp.p;
  const CUtensorMapSwizzle swizzle = head_dim == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const cuuint32_t elem_strides[2] = {1, 1};
  {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(p.keys)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.kv_stride)};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(head_dim), 64};
    FI_CU(cuTensorMapEncodeTiled, "mqa_logits: kv tensor map", reinterpret_cast<CUtensorMap*>(&sp.kv_map),
          CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<unsigned char*>(p.kv), dims, strides, box, elem_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(p.tokens) * heads};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(head_dim)};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(head_dim), static_cast<cuuint32_t>(kernels::kMqaSm90Rows)};
    FI_CU(cuTensorMapEncodeTiled, "mqa_logits: q tensor map", reinterpret_cast<CUtensorMap*>(&sp.q_map),
          CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<unsigned char*>(p.q), dims, strides, box, elem_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  // The keys' scales, 64 per tile, by TMA where their address is 16-byte aligned (as a box's must be).
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(p.kv_scales);
  sp.scales_in_stage = address % 16 == 0;
  if (sp.scales_in_stage) {
    const cuuint64_t dims[1] = {static_cast<cuuint64_t>(p.keys)};
    const cuuint64_t strides[1] = {0};  // rank 1: none is read
    const cuuint32_t box[1] = {64};
    FI_CU(cuTensorMapEncodeTiled, "mqa_logits: scales tensor map", reinterpret_cast<CUtensorMap*>(&sp.scales_map),
          CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, const_cast<float*>(p.kv_scales), dims, strides, box, elem_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
}

}  // namespace

// Every argument check of the op, in one place; no driver call.
MqaLogitsCall check_mqa_logits(std::string_view op, const TensorView& q, const TensorView& kv, const TensorView& kv_scales,
                               const TensorView& weights, const TensorView& ks, const TensorView& ke, const TensorView& logits,
                               const MqaLogitsOptions& options) {
  MqaLogitsCall l;
  TensorChecks qc(op, "q", q);
  qc.dtype({DType::fp8_e4m3}).rank({3}).contiguous().not_null().aligned(16);
  const std::int64_t tokens = q.shape[0];
  if (tokens < 0 || tokens > kMqaMaxTokens)
    qc.fail(fmt::format("tokens T = q.shape[0] in 0..{}", kMqaMaxTokens), std::to_string(tokens));
  if (q.shape[1] != 16 && q.shape[1] != 32 && q.shape[1] != 64)
    qc.fail("heads = q.shape[1] in {16, 32, 64}", std::to_string(q.shape[1]));
  if (q.shape[2] != 32 && q.shape[2] != 64 && q.shape[2] != 128)
    qc.fail("head_dim = q.shape[2] in {32, 64, 128}", std::to_string(q.shape[2]));
  l.config.heads = static_cast<int>(q.shape[1]);
  l.config.head_dim = static_cast<int>(q.shape[2]);
  const std::int64_t heads = l.config.heads, head_dim = l.config.head_dim;

  TensorChecks kc(op, "kv", kv);
  kc.dtype({DType::fp8_e4m3, DType::u8}).rank({2}).dim(1, head_dim, "head_dim").stride(1, 1).not_null().aligned(16);
  const std::int64_t keys = kv.shape[0];
  if (keys < 0 || keys > INT_MAX - kernels::kMqaKeys) kc.fail("keys N = kv.shape[0] in 0..2^31-65", std::to_string(keys));
  const std::int64_t kv_stride = keys > 1 ? kv.strides[0] : head_dim;
  if (kv_stride < head_dim || kv_stride % 16 != 0)
    kc.fail(fmt::format("a row stride >= head_dim = {} bytes and a multiple of 16", head_dim), std::to_string(kv_stride));

  TensorChecks sc(op, "kv_scales", kv_scales);
  sc.dtype({DType::f32}).rank({1}).dim(0, keys, "N = kv.shape[0]").contiguous().not_null().aligned(4);
  TensorChecks wc(op, "weights", weights);
  wc.dtype({DType::f32}).rank({2}).dim(0, tokens, "T = q.shape[0]").dim(1, heads, "heads").contiguous().not_null().aligned(4);
  TensorChecks sk(op, "ks", ks);
  sk.dtype({DType::i32}).rank({1}).dim(0, tokens, "T = q.shape[0]").contiguous().not_null().aligned(4);
  TensorChecks ek(op, "ke", ke);
  ek.dtype({DType::i32}).rank({1}).dim(0, tokens, "T = q.shape[0]").contiguous().not_null().aligned(4);

  TensorChecks oc(op, "logits", logits);
  oc.dtype({DType::f32, DType::f16, DType::bf16}).rank({2}).dim(0, tokens, "T = q.shape[0]");
  if (!options.compressed) oc.dim(1, keys, "N = kv.shape[0]");
  oc.stride(1, 1).not_null().aligned(16);
  const std::int64_t width = options.compressed ? logits.shape[1] : keys;
  if (width < 0 || width > INT_MAX) oc.fail("a width W = logits.shape[1] in 0..2^31-1", std::to_string(width));
  if (tokens > 1 && logits.strides[0] < width)
    oc.fail(fmt::format("a row stride >= {} = {}", options.compressed ? "W" : "N", width), std::to_string(logits.strides[0]));
  if (options.compressed && options.fill_masked)
    throw ArgumentError(
        fmt::format("{}: options.fill_masked: expected false with options.compressed (a compressed row's columns past its window "
                    "belong to no key)",
                    op));
  l.config.logits = logits_dtype_of(logits.dtype);

  const TensorView& histogram = options.histogram;
  l.config.histogram = histogram.rank != 0;
  if (l.config.histogram) check_coarse_histogram(op, histogram, tokens, "T = q.shape[0]");

  auto& p = l.params;
  p.q = static_cast<const unsigned char*>(q.data);
  p.kv = static_cast<const unsigned char*>(kv.data);
  p.kv_scales = static_cast<const float*>(kv_scales.data);
  p.weights = static_cast<const float*>(weights.data);
  p.ks = static_cast<const int*>(ks.data);
  p.ke = static_cast<const int*>(ke.data);
  p.logits = logits.data;
  p.histogram = static_cast<int*>(histogram.data);
  p.kv_stride = kv_stride;
  p.logits_stride = tokens > 1 ? logits.strides[0] : width;
  p.tokens = static_cast<int>(tokens);
  p.keys = static_cast<int>(keys);
  p.fill_masked = options.fill_masked;
  p.compressed = options.compressed;
  p.width = static_cast<int>(width);
  if (options.variant != MqaLogitsVariant::automatic && options.variant != MqaLogitsVariant::portable &&
      options.variant != MqaLogitsVariant::sm90)
    throw ArgumentError(
        fmt::format("{}: options.variant: expected automatic, portable or sm90, got {}", op, static_cast<int>(options.variant)));
  l.config.variant = options.variant;
  l.pdl = options.pdl;
  return l;
}

MqaLogitsLaunch prepare_mqa_logits(std::string_view op, const MqaLogitsCall& call, CUstream stream) {
  MqaLogitsLaunch launch;
  launch.kernel = &loaded_kernel(op, call.config, stream);
  launch.pdl = call.pdl;
  launch.sm90_params.p = call.params;
  launch.sm90 = launch.kernel->variant == static_cast<int>(MqaLogitsVariant::sm90);
  if (!launch.sm90) {
    launch.grid_x = static_cast<unsigned>((call.params.keys + kernels::kMqaKeys - 1) / kernels::kMqaKeys);
    launch.grid_y = static_cast<unsigned>((call.params.tokens + kernels::kMqaTokens - 1) / kernels::kMqaTokens);
    return launch;
  }
  // Grid: token groups (x) by key splits (y, at most 65535). Splits only where the groups alone give
  // fewer than four CTAs per SM: every CTA pays its prologue (the Q load, the ring's first fill) and
  // adds its histogram counts (G x 1024 bins) to the global one at its end, so fewer CTAs per group do
  // less of both (measured as fast as splits of up to 256 tiles). A split holds at least 32 tiles.
  encode_tensor_maps(launch.sm90_params, call.config.heads, call.config.head_dim);
  const std::int64_t tokens_per_cta = kernels::mqa_sm90_tokens(call.config.heads);
  const std::int64_t groups = (call.params.tokens + tokens_per_cta - 1) / tokens_per_cta;
  const std::int64_t tiles = (static_cast<std::int64_t>(call.params.keys) + 63) / 64;
  const std::int64_t wanted_ctas = 4 * static_cast<std::int64_t>(std::max(launch.kernel->multiprocessors, 1));
  const std::int64_t splits = std::max<std::int64_t>(1, (wanted_ctas + groups - 1) / groups);
  const std::int64_t per_split = std::max<std::int64_t>({(tiles + splits - 1) / splits, 32, (tiles + 65534) / 65535});
  launch.sm90_params.tiles_per_split = static_cast<int>(per_split);
  launch.grid_x = static_cast<unsigned>(groups);
  launch.grid_y = static_cast<unsigned>((tiles + per_split - 1) / per_split);
  return launch;
}

void enqueue(const MqaLogitsLaunch& launch, CUstream stream) {
  kernels::MqaLogitsSm90Params params = launch.sm90_params;
  void* args[] = {launch.sm90 ? static_cast<void*>(&params) : static_cast<void*>(&params.p)};
  launch_kernel(*launch.kernel, launch.grid_x, launch.grid_y, 1, stream, args, launch.pdl);
}

void mqa_logits(const TensorView& q, const TensorView& kv, const TensorView& kv_scales, const TensorView& weights,
                const TensorView& ks, const TensorView& ke, const TensorView& logits, Stream stream,
                const MqaLogitsOptions& options) {
  constexpr std::string_view op = "mqa_logits";
  const MqaLogitsCall call = check_mqa_logits(op, q, kv, kv_scales, weights, ks, ke, logits, options);
  if (call.empty()) return;  // nothing to write
  enqueue(prepare_mqa_logits(op, call, stream), stream);
}

void warm_mqa_logits(const MqaLogitsConfig& config) {
  MqaLogitsConfig fields = config;  // the fields first: a bad configuration is named even without a GPU
  fields.arch = Arch{9, 0, true};
  fields.resolved().check_supported();
  if (config.arch != Arch{}) {  // for that target, into the disk cache
    config.resolved().check_supported();
    return compile_into_disk_cache("warm_mqa_logits", mqa_logits_kernel_spec(config.resolved()));
  }
  current_or_primary_context("warm_mqa_logits");
  loaded_kernel("warm_mqa_logits", config, nullptr);
}

}  // namespace flash_indexer
