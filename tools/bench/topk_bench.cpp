#include "topk_bench.hpp"

#include <algorithm>
#include <cstring>
#include <random>

#include "flash_indexer/reference.hpp"
#include "flash_indexer/topk.hpp"
#include "gpu_timer.hpp"
#include "topk_call.hpp"

namespace flash_indexer::bench {

std::vector<TopkBenchRow> run_topk_bench(check::GpuSession& gpu, const TopkBenchOptions& o, double read_bandwidth,
                                         const std::function<void(const TopkBenchRow&)>& on_row) {
  std::mt19937_64 rng(o.seed);
  const bool any_histogram = std::find(o.histogram.begin(), o.histogram.end(), 1) != o.histogram.end();
  const int max_k = *std::max_element(o.ks.begin(), o.ks.end());
  std::vector<TopkBenchRow> out;
  for (int rows : o.rows) {
    for (int length : o.lengths) {
      const int width = std::max(o.width, length);
      for (int ragged : o.ragged) {
        for (const std::string& input : o.inputs) {
          for (LogitsDType dtype : o.dtypes) {
            std::vector<std::int64_t> lens(rows);
            std::uniform_int_distribution<int> len_dist(ragged ? length / 2 : length, length);
            for (auto& l : lens) l = len_dist(rng);
            const std::size_t count = static_cast<std::size_t>(rows) * width;
            const std::size_t element = dtype == LogitsDType::f32 ? 4 : 2;
            std::vector<std::uint8_t> bytes(count * element);  // columns past a row's length: zeros, never read
            std::vector<double> stored(any_histogram ? count : 0);
            std::normal_distribution<float> normal(0.0f, 1.0f);
            const bool relu = input == "relu";
            for (std::size_t i = 0; i < count; ++i) {
              if (static_cast<std::int64_t>(i % width) >= lens[i / width]) continue;
              // relu: scores like an indexer's, a ReLU-weighted sum, many near zero, a heavy upper tail.
              const float x = relu ? std::max(normal(rng), 0.0f) * 3.0f + 0.25f * normal(rng) : normal(rng);
              if (dtype == LogitsDType::f32) {
                std::memcpy(bytes.data() + i * 4, &x, 4);
              } else {
                const std::uint16_t h =
                    dtype == LogitsDType::f16 ? reference::float_to_f16_bits(x) : reference::float_to_bf16_bits(x);
                std::memcpy(bytes.data() + i * 2, &h, 2);
              }
              if (any_histogram) stored[i] = reference::load_logit(dtype, bytes.data(), i);
            }
            check::DeviceBuffer logits = check::DeviceBuffer::from(bytes);
            std::vector<std::int32_t> lens32(lens.begin(), lens.end());
            check::DeviceBuffer lengths = check::DeviceBuffer::from(lens32);
            std::vector<std::int32_t> hist_host;
            if (any_histogram) reference::add_coarse_histogram(stored, width, lens, dtype, hist_host);
            check::DeviceBuffer hist = check::DeviceBuffer::from(hist_host);
            check::DeviceBuffer indices(static_cast<std::size_t>(rows) * max_k * 4), workspace(topk_workspace_bytes(rows));
            std::int64_t live = 0;
            for (auto l : lens) live += l;
            for (int k : o.ks) {
              for (int histogram : o.histogram) {
                for (int split : o.splits) {
                  TopkOptions options;
                  options.split = split;
                  if (histogram) options.histogram = TensorView::contiguous(hist.data(), DType::i32, {rows, kCoarseBins});
                  const auto lv = TensorView::contiguous(logits.data(), tensor_dtype(dtype), {rows, width});
                  const auto nv = TensorView::contiguous(lengths.data(), DType::i32, {rows});
                  const auto iv = TensorView::contiguous(indices.data(), DType::i32, {rows, k});
                  const auto wv =
                      TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())});
                  TopkBenchRow r;
                  r.rows = rows;
                  r.length = length;
                  r.k = k;
                  r.dtype = dtype;
                  r.histogram = histogram != 0;
                  r.ragged = ragged != 0;
                  r.input = input;
                  r.width = width;
                  // What topk() launches: the automatic split may grow to keep rows resident.
                  const TopkChoice choice =
                      choose_topk_kernel(rows, width, dtype, topk_device("bench topk", dtype, nullptr), split);
                  r.split = choice.split;
                  r.split_name = (split != 0 ? "" : "a") + std::to_string(choice.split);
                  r.selector = choice.registers  ? (choice.wide ? "regw" : "reg")
                               : choice.wide     ? "wide"
                               : choice.resident ? "res"
                               : choice.filter   ? "flt"
                                                 : "str";
                  r.us = time_graph(gpu, [&](CUstream s) { topk(lv, nv, iv, wv, s, options); }, o.replays).median_us;
                  for (const TopkRowReport& report : workspace.to_host<TopkRowReport>(static_cast<std::size_t>(rows))) {
                    r.sampled_rows += report.threshold_count == -1;
                    r.extra_pass_rows += report.row_passes > 0;
                  }
                  r.bytes = static_cast<double>(live) * element + static_cast<double>(rows) * k * 4 +
                            (histogram ? static_cast<double>(rows) * kCoarseBins * 4 : 0.0);
                  r.gbps = r.bytes / (r.us * 1e-6) / 1e9;
                  r.bandwidth_fraction = r.bytes / (r.us * 1e-6) / read_bandwidth;
                  out.push_back(r);
                  if (on_row) on_row(r);
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace flash_indexer::bench
