#include "decode_bench.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>

#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "gpu_timer.hpp"
#include "paged_inputs.hpp"

namespace flash_indexer::bench {

std::vector<DecodeShape> decode_shapes(const DecodeBenchOptions& o) {
  std::vector<DecodeShape> out;
  for (KvFormat kv : o.kvs)
    for (int batch : o.batches)
      for (int length : o.lengths)
        for (int heads : o.heads)
          for (int next_n : o.next_ns)
            for (LogitsDType dtype : o.dtypes)
              for (int histogram : o.histogram)
                for (int pdl : o.pdl) out.push_back({heads, next_n, batch, length, dtype, histogram != 0, pdl != 0, kv});
  return out;
}

DecodePlanConfig decode_plan_config(const DecodeShape& s, int k, std::int64_t max_context) {
  DecodePlanConfig pc;
  pc.max_batch = s.batch;
  pc.next_n = s.next_n;
  pc.heads = s.heads;
  pc.head_dim = kDecodeHeadDim;
  pc.k = k;
  pc.logits = s.dtype;
  pc.max_context = max_context;
  pc.histogram = s.histogram;
  pc.pdl = s.pdl;
  pc.kv = s.kv;
  return pc;
}

std::vector<DecodeBenchRow> run_decode_bench(check::GpuSession& gpu, const DecodeBenchOptions& o, double read_bandwidth,
                                             const std::function<void(const DecodeBenchRow&)>& on_row,
                                             const std::function<void(const DecodeShape&, const std::string&)>& on_skip) {
  std::mt19937_64 rng(o.seed);
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  const int max_length = *std::max_element(o.lengths.begin(), o.lengths.end());
  const int max_next_n = *std::max_element(o.next_ns.begin(), o.next_ns.end());
  const int max_heads = *std::max_element(o.heads.begin(), o.heads.end());
  std::unique_ptr<PagedInputs> inputs;  // one key cache's at a time (the pool is several times L2)
  check::DeviceBuffer indices(static_cast<std::size_t>(max_batch) * max_next_n * o.k * 4);
  std::vector<DecodeBenchRow> out;
  int drawn_batch = -1, drawn_length = -1;
  for (const DecodeShape& s : decode_shapes(o)) {
    if (!inputs || inputs->kv() != s.kv) {
      inputs.reset();
      inputs = std::make_unique<PagedInputs>(max_batch, max_length, max_next_n, max_heads, kDecodeHeadDim, s.kv, rng, o.values);
      drawn_batch = -1;
    }
    if (s.batch != drawn_batch || s.length != drawn_length) {
      inputs->draw(s.batch, s.length, false, rng, 0, o.ragged);
      drawn_batch = s.batch;
      drawn_length = s.length;
    }
    DecodePlanConfig pc = decode_plan_config(s, o.k, inputs->width());
    std::optional<DecodePlan> plan_slot;
    try {
      plan_slot.emplace(pc);
    } catch (const ArgumentError& e) {
      if (on_skip) on_skip(s, e.what());
      continue;
    }
    const DecodePlan& plan = *plan_slot;
    // The one-pass step beside it, where it applies to the cell (DecodeStep::one_pass).
    pc.step = DecodeStep::one_pass;
    std::optional<DecodePlan> one;
    try {
      one.emplace(pc);
    } catch (const ArgumentError&) {
    }
    const auto q = inputs->q(s.next_n, s.heads);
    const auto q_scales = inputs->q_scales(s.next_n, s.heads);
    const auto kv = inputs->kv_cache();
    const auto w = inputs->weights(s.next_n, s.heads);
    const auto lens = inputs->context_lens();
    const auto table = inputs->block_table();
    const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.next_n;
    const auto iv = TensorView::contiguous(indices.data(), DType::i32, {rows, o.k});
    // The MXFP4 plans take the query's exponents (DecodePlan::run's q_scales form).
    const auto run = [&](const DecodePlan& p, CUstream st) {
      if (s.kv == KvFormat::mxfp4) p.run(q, q_scales, kv, w, lens, table, iv, st);
      else p.run(q, kv, w, lens, table, iv, st);
    };
    DecodeBenchRow r;
    r.shape = s;
    r.k = o.k;
    r.us = time_graph(gpu, [&](CUstream st) { run(plan, st); }, o.replays).median_us;
    if (one) r.one_pass_us = time_graph(gpu, [&](CUstream st) { run(*one, st); }, o.replays).median_us;
    // The logits alone, as an engine computes them today: no histogram.
    const TensorView logits = plan.logits(s.batch);
    PagedMqaLogitsOptions lo;
    lo.q_scales = q_scales;
    r.logits_us =
        time_graph(gpu, [&](CUstream st) { paged_mqa_logits(q, kv, w, lens, table, logits, st, lo); }, o.replays).median_us;
    r.plan_bytes_per_row = static_cast<double>(plan.workspace_bytes()) / (static_cast<double>(pc.max_batch) * pc.next_n);
    if (one)
      r.one_pass_bytes_per_row = static_cast<double>(one->workspace_bytes()) / (static_cast<double>(pc.max_batch) * pc.next_n);
    r.kv_bytes = static_cast<double>(inputs->blocks_read()) * inputs->block_bytes();
    r.kv_floor_us = r.kv_bytes / read_bandwidth * 1e6;
    out.push_back(r);
    if (on_row) on_row(r);
  }
  return out;
}

}  // namespace flash_indexer::bench
