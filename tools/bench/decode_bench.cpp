#include "decode_bench.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>

#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "flash_indexer/top_blocks.hpp"
#include "gpu_timer.hpp"
#include "paged_inputs.hpp"

namespace flash_indexer::bench {

namespace {

// The two-level mode's candidates: per query row (MTP rule: row b * next_n + j sees lengths[b] - next_n
// + j + 1 positions) `count` distinct blocks of `block` positions drawn uniformly from its context, in
// ascending order (as the first level publishes them), -1 past the row's blocks. Returns the live
// candidate positions over all rows.
std::int64_t draw_candidates(const std::vector<std::int32_t>& lengths, int next_n, int count, int block, std::mt19937_64& rng,
                             std::vector<std::int32_t>& out) {
  const std::int64_t rows = static_cast<std::int64_t>(lengths.size()) * next_n;
  out.assign(static_cast<std::size_t>(rows * count), -1);
  std::vector<std::int32_t> all;
  std::int64_t live = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t len = std::max<std::int64_t>(0, lengths[r / next_n] - next_n + r % next_n + 1);
    const std::int32_t blocks = static_cast<std::int32_t>((len + block - 1) / block);
    all.resize(blocks);
    for (std::int32_t i = 0; i < blocks; ++i) all[i] = i;
    std::int32_t* row = out.data() + r * count;
    const std::int32_t* end = std::sample(all.begin(), all.end(), row, std::min(count, blocks), rng);  // keeps their order
    for (const std::int32_t* c = row; c != end; ++c)
      live += std::min<std::int64_t>(block, len - static_cast<std::int64_t>(*c) * block);
  }
  return live;
}

}  // namespace

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
  const std::int64_t max_rows = static_cast<std::int64_t>(max_batch) * max_next_n;
  check::DeviceBuffer indices(static_cast<std::size_t>(max_rows) * o.k * 4);
  // The two-level mode's candidates.
  check::DeviceBuffer candidates(o.two_level > 0 ? static_cast<std::size_t>(max_rows) * o.two_level * 4 : 16);
  std::vector<std::int32_t> host_candidates;
  check::DeviceBuffer read_xor(o.two_level > 0 ? static_cast<std::size_t>(sparse_read_warps()) * 4 : 16);
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
    // The two-level mode's second-level plan of the cell (a shape the sparse op does not build is skipped).
    // Two kernels, and the sparse decode step beside them where it applies to the cell.
    std::optional<DecodePlan> second, second_step;
    if (o.two_level > 0) {
      DecodePlanConfig sc = pc;
      sc.candidates = o.two_level;
      sc.candidate_block = o.candidate_block;
      sc.step = DecodeStep::two_kernels;
      try {
        second.emplace(sc);
      } catch (const ArgumentError& e) {
        if (on_skip) on_skip(s, e.what());
        continue;
      }
      sc.step = DecodeStep::one_pass;
      try {
        second_step.emplace(sc);
      } catch (const ArgumentError&) {
      }
    }
    // The one-pass step beside it, where it applies to the cell (DecodeStep::one_pass); not in the
    // two-level mode, whose cells time the second level instead.
    pc.step = DecodeStep::one_pass;
    std::optional<DecodePlan> one;
    try {
      if (o.two_level == 0) one.emplace(pc);
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
    if (second) {
      const std::int64_t live =
          draw_candidates(inputs->lengths(), s.next_n, o.two_level, o.candidate_block, rng, host_candidates);
      candidates.upload(host_candidates.data(), host_candidates.size() * 4);
      const auto cv = TensorView::contiguous(candidates.data(), DType::i32, {rows, o.two_level});
      const auto run_second = [&](const DecodePlan& p) {
        return time_graph(
                   gpu,
                   [&](CUstream st) {
                     if (s.kv == KvFormat::mxfp4) p.run_second_level(q, q_scales, kv, w, lens, table, cv, iv, st);
                     else p.run_second_level(q, kv, w, lens, table, cv, iv, st);
                   },
                   o.replays)
            .median_us;
      };
      r.two_level_us = run_second(*second);
      if (second_step) r.sparse_step_us = run_second(*second_step);
      SparsePagedMqaLogitsOptions so;
      so.q_scales = q_scales;
      so.masked_nan = true;
      const TensorView sv = second->logits(s.batch);
      r.sparse_logits_us =
          time_graph(
              gpu, [&](CUstream st) { sparse_paged_mqa_logits(q, kv, w, lens, table, cv, o.candidate_block, sv, st, so); },
              o.replays)
              .median_us;
      r.candidate_bytes = static_cast<double>(live) * (static_cast<double>(inputs->block_bytes()) / 64);
      r.candidate_floor_us = r.candidate_bytes / read_bandwidth * 1e6;
      const kernels::SparseReadParams read{static_cast<const unsigned char*>(kv.data),
                                           inputs->block_bytes(),
                                           static_cast<const int*>(table.data),
                                           static_cast<const int*>(lens.data),
                                           static_cast<const int*>(cv.data),
                                           s.batch,
                                           s.next_n,
                                           static_cast<int>(table.strides[0]),
                                           o.two_level,
                                           o.candidate_block,
                                           static_cast<int>(inputs->block_bytes() / 64 - 4),
                                           static_cast<unsigned int*>(read_xor.data())};
      r.candidate_read_us = time_sparse_read(gpu, read, nullptr, o.replays).median_us;
      // The first level over the full-context logits: the best blocks of each row, published.
      check::DeviceBuffer published(static_cast<std::size_t>(rows) * o.two_level * 4);
      check::DeviceBuffer blocks_workspace(top_blocks_workspace_bytes(rows, logits.shape[1], o.candidate_block, s.dtype));
      const auto bv = TensorView::contiguous(published.data(), DType::i32, {rows, o.two_level});
      const auto bw =
          TensorView::contiguous(blocks_workspace.data(), DType::u8, {static_cast<std::int64_t>(blocks_workspace.bytes())});
      TopBlocksOptions bo;
      bo.keep_newest = true;
      if (lens.rank == 1) bo.next_n = s.next_n;  // the step's own context_lens
      r.first_level_us = time_graph(
                             gpu,
                             [&](CUstream st) {
                               paged_mqa_logits(q, kv, w, lens, table, logits, st, lo);
                               top_blocks(logits, lens, o.candidate_block, bv, bw, st, bo);
                             },
                             o.replays)
                             .median_us;
    }
    out.push_back(r);
    if (on_row) on_row(r);
  }
  return out;
}

}  // namespace flash_indexer::bench
