#include "recall.hpp"

#include <algorithm>
#include <numeric>

#include "flash_indexer/topk.hpp"
#include "logits_check.hpp"

namespace flash_indexer::check {
namespace {

// The logits kernel (with its histogram) then the selector (using it), for one stored dtype.
std::vector<std::int32_t> indexer_topk(GpuSession& gpu, const LogitsCase& base, const HostInputs& in, LogitsDType dtype,
                                       int k) {
  LogitsCase c = base;
  c.config.logits = dtype;
  c.config.histogram = true;
  DeviceInputs d = upload(in, c);
  const LogitsViews v = views(d, in, c);
  const std::int64_t rows = in.batch;
  DeviceBuffer hist(static_cast<std::size_t>(rows) * kCoarseBins * 4), indices(static_cast<std::size_t>(rows) * k * 4),
      workspace(topk_workspace_bytes(rows));
  hist.fill(0);
  PagedMqaLogitsOptions lo;
  lo.histogram = TensorView::contiguous(hist.data(), DType::i32, {rows, kCoarseBins});
  paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, gpu.stream(), lo);
  TopkOptions to;
  to.histogram = lo.histogram;
  to.sorted = true;
  topk(v.logits, v.context_lens, TensorView::contiguous(indices.data(), DType::i32, {rows, k}),
       TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())}), gpu.stream(), to);
  gpu.synchronize();
  return indices.to_host<std::int32_t>(static_cast<std::size_t>(rows) * k);
}

}  // namespace

std::vector<RecallSummary> measure_recall(GpuSession& gpu, const RecallOptions& options) {
  std::vector<RecallSummary> out;
  std::uint64_t seed = options.seed;
  const int k = options.k;
  for (int length : options.lengths) {
    LogitsCase c;
    c.config = {1, options.heads, options.head_dim, 64, true, LogitsDType::f32, {}};
    c.lengths.assign(options.rows, length);
    c.lens_2d = false;
    c.width = length;
    c.row_padding = 0;
    c.spare_blocks = 0;
    c.block_stride_padding = 0;
    c.seed = seed++;
    const HostInputs in = make_inputs(c);
    const std::vector<std::int32_t> truth = indexer_topk(gpu, c, in, LogitsDType::f32, k);
    for (LogitsDType dtype : {LogitsDType::f16, LogitsDType::bf16}) {
      const std::vector<std::int32_t> got = indexer_topk(gpu, c, in, dtype, k);
      std::vector<double> recalls;
      std::vector<int> changed;
      for (int r = 0; r < options.rows; ++r) {
        const auto t0 = truth.begin() + static_cast<std::ptrdiff_t>(r) * k, g0 = got.begin() + static_cast<std::ptrdiff_t>(r) * k;
        const int want = static_cast<int>(std::count_if(t0, t0 + k, [](std::int32_t i) { return i >= 0; }));
        std::vector<std::int32_t> common;
        std::set_intersection(t0, t0 + want, g0, g0 + want, std::back_inserter(common));  // both sorted ascending
        recalls.push_back(want > 0 ? static_cast<double>(common.size()) / want : 1.0);
        changed.push_back(want - static_cast<int>(common.size()));
      }
      RecallSummary s;
      s.length = length;
      s.dtype = dtype;
      s.rows = options.rows;
      s.mean = std::accumulate(recalls.begin(), recalls.end(), 0.0) / recalls.size();
      std::vector<double> sorted = recalls;
      std::sort(sorted.begin(), sorted.end());
      s.median = sorted.size() % 2 ? sorted[sorted.size() / 2] : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
      s.worst = sorted.front();
      s.mean_changed = std::accumulate(changed.begin(), changed.end(), 0.0) / changed.size();
      s.max_changed = *std::max_element(changed.begin(), changed.end());
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace flash_indexer::check
