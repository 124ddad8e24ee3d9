#include "recall.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "flash_indexer/reference.hpp"
#include "flash_indexer/topk.hpp"
#include "logits_check.hpp"

namespace flash_indexer::check {
namespace {

// The logits kernel (with its histogram) then the selector (using it), for one stored dtype.
std::vector<std::int32_t> indexer_topk(GpuSession& gpu, const LogitsCase& base, const HostInputs& in, LogitsDType dtype, int k) {
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
  lo.q_scales = v.q_scales;  // MXFP4 only
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

// Recall of the `truth` set per row, summarized.
RecallSummary summarize(const std::vector<std::int32_t>& truth, const std::vector<std::int32_t>& got, int rows, int k) {
  std::vector<double> recalls;
  std::vector<int> changed;
  for (int r = 0; r < rows; ++r) {
    const auto t0 = truth.begin() + static_cast<std::ptrdiff_t>(r) * k, g0 = got.begin() + static_cast<std::ptrdiff_t>(r) * k;
    const int want = static_cast<int>(std::count_if(t0, t0 + k, [](std::int32_t i) { return i >= 0; }));
    std::vector<std::int32_t> common;
    std::set_intersection(t0, t0 + want, g0, g0 + want, std::back_inserter(common));  // both sorted ascending
    recalls.push_back(want > 0 ? static_cast<double>(common.size()) / want : 1.0);
    changed.push_back(want - static_cast<int>(common.size()));
  }
  RecallSummary s;
  s.rows = rows;
  s.mean = std::accumulate(recalls.begin(), recalls.end(), 0.0) / recalls.size();
  std::vector<double> sorted = recalls;
  std::sort(sorted.begin(), sorted.end());
  s.median = sorted.size() % 2 ? sorted[sorted.size() / 2] : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  s.worst = sorted.front();
  s.mean_changed = std::accumulate(changed.begin(), changed.end(), 0.0) / changed.size();
  s.max_changed = *std::max_element(changed.begin(), changed.end());
  return s;
}

LogitsCase recall_case(const RecallOptions& options, int length, std::uint64_t seed) {
  LogitsCase c;
  c.config = {1, options.heads, options.head_dim, 64, true, LogitsDType::f32, {}};
  c.lengths.assign(options.rows, length);
  c.lens_2d = false;
  c.width = length;
  c.row_padding = 0;
  c.spare_blocks = 0;
  c.block_stride_padding = 0;
  c.seed = seed;
  return c;
}

// The MXFP4 form of FP8 inputs: every key's dequantized values (FP8 byte times the token's scale) and
// every query head's FP8 values, quantized to MXFP4; the blocks keep their ids.
HostInputs mxfp4_of(const HostInputs& fp8, const LogitsCase& c) {
  constexpr int kBlock = 64;
  const int dim = c.config.head_dim, heads = c.config.heads;
  HostInputs m = fp8;
  m.block_stride = kBlock * (dim / 2 + 4);
  m.kv_cache.assign(static_cast<std::size_t>(m.num_blocks) * m.block_stride, 0);
  std::vector<float> values(dim);
  for (int b = 0; b < m.num_blocks; ++b) {
    const std::uint8_t* from = fp8.kv_cache.data() + static_cast<std::size_t>(b) * fp8.block_stride;
    std::uint8_t* to = m.kv_cache.data() + static_cast<std::size_t>(b) * m.block_stride;
    for (int t = 0; t < kBlock; ++t) {
      float scale;
      std::memcpy(&scale, from + kBlock * dim + 4 * t, 4);
      for (int d = 0; d < dim; ++d) values[d] = reference::fp8_e4m3_to_float(from[t * dim + d]) * scale;
      const std::int32_t exponents = reference::mxfp4_quantize(values.data(), dim, to + t * (dim / 2));
      std::memcpy(to + kBlock * (dim / 2) + 4 * t, &exponents, 4);
    }
  }
  const std::size_t query_heads = static_cast<std::size_t>(fp8.batch) * c.config.next_n * heads;
  m.q.assign(query_heads * dim / 2, 0);
  m.q_scales.assign(query_heads, 0);
  for (std::size_t h = 0; h < query_heads; ++h) {
    for (int d = 0; d < dim; ++d) values[d] = reference::fp8_e4m3_to_float(fp8.q[h * dim + d]);
    m.q_scales[h] = reference::mxfp4_quantize(values.data(), dim, m.q.data() + h * (dim / 2));
  }
  return m;
}

}  // namespace

std::vector<RecallSummary> measure_mxfp4_recall(GpuSession& gpu, const RecallOptions& options) {
  std::vector<RecallSummary> out;
  std::uint64_t seed = options.seed;
  for (int length : options.lengths) {
    LogitsCase c = recall_case(options, length, seed++);
    const HostInputs in = make_inputs(c);
    const std::vector<std::int32_t> truth = indexer_topk(gpu, c, in, LogitsDType::f32, options.k);
    LogitsCase m = c;
    m.config.kv = KvFormat::mxfp4;
    const std::vector<std::int32_t> got = indexer_topk(gpu, m, mxfp4_of(in, c), LogitsDType::f32, options.k);
    RecallSummary s = summarize(truth, got, options.rows, options.k);
    s.length = length;
    s.dtype = LogitsDType::f32;
    s.kv = KvFormat::mxfp4;
    out.push_back(s);
  }
  return out;
}

std::vector<RecallSummary> measure_recall(GpuSession& gpu, const RecallOptions& options) {
  std::vector<RecallSummary> out;
  std::uint64_t seed = options.seed;
  for (int length : options.lengths) {
    const LogitsCase c = recall_case(options, length, seed++);
    const HostInputs in = make_inputs(c);
    const std::vector<std::int32_t> truth = indexer_topk(gpu, c, in, LogitsDType::f32, options.k);
    for (LogitsDType dtype : {LogitsDType::f16, LogitsDType::bf16}) {
      RecallSummary s = summarize(truth, indexer_topk(gpu, c, in, dtype, options.k), options.rows, options.k);
      s.length = length;
      s.dtype = dtype;
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace flash_indexer::check
