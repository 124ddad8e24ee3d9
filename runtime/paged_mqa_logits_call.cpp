// The paged_mqa_logits call: argument checks, kernel lookup, launch; and the public entry points.
#include "paged_mqa_logits_call.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "dcp_checks.hpp"
#include "driver.hpp"
#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/error.hpp"
#include "kernel_key.hpp"
#include "paged_mqa_logits_kernel.hpp"
#include "sm90_split.hpp"
#include "tensor_checks.hpp"

namespace flash_indexer {
namespace {

// The hot-path registry key: the configuration without the arch (the context determines it).
struct ConfigHash {
  std::size_t operator()(const PagedMqaLogitsConfig& c) const {
    return (((((static_cast<std::size_t>(c.next_n) * 131 + c.heads) * 131 + c.head_dim) * 131 + c.block_size) * 7 +
             static_cast<std::size_t>(c.logits)) *
                2 +
            c.histogram) *
               3 +
           static_cast<std::size_t>(c.variant) + (c.kv == KvFormat::mxfp4 ? std::size_t{1} << 40 : 0);
  }
};

KernelRegistry<PagedMqaLogitsConfig, ConfigHash>& registry() {
  static auto* r = new KernelRegistry<PagedMqaLogitsConfig, ConfigHash>();  // never destroyed: see its comment
  return *r;
}

// The registry keys the requested variant (automatic included); the spec resolves it for the device and
// rejects a forced sm90 that does not fit it.
const LoadedKernel& loaded_kernel(std::string_view op, const PagedMqaLogitsConfig& config, CUstream stream) {
  return registry().get_for_current_device(op, config, stream,
                                           [](const PagedMqaLogitsConfig& c) { return paged_mqa_logits_kernel_spec(c); });
}

CUtensorMapSwizzle row_swizzle(int head_dim) { return head_dim == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B; }

}  // namespace

void encode_kv_cache_map(kernels::TensorMap& map, const kernels::PagedMqaLogitsParams& p, int head_dim, int rows, int box_rows,
                         std::string_view context) {
  const std::int64_t block_stride =
      p.num_blocks > 1 ? p.kv_block_stride : (64 * (head_dim + 4) + 15) / 16 * 16;  // one block: any stride
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(std::max(p.num_blocks, 1))};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(block_stride)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(head_dim), static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  FI_CU(cuTensorMapEncodeTiled, context, reinterpret_cast<CUtensorMap*>(&map), CU_TENSOR_MAP_DATA_TYPE_UINT8, 3,
        const_cast<unsigned char*>(p.kv_cache), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
        row_swizzle(head_dim), CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

namespace {

// TMA maps of the sm90 kernel: the key tiles of the paged cache (encode_kv_cache_map), and the query rows
// as {D bytes, B * next_n * H}, swizzled the same way.
void encode_tensor_maps(kernels::PagedMqaLogitsSm90Params& sp, const PagedMqaLogitsConfig& c) {
  const auto& p = sp.p;
  // The rows behind a block's 64 keys are its 64 FP32 scales (256 bytes): the kernels that take one TMA
  // per block fetch both (kernels::Sm90PagedForm::one_tma_per_block). Only FP8 calls have maps.
  const bool one_tma = kernels::sm90_paged_form(c.next_n, c.heads, false).one_tma_per_block;
  const int rows = 64 + (one_tma ? 256 / c.head_dim : 0);
  encode_kv_cache_map(sp.kv_map, p, c.head_dim, rows, rows, "paged_mqa_logits: kv_cache tensor map");
  {
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    const int n = c.next_n * c.heads;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(c.head_dim), static_cast<cuuint64_t>(p.batch) * n};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(c.head_dim)};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(c.head_dim), static_cast<cuuint32_t>(n)};
    FI_CU(cuTensorMapEncodeTiled, "paged_mqa_logits: q tensor map", reinterpret_cast<CUtensorMap*>(&sp.q_map),
          CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<unsigned char*>(p.q), dims, strides, box, elem_strides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, row_swizzle(c.head_dim), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
}

}  // namespace

// Every argument check of the op, in one place.
PagedMqaLogitsCall check_paged_mqa_logits(std::string_view op, const TensorView& q, const TensorView& kv_cache,
                                          const TensorView& weights, const TensorView& context_lens,
                                          const TensorView& block_table, const TensorView& logits,
                                          const PagedMqaLogitsOptions& options) {
  PagedMqaLogitsCall l;
  // An FP8 query means the FP8 cache; a packed uint8 query (with q_scales) the MXFP4 cache.
  TensorChecks qc(op, "q", q);
  qc.dtype({DType::fp8_e4m3, DType::u8}).rank({4}).contiguous().not_null().aligned(16);
  const bool mxfp4 = q.dtype == DType::u8;
  l.config.kv = mxfp4 ? KvFormat::mxfp4 : KvFormat::fp8;
  const std::int64_t batch = q.shape[0];
  l.config.next_n = static_cast<int>(q.shape[1]);
  l.config.heads = static_cast<int>(q.shape[2]);
  l.config.head_dim = static_cast<int>(mxfp4 ? 2 * q.shape[3] : q.shape[3]);
  if (batch < 0 || batch > 65535) qc.fail("batch size q.shape[0] in 0..65535", std::to_string(batch));
  if (mxfp4) {
    if (q.shape[1] < 1 || q.shape[1] > kernels::kSm90MaxNextN)
      qc.fail("next_n = q.shape[1] in 1..6 for MXFP4 (5..6 on the sm90 kernel)", std::to_string(q.shape[1]));
    if (q.shape[2] != 32 && q.shape[2] != 64) qc.fail("heads = q.shape[2] in {32, 64} for MXFP4", std::to_string(q.shape[2]));
    if (q.shape[3] != 64) qc.fail("q.shape[3] = head_dim / 2 = 64 (packed E2M1, head_dim 128)", std::to_string(q.shape[3]));
  } else {
    if (q.shape[1] < 1 || q.shape[1] > 8) qc.fail("next_n = q.shape[1] in 1..8", std::to_string(q.shape[1]));
    if (q.shape[2] != 16 && q.shape[2] != 32 && q.shape[2] != 64)
      qc.fail("heads = q.shape[2] in {16, 32, 64}", std::to_string(q.shape[2]));
    if (q.shape[3] != 64 && q.shape[3] != 128) qc.fail("head_dim = q.shape[3] in {64, 128}", std::to_string(q.shape[3]));
  }
  const std::int64_t next_n = l.config.next_n, heads = l.config.heads, head_dim = l.config.head_dim;
  const std::int64_t rows = batch * next_n;
  // Where the sm90 kernel runs the call as groups of rows (kernels::sm90_n_wide) its grid has up to
  // B * next_n rows: at most 65535, on every device, so that a call valid on one GPU is valid on all.
  if (next_n <= kernels::kSm90MaxNextN && !kernels::sm90_n_wide(static_cast<int>(next_n), static_cast<int>(heads)) &&
      rows > 65535)
    qc.fail(fmt::format("B * next_n <= 65535 at next_n {} and {} heads (B <= {})", next_n, heads, 65535 / next_n),
            std::to_string(batch));
  const TensorView& q_scales = options.q_scales;
  TensorChecks qsc(op, "options.q_scales", q_scales);
  if (mxfp4) {
    qsc.dtype({DType::i32}).rank({3}).dim(0, batch, "B").dim(1, next_n, "next_n").dim(2, heads, "heads");
    qsc.contiguous().not_null().aligned(4);
  } else if (q_scales.rank != 0) {
    qsc.fail("none for an FP8 query (q_scales belong to an MXFP4 query: uint8 q)", "a tensor");
  }

  TensorChecks kc(op, "kv_cache", kv_cache);
  kc.dtype({DType::u8, DType::fp8_e4m3}).rank({4}).not_null().aligned(16);
  if (kv_cache.shape[1] != 64) kc.fail("block_size = kv_cache.shape[1] = 64", std::to_string(kv_cache.shape[1]));
  l.config.block_size = 64;
  const std::int64_t token_bytes = mxfp4 ? head_dim / 2 + 4 : head_dim + 4;
  kc.dim(2, 1, "one KV head")
      .dim(3, token_bytes,
           mxfp4 ? "head_dim / 2 packed E2M1 bytes + one int32 of exponents per token (MXFP4, as q)"
                 : "head_dim FP8 bytes + one FP32 scale per token");
  kc.stride(3, 1).stride(2, token_bytes).stride(1, token_bytes);
  const std::int64_t num_blocks = kv_cache.shape[0], block_stride = kv_cache.strides[0];
  if (num_blocks < 0 || num_blocks > INT_MAX) kc.fail("num_blocks in 0..2^31-1", std::to_string(num_blocks));
  if (num_blocks > 1 && (block_stride < 64 * token_bytes || block_stride % 16 != 0))
    kc.fail(fmt::format("a block stride >= {} bytes and a multiple of 16", 64 * token_bytes), std::to_string(block_stride));

  TensorChecks wc(op, "weights", weights);
  wc.dtype({DType::f32}).rank({2}).dim(0, rows, "B * next_n").dim(1, heads, "heads").contiguous().not_null().aligned(4);

  TensorChecks lc(op, "context_lens", context_lens);
  lc.dtype({DType::i32}).rank({1, 2}).dim(0, batch, "B").contiguous().not_null().aligned(4);
  if (context_lens.rank == 2) lc.dim(1, next_n, "next_n");

  TensorChecks bc(op, "block_table", block_table);
  bc.dtype({DType::i32}).rank({2}).dim(0, batch, "B").stride(1, 1).not_null().aligned(4);
  const std::int64_t max_blocks = block_table.shape[1];
  if (max_blocks < 0 || max_blocks > INT_MAX) bc.fail("max_blocks in 0..2^31-1", std::to_string(max_blocks));
  if (batch > 1 && block_table.strides[0] < max_blocks)
    bc.fail(fmt::format("a row stride >= max_blocks = {}", max_blocks), std::to_string(block_table.strides[0]));

  TensorChecks oc(op, "logits", logits);
  oc.dtype({DType::f32, DType::f16, DType::bf16}).rank({2}).dim(0, rows, "B * next_n").stride(1, 1).not_null().aligned(16);
  const std::int64_t width = logits.shape[1];
  if (width < 0 || width > INT_MAX - 64) oc.fail("a width in 0..2^31-65", std::to_string(width));
  if (rows > 1 && logits.strides[0] < width)
    oc.fail(fmt::format("a row stride >= width = {}", width), std::to_string(logits.strides[0]));
  l.config.logits = logits_dtype_of(logits.dtype);

  const TensorView& histogram = options.histogram;
  l.config.histogram = histogram.rank != 0;
  if (l.config.histogram) check_coarse_histogram(op, histogram, rows, "B * next_n");

  auto& p = l.params;
  p.q = static_cast<const unsigned char*>(q.data);
  p.q_scales = mxfp4 ? static_cast<const int*>(q_scales.data) : nullptr;
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
  if (options.variant != PagedMqaLogitsVariant::automatic && options.variant != PagedMqaLogitsVariant::portable &&
      options.variant != PagedMqaLogitsVariant::sm90)
    throw ArgumentError(
        fmt::format("{}: options.variant: expected automatic, portable or sm90, got {}", op, static_cast<int>(options.variant)));
  l.config.variant = options.variant;
  l.pdl = options.pdl;
  check_dcp_layout(op, "options.dcp", options.dcp);
  p.dcp_ranks = options.dcp.ranks;
  p.dcp_rank = options.dcp.rank;
  p.dcp_interleave = options.dcp.interleave;
  p.rows_per_request = 1;
  l.width_blocks = static_cast<unsigned>((width + l.config.block_size - 1) / l.config.block_size);
  l.batch = static_cast<unsigned>(batch);
  return l;
}

PagedMqaLogitsLaunch prepare_paged_mqa_logits(std::string_view op, const PagedMqaLogitsCall& call, CUstream stream,
                                              bool allow_flattened, bool allow_ranges) {
  PagedMqaLogitsLaunch launch;
  const LoadedKernel& kernel = loaded_kernel(op, call.config, stream);
  launch.kernel = &kernel;
  launch.pdl = call.pdl;
  launch.sm90_params.p = call.params;
  launch.sm90 = kernel.variant == static_cast<int>(PagedMqaLogitsVariant::sm90);
  if (!launch.sm90) {
    launch.grid_x = call.width_blocks;
    launch.grid_y = call.batch;
    return launch;
  }
  // Small draft-token calls as B * next_n rows of the next_n = 1 kernel (runtime/sm90_split.hpp; shapes
  // only, so a captured launch stays valid), and past one wgmma tile (kernels::sm90_n_wide) always, as
  // groups of rows of a smaller kernel (kernels::sm90_group_rows: the loaded kernel is that one). The
  // rows' lengths, tables and outputs are the call's.
  const bool rows_only = !kernels::sm90_n_wide(call.config.next_n, call.config.heads);
  if (rows_only || (allow_flattened && sm90_flattened(call.config.next_n, call.config.heads, call.config.kv == KvFormat::mxfp4,
                                                      call.batch, call.width_blocks))) {
    const int group = rows_only ? kernels::sm90_group_rows(call.config.next_n) : 1;
    const int groups = call.config.next_n / group;
    PagedMqaLogitsCall rows = call;
    rows.config.next_n = group;
    rows.batch = call.batch * static_cast<unsigned>(groups);
    rows.params.batch = static_cast<int>(rows.batch);
    rows.params.rows_per_request = call.params.rows_per_request * groups;
    return prepare_paged_mqa_logits(op, rows, stream, allow_flattened, allow_ranges);
  }
  // Splits of a request: runtime/sm90_split.hpp (shapes only, so a captured launch stays valid).
  PagedMqaLogitsConfig resolved = call.config;
  resolved.variant = PagedMqaLogitsVariant::sm90;
  if (resolved.kv == KvFormat::fp8) encode_tensor_maps(launch.sm90_params, resolved);  // MXFP4: bulk copies, no maps
  static_assert(sm90_max_blocks_per_split(1) <= kernels::kSm90MaxBlocksPerSplit, "the kernel stages every block id");
  set_blocks_per_split(launch, call,
                       sm90_blocks_per_split(call.width_blocks, call.batch, kernel.multiprocessors, kernel.ctas_per_sm,
                                             sm90_max_blocks_per_split(kernel.ctas_per_sm)));
  // Where the splits need more than one wave, one wave of CTAs (one per SM) covers an even share of the
  // B x width blocks instead, if the kernel takes ranges: nothing drains between a CTA's requests and no
  // last wave runs part-full (DeepGEMM's persistent grid). One CTA per SM was 2-6 % faster than full
  // waves of shorter ranges at n2 H 64 and n3 H 32 from B 64 x 64K on (docs/design/logits-sm90.md, "Grids").
  const unsigned slots = static_cast<unsigned>(kernel.multiprocessors * kernel.ctas_per_sm);
  if (allow_ranges && takes_ranges(launch, call) && static_cast<std::int64_t>(launch.grid_x) * launch.grid_y > slots)
    set_ranges(launch, slots);
  return launch;
}

void set_blocks_per_split(PagedMqaLogitsLaunch& launch, const PagedMqaLogitsCall& call, int blocks_per_split) {
  launch.sm90_params.blocks_per_split = blocks_per_split;
  launch.grid_x = (call.width_blocks + blocks_per_split - 1) / blocks_per_split;
  launch.grid_y = static_cast<unsigned>(launch.sm90_params.p.batch);  // the kernel's rows: B, or B * next_n flattened
  launch.sm90_params.fill_before_barrier = sm90_fill_before_barrier(static_cast<std::int64_t>(launch.grid_x) * launch.grid_y,
                                                                    launch.kernel->multiprocessors, launch.kernel->ctas_per_sm);
  launch.sm90_params.ranges = 0;
}

bool takes_ranges(const PagedMqaLogitsLaunch& launch, const PagedMqaLogitsCall& call) {
  return launch.sm90 && launch.sm90_params.p.rows_per_request == 1 &&  // not flattened into next_n = 1 rows
         kernels::sm90_paged_form(call.config.next_n, call.config.heads, call.config.kv == KvFormat::mxfp4).has_ranges;
}

void set_ranges(PagedMqaLogitsLaunch& launch, unsigned ctas) {
  launch.grid_x = ctas;
  launch.grid_y = 1;
  launch.sm90_params.ranges = 1;
}

void enqueue(const PagedMqaLogitsLaunch& launch, CUstream stream) {
  kernels::PagedMqaLogitsSm90Params params = launch.sm90_params;
  void* args[] = {launch.sm90 ? static_cast<void*>(&params) : static_cast<void*>(&params.p)};
  launch_kernel(*launch.kernel, launch.grid_x, launch.grid_y, 1, stream, args, launch.pdl);
}

void paged_mqa_logits(const TensorView& q, const TensorView& kv_cache, const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, const TensorView& logits, Stream stream,
                      const PagedMqaLogitsOptions& options) {
  const PagedMqaLogitsCall call =
      check_paged_mqa_logits("paged_mqa_logits", q, kv_cache, weights, context_lens, block_table, logits, options);
  if (call.empty()) return;  // nothing to write
  enqueue(prepare_paged_mqa_logits("paged_mqa_logits", call, stream), stream);
}

void warm_paged_mqa_logits(const PagedMqaLogitsConfig& config) {
  // The fields first (a bad configuration is named even without a GPU), then the device's kernel.
  check_paged_mqa_logits_fields(config);
  if (config.variant != PagedMqaLogitsVariant::automatic && config.variant != PagedMqaLogitsVariant::portable &&
      config.variant != PagedMqaLogitsVariant::sm90)
    throw ArgumentError(fmt::format("warm_paged_mqa_logits: config.variant: expected automatic, portable or sm90, got {}",
                                    static_cast<int>(config.variant)));
  if (config.arch != Arch{}) {  // for that target, into the disk cache
    config.resolved().check_supported();
    return compile_into_disk_cache("warm_paged_mqa_logits", paged_mqa_logits_kernel_spec(config.resolved()));
  }
  current_or_primary_context("warm_paged_mqa_logits");
  const LoadedKernel& kernel = loaded_kernel("warm_paged_mqa_logits", config, nullptr);
  // A small call of this configuration may run as rows of the next_n = 1 kernel (sm90_flattened): that
  // kernel too, so that a first call under graph capture finds it loaded.
  if (kernel.variant == static_cast<int>(PagedMqaLogitsVariant::sm90) &&
      kernels::sm90_paged_form(config.next_n, config.heads, config.kv == KvFormat::mxfp4).flatten_max_row_blocks > 0) {
    PagedMqaLogitsConfig rows = config;
    rows.next_n = 1;
    loaded_kernel("warm_paged_mqa_logits", rows, nullptr);
  }
}

}  // namespace flash_indexer
