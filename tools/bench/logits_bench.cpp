#include "logits_bench.hpp"

#include <algorithm>
#include <memory>
#include <random>

#include "gpu_timer.hpp"
#include "paged_inputs.hpp"
#include "kernel_registry.hpp"

namespace flash_indexer::bench {
namespace {

constexpr int kBlock = 64;
constexpr double kTensorFlops = 1600e12;  // the FP8 rate the targets assume

// Whether the library builds this configuration's kernel for the device (the variant resolved there).
bool runs_here(const PagedMqaLogitsConfig& config) {
  try {
    config.resolved().check_supported();
    return true;
  } catch (const ArgumentError&) {
    return false;
  }
}

}  // namespace

std::vector<LogitsBenchRow> run_logits_bench(check::GpuSession& gpu, const LogitsBenchOptions& o, double read_bandwidth,
                                             const std::function<void(const LogitsBenchRow&)>& on_row) {
  std::mt19937_64 rng(o.seed);
  const int dim = o.head_dim;
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  const int max_length = *std::max_element(o.lengths.begin(), o.lengths.end());
  const int max_next_n = *std::max_element(o.next_ns.begin(), o.next_ns.end());
  const int max_heads = *std::max_element(o.heads.begin(), o.heads.end());
  const std::int64_t max_width = (static_cast<std::int64_t>(max_length) * 13 / 10 + kBlock) / kBlock * kBlock;
  check::DeviceBuffer logits(static_cast<std::size_t>(max_batch) * max_next_n * max_width * 4);
  check::DeviceBuffer hist(static_cast<std::size_t>(max_batch) * max_next_n * kCoarseBins * 4);
  std::unique_ptr<check::DeviceBuffer> flush;
  if (o.cold_l2) flush = std::make_unique<check::DeviceBuffer>(std::size_t{256} << 20);
  hist.fill(0);
  check::DeviceBuffer read_xor(static_cast<std::size_t>(paged_read_warps()) * 4);

  std::vector<LogitsBenchRow> rows;
  for (KvFormat format : o.kvs) {
    for (PagedValues values : o.inputs) {
      PagedInputs inputs(max_batch, max_length, max_next_n, max_heads, dim, format, rng, values);
      for (int batch : o.batches) {
        for (int length : o.lengths) {
          inputs.draw(batch, length, o.fixed_length, rng, o.resident_blocks);
          const std::int64_t width = inputs.width();
          const std::int64_t max_blocks = width / kBlock;
          const std::int64_t blocks_read = inputs.blocks_read();
          const std::int64_t block_bytes = inputs.block_bytes();
          const std::vector<std::int32_t>& lh = inputs.lengths();
          // The same blocks read with nothing else: every cell of this draw has this floor.
          const kernels::PagedReadParams read{inputs.kv_cache().data,
                                              static_cast<const int*>(inputs.block_table().data),
                                              static_cast<const int*>(inputs.context_lens().data),
                                              batch,
                                              static_cast<int>(max_blocks),
                                              static_cast<int>(block_bytes / 16),
                                              kBlock,
                                              static_cast<unsigned int*>(read_xor.data())};
          const double read_us = time_paged_read(gpu, read, flush.get(), o.replays).median_us;
          for (int next_n : o.next_ns) {
            for (int heads : o.heads) {
              for (int histogram : o.histogram) {
                for (LogitsDType dtype : o.dtypes) {
                  // A configuration the device's kernel is not built for (contract §2.2, §3) is skipped.
                  if (!runs_here({next_n, heads, dim, kBlock, histogram != 0, dtype, current_device_arch(), o.variant, format}))
                    continue;
                  const std::int64_t rows_n = static_cast<std::int64_t>(batch) * next_n;
                  const auto qv = inputs.q(next_n, heads);
                  const auto kv = inputs.kv_cache();
                  const auto wv = inputs.weights(next_n, heads);
                  const auto lv = inputs.context_lens();
                  const auto tv = inputs.block_table();
                  const auto ov = TensorView::contiguous(logits.data(), tensor_dtype(dtype), {rows_n, width});
                  PagedMqaLogitsOptions opt;
                  opt.q_scales = inputs.q_scales(next_n, heads);
                  if (histogram) opt.histogram = TensorView::contiguous(hist.data(), DType::i32, {rows_n, kCoarseBins});
                  auto time_variant = [&](PagedMqaLogitsVariant variant) {
                    opt.variant = variant;
                    return time_graph(
                               gpu, [&](CUstream s) { paged_mqa_logits(qv, kv, wv, lv, tv, ov, s, opt); }, o.replays, flush.get())
                        .median_us;
                  };
                  LogitsBenchRow r;
                  r.batch = batch;
                  r.length = length;
                  r.next_n = next_n;
                  r.heads = heads;
                  r.head_dim = dim;
                  r.histogram = histogram != 0;
                  r.dtype = dtype;
                  r.kv = format;
                  r.input = values;
                  PagedMqaLogitsConfig config{next_n,    heads, dim, kBlock, r.histogram, dtype, current_device_arch(),
                                              o.variant, format};
                  r.kernel = config.resolved().key();
                  r.us = time_variant(o.variant);
                  std::int64_t live = 0;
                  for (auto l : lh)
                    for (int j = 0; j < next_n; ++j) live += std::clamp<std::int64_t>(l - next_n + j + 1, 0, width);
                  r.bytes = static_cast<double>(blocks_read) * block_bytes +
                            static_cast<double>(live) * (dtype == LogitsDType::f32 ? 4 : 2) +
                            static_cast<double>(rows_n) * heads * ((format == KvFormat::mxfp4 ? dim / 2 + 4 : dim) + 4) +
                            static_cast<double>(batch) * max_blocks * 4;
                  r.flops = 2.0 * blocks_read * kBlock * next_n * heads * dim;
                  r.gbps = r.bytes / (r.us * 1e-6) / 1e9;
                  r.bandwidth_fraction = r.bytes / (r.us * 1e-6) / read_bandwidth;
                  r.tflops = r.flops / (r.us * 1e-6) / 1e12;
                  r.read_us = read_us;
                  r.floor_us = std::max(r.bytes / read_bandwidth, r.flops / kTensorFlops) * 1e6;
                  if (o.compare_portable && (format == KvFormat::fp8 || o.variant == PagedMqaLogitsVariant::sm90))
                    r.portable_us = time_variant(PagedMqaLogitsVariant::portable);
                  rows.push_back(r);
                  if (on_row) on_row(r);
                }
              }
            }
          }
        }
      }
    }
  }
  return rows;
}

}  // namespace flash_indexer::bench
