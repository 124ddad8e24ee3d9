#include "logits_bench.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "gpu_timer.hpp"
#include "kernel_registry.hpp"

namespace flash_indexer::bench {
namespace {

constexpr int kBlock = 64;
constexpr double kTensorFlops = 1600e12;  // the FP8 rate the targets assume

// A pool of KV blocks filled with valid FP8 keys and positive scales: 4096 random blocks replicated.
check::DeviceBuffer make_pool(std::int64_t blocks, std::int64_t block_bytes, int head_dim, std::mt19937_64& rng) {
  check::DeviceBuffer pool(static_cast<std::size_t>(blocks * block_bytes));
  const std::int64_t pattern_blocks = std::min<std::int64_t>(blocks, 4096);
  std::vector<std::uint8_t> host(static_cast<std::size_t>(pattern_blocks * block_bytes));
  std::uniform_real_distribution<float> scale(0.005f, 0.05f);
  for (std::int64_t b = 0; b < pattern_blocks; ++b) {
    std::uint8_t* base = host.data() + b * block_bytes;
    for (int i = 0; i < kBlock * head_dim; i += 8) {
      std::uint64_t r = rng();
      for (int k = 0; k < 8; ++k, r >>= 8) base[i + k] = static_cast<std::uint8_t>((r & 0x7f) == 0x7f ? 0x3c : r);
    }
    for (int t = 0; t < kBlock; ++t) {
      const float s = scale(rng);
      std::memcpy(base + kBlock * head_dim + 4 * t, &s, 4);
    }
  }
  for (std::int64_t b = 0; b < blocks; b += pattern_blocks) {
    const std::int64_t n = std::min(pattern_blocks, blocks - b);
    pool.upload(host.data(), static_cast<std::size_t>(n * block_bytes), static_cast<std::size_t>(b * block_bytes));
  }
  return pool;
}

}  // namespace

std::vector<LogitsBenchRow> run_logits_bench(check::GpuSession& gpu, const LogitsBenchOptions& o, double read_bandwidth,
                                             const std::function<void(const LogitsBenchRow&)>& on_row) {
  std::mt19937_64 rng(o.seed);
  const int dim = o.head_dim;
  const std::int64_t block_bytes = kBlock * (dim + 4);
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  const int max_length = *std::max_element(o.lengths.begin(), o.lengths.end());
  const int max_next_n = *std::max_element(o.next_ns.begin(), o.next_ns.end());
  const int max_heads = *std::max_element(o.heads.begin(), o.heads.end());
  const std::int64_t max_width = (static_cast<std::int64_t>(max_length) * 13 / 10 + kBlock) / kBlock * kBlock;
  // Enough distinct blocks for the largest batch, and always more than L2 (60 MiB) several times over.
  const std::int64_t pool_blocks =
      std::max<std::int64_t>(static_cast<std::int64_t>(max_batch) * (max_width / kBlock) * 11 / 10, (512 << 20) / block_bytes);
  check::DeviceBuffer pool = make_pool(pool_blocks, block_bytes, dim, rng);
  check::DeviceBuffer logits(static_cast<std::size_t>(max_batch) * max_next_n * max_width * 4);
  check::DeviceBuffer hist(static_cast<std::size_t>(max_batch) * max_next_n * kCoarseBins * 4);
  check::DeviceBuffer q(static_cast<std::size_t>(max_batch) * max_next_n * max_heads * dim);
  check::DeviceBuffer weights(static_cast<std::size_t>(max_batch) * max_next_n * max_heads * 4);
  check::DeviceBuffer lens(static_cast<std::size_t>(max_batch) * 4);
  check::DeviceBuffer table(static_cast<std::size_t>(max_batch) * (max_width / kBlock) * 4);
  std::unique_ptr<check::DeviceBuffer> flush;
  if (o.cold_l2) flush = std::make_unique<check::DeviceBuffer>(std::size_t{256} << 20);
  {
    std::vector<std::uint8_t> qh(q.bytes());
    for (auto& v : qh) {
      v = static_cast<std::uint8_t>(rng());
      if ((v & 0x7f) == 0x7f) v = 0x38;
    }
    q.upload(qh.data(), qh.size());
    std::normal_distribution<float> normal(0.0f, 0.125f);
    std::vector<float> wh(weights.bytes() / 4);
    for (auto& w : wh) w = normal(rng);
    weights.upload(wh.data(), wh.size() * 4);
  }
  hist.fill(0);

  std::vector<std::int32_t> ids(static_cast<std::size_t>(pool_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<LogitsBenchRow> rows;
  for (int batch : o.batches) {
    for (int length : o.lengths) {
      // Lengths uniform in [0.7, 1.3] L; block ids shuffled over the whole pool.
      std::uniform_int_distribution<int> len_dist(length * 7 / 10, length * 13 / 10);
      std::vector<std::int32_t> lh(batch);
      for (auto& l : lh) l = len_dist(rng);
      const std::int64_t width = (*std::max_element(lh.begin(), lh.end()) + kBlock - 1) / kBlock * kBlock;
      const std::int64_t max_blocks = width / kBlock;
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<std::int32_t> th(static_cast<std::size_t>(batch * max_blocks));
      for (std::size_t i = 0; i < th.size(); ++i) th[i] = ids[i % ids.size()];
      lens.upload(lh.data(), lh.size() * 4);
      table.upload(th.data(), th.size() * 4);
      std::int64_t blocks_read = 0;
      for (auto l : lh) blocks_read += (l + kBlock - 1) / kBlock;

      for (int next_n : o.next_ns) {
        for (int heads : o.heads) {
          for (int histogram : o.histogram) {
            for (LogitsDType dtype : o.dtypes) {
              const std::int64_t rows_n = static_cast<std::int64_t>(batch) * next_n;
              const auto qv = TensorView::contiguous(q.data(), DType::fp8_e4m3, {batch, next_n, heads, dim});
              const auto kv = TensorView::contiguous(pool.data(), DType::u8, {pool_blocks, kBlock, 1, dim + 4});
              const auto wv = TensorView::contiguous(weights.data(), DType::f32, {rows_n, heads});
              const auto lv = TensorView::contiguous(lens.data(), DType::i32, {batch});
              const auto tv = TensorView::contiguous(table.data(), DType::i32, {batch, max_blocks});
              const auto ov = TensorView::contiguous(logits.data(), tensor_dtype(dtype), {rows_n, width});
              PagedMqaLogitsOptions opt;
              if (histogram) opt.histogram = TensorView::contiguous(hist.data(), DType::i32, {rows_n, kCoarseBins});
              auto time_variant = [&](PagedMqaLogitsVariant variant) {
                opt.variant = variant;
                return time_graph(
                           gpu, [&](CUstream s) { paged_mqa_logits(qv, kv, wv, lv, tv, ov, s, opt); }, o.replays,
                           flush.get())
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
              PagedMqaLogitsConfig config{next_n, heads, dim, kBlock, r.histogram, dtype, current_device_arch(), PagedMqaLogitsVariant::automatic};
              r.kernel = config.resolved().key();
              r.us = time_variant(PagedMqaLogitsVariant::automatic);
              std::int64_t live = 0;
              for (auto l : lh)
                for (int j = 0; j < next_n; ++j) live += std::clamp<std::int64_t>(l - next_n + j + 1, 0, width);
              r.bytes = static_cast<double>(blocks_read) * block_bytes +
                        static_cast<double>(live) * (dtype == LogitsDType::f32 ? 4 : 2) +
                        static_cast<double>(rows_n) * heads * (dim + 4) + static_cast<double>(batch) * max_blocks * 4;
              r.flops = 2.0 * blocks_read * kBlock * next_n * heads * dim;
              r.gbps = r.bytes / (r.us * 1e-6) / 1e9;
              r.bandwidth_fraction = r.bytes / (r.us * 1e-6) / read_bandwidth;
              r.tflops = r.flops / (r.us * 1e-6) / 1e12;
              r.floor_us = std::max(r.bytes / read_bandwidth, r.flops / kTensorFlops) * 1e6;
              if (o.compare_portable) r.portable_us = time_variant(PagedMqaLogitsVariant::portable);
              rows.push_back(r);
              if (on_row) on_row(r);
            }
          }
        }
      }
    }
  }
  return rows;
}

}  // namespace flash_indexer::bench
