#include "prefill_bench.hpp"

#include <algorithm>
#include <random>

#include "flash_indexer/coarse_bins.hpp"
#include "flash_indexer/mqa_logits.hpp"
#include "flash_indexer/prefill_plan.hpp"
#include "flash_indexer/topk.hpp"
#include "gpu_timer.hpp"

namespace flash_indexer::bench {

std::vector<PrefillBenchRow> run_prefill_bench(check::GpuSession& gpu, const PrefillBenchOptions& o,
                                               const std::function<void(const PrefillBenchRow&)>& on_row) {
  std::mt19937_64 rng(o.seed);
  constexpr int kDim = 128;
  const int max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  const int max_n = *std::max_element(o.keys.begin(), o.keys.end());
  const int max_h = *std::max_element(o.heads.begin(), o.heads.end());
  // Valid FP8 values (no NaN bytes), positive scales, weights of both signs.
  std::uniform_int_distribution<int> byte(0, 255), weight(-16, 16);
  auto fp8 = [&] {
    int b = byte(rng);
    while ((b & 0x7f) == 0x7f) b = byte(rng);
    return static_cast<std::uint8_t>(b);
  };
  std::vector<std::uint8_t> q(static_cast<std::size_t>(max_t) * max_h * kDim), kv(static_cast<std::size_t>(max_n) * kDim);
  for (auto& b : q) b = fp8();
  for (auto& b : kv) b = fp8();
  std::vector<float> scales(max_n, 1.0f / 256), w(static_cast<std::size_t>(max_t) * max_h);
  for (auto& x : w) x = weight(rng) / 16.0f;
  auto dq = check::DeviceBuffer::from(q), dkv = check::DeviceBuffer::from(kv), ds = check::DeviceBuffer::from(scales),
       dw = check::DeviceBuffer::from(w);
  check::DeviceBuffer ks(static_cast<std::size_t>(max_t) * 4), ke(static_cast<std::size_t>(max_t) * 4),
      indices(static_cast<std::size_t>(max_t) * o.k * 4);
  std::vector<PrefillBenchRow> out;
  for (int tokens : o.tokens) {
    for (int keys : o.keys) {
      if (tokens > keys) continue;  // causal: every token sees at least one key
      std::vector<std::int32_t> starts(tokens, 0), ends(tokens);
      double window_keys = 0;
      for (int t = 0; t < tokens; ++t) {
        ends[t] = keys - tokens + t + 1;
        window_keys += ends[t];
      }
      ks.upload(starts.data(), starts.size() * 4);
      ke.upload(ends.data(), ends.size() * 4);
      for (int heads : o.heads) {
        for (LogitsDType dtype : o.dtypes) {
          const std::size_t elem = dtype == LogitsDType::f32 ? 4 : 2;
          check::DeviceBuffer logits(static_cast<std::size_t>(tokens) * keys * elem);
          const TensorView qv = TensorView::contiguous(dq.data(), DType::fp8_e4m3, {tokens, heads, kDim});
          const TensorView kvv = TensorView::contiguous(dkv.data(), DType::fp8_e4m3, {keys, kDim});
          const TensorView sv = TensorView::contiguous(ds.data(), DType::f32, {keys});
          const TensorView wv = TensorView::contiguous(dw.data(), DType::f32, {tokens, heads});
          const TensorView ksv = TensorView::contiguous(ks.data(), DType::i32, {tokens});
          const TensorView kev = TensorView::contiguous(ke.data(), DType::i32, {tokens});
          const TensorView lv = TensorView::contiguous(logits.data(), tensor_dtype(dtype), {tokens, keys});
          PrefillBenchRow r;
          r.tokens = tokens;
          r.keys = keys;
          r.heads = heads;
          r.head_dim = kDim;
          r.k = o.k;
          r.dtype = dtype;
          r.flops = 2.0 * heads * kDim * window_keys;
          mqa_logits(qv, kvv, sv, wv, ksv, kev, lv, gpu.stream());  // loads the kernel before capture
          r.logits_us = time_graph(gpu, [&](CUstream s) { mqa_logits(qv, kvv, sv, wv, ksv, kev, lv, s); }, o.replays).median_us;
          r.tflops = r.flops / (r.logits_us * 1e-6) / 1e12;
          {
            check::DeviceBuffer hist(static_cast<std::size_t>(tokens) * kCoarseBins * 4);
            hist.fill(0);  // the counts add up over the replays; only the time matters here
            MqaLogitsOptions ho;
            ho.histogram = TensorView::contiguous(hist.data(), DType::i32, {tokens, kCoarseBins});
            mqa_logits(qv, kvv, sv, wv, ksv, kev, lv, gpu.stream(), ho);
            r.hist_us =
                time_graph(gpu, [&](CUstream s) { mqa_logits(qv, kvv, sv, wv, ksv, kev, lv, s, ho); }, o.replays).median_us;
          }
          {
            const std::size_t ws_bytes = topk_workspace_bytes(tokens);
            check::DeviceBuffer ws(ws_bytes);
            const TensorView wsv = TensorView::contiguous(ws.data(), DType::u8, {static_cast<std::int64_t>(ws_bytes)});
            const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {tokens, o.k});
            TopkOptions to;
            to.row_starts = ksv;
            topk(lv, kev, iv, wsv, gpu.stream(), to);  // loads the selector before capture
            r.separate_us = time_graph(
                                gpu,
                                [&](CUstream s) {
                                  mqa_logits(qv, kvv, sv, wv, ksv, kev, lv, s);
                                  topk(lv, kev, iv, wsv, s, to);
                                },
                                o.replays)
                                .median_us;
            r.separate_bytes = static_cast<double>(tokens) * keys * elem + static_cast<double>(ws_bytes);
          }
          PrefillPlanConfig pc;
          pc.heads = heads;
          pc.head_dim = kDim;
          pc.k = o.k;
          pc.logits = dtype;
          pc.max_tokens = tokens;
          pc.max_keys = keys;
          pc.logits_bytes = std::max(o.plan_logits_bytes, static_cast<std::size_t>((keys + 63) / 64 * 64) * elem);
          const PrefillPlan plan(pc);
          r.chunk_tokens = plan.chunk_tokens();
          r.plan_bytes = static_cast<double>(plan.workspace_bytes());
          const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {tokens, o.k});
          r.plan_us = time_graph(gpu, [&](CUstream s) { plan.run(qv, kvv, sv, wv, ksv, kev, iv, s); }, o.replays).median_us;
          out.push_back(r);
          if (on_row) on_row(r);
        }
      }
    }
  }
  return out;
}

}  // namespace flash_indexer::bench
