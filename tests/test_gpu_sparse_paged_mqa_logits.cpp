// GPU tests of sparse_paged_mqa_logits (the second level of two-level indexing, docs/design/two-level.md)
// against the CPU reference and the full-context op: every configuration, fresh random inputs, ragged
// lengths with 0, candidate lists with every kind of entry (the last partial block, duplicates, -1,
// negative, past the row, all invalid), table slots past the live range that would fault if read, an id
// outside the cache (NaN), poisoned outputs; and the second level's top-k in one call (masked columns
// NaN, topk() mapping its columns through the candidates) against the reference; and DecodePlan's
// second level (config.candidates), eager and replayed in a CUDA graph.
#include "catch_compat.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "driver.hpp"
#include "flash_indexer/decode_plan.hpp"
#include "flash_indexer/error.hpp"
#include "flash_indexer/reference.hpp"
#include "flash_indexer/sparse_paged_mqa_logits.hpp"
#include "flash_indexer/topk.hpp"
#include "logits_check.hpp"
#include "sparse_candidates.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;
namespace ref = flash_indexer::reference;
using test::make_candidates;
using test::stored_value;

namespace {

ck::GpuSession& session() { return test::gpu_session(); }

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

void run_sparse_case(const SparsePagedMqaLogitsConfig& config, int next_n, bool lens_2d, std::vector<int> lengths,
                     int num_candidates, bool exact, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  ck::LogitsCase c;
  c.config = {next_n, config.heads, config.head_dim, 64, false, config.logits, {}, PagedMqaLogitsVariant::portable, config.kv};
  c.lens_2d = lens_2d;
  c.lengths = std::move(lengths);
  c.exact_values = exact;
  c.seed = rng();
  ck::HostInputs host = ck::make_inputs(c);
  if (host.max_blocks > 1) host.block_table[1] = host.num_blocks;  // request 0's keys 64..127: NaN where live
  const ref::PagedMqaLogitsInputs in = host.reference_view(c);
  const int rows = host.batch * next_n;
  std::vector<std::int64_t> lens(rows);
  for (int r = 0; r < rows; ++r) lens[r] = ref::row_length(in, r / next_n, r % next_n);
  const int block = config.candidate_block;
  const std::vector<std::int32_t> candidates = make_candidates(lens, num_candidates, block, rng);
  const std::vector<double> expected = ref::sparse_paged_mqa_logits(in, candidates.data(), num_candidates, block);
  INFO(ck::describe(c) << " candidate_block " << block << " C " << num_candidates);

  ck::DeviceInputs d = ck::upload(host, c);
  const ck::LogitsViews v = ck::views(d, host, c);
  // Candidates and logits with padded rows: the padding must keep its poison.
  const std::int64_t cstride = num_candidates + 3, columns = static_cast<std::int64_t>(num_candidates) * block,
                     ostride = columns + 8;
  std::vector<std::int32_t> padded(static_cast<std::size_t>(rows * cstride), -1);
  for (int r = 0; r < rows; ++r)
    std::copy_n(candidates.begin() + static_cast<std::ptrdiff_t>(r) * num_candidates, num_candidates,
                padded.begin() + r * cstride);
  ck::DeviceBuffer dc = ck::DeviceBuffer::from(padded);
  const std::size_t elem = config.logits == LogitsDType::f32 ? 4 : 2;
  ck::DeviceBuffer out(static_cast<std::size_t>(rows) * ostride * elem + 16);
  out.fill(ck::kPoison);
  ck::DeviceBuffer hist(static_cast<std::size_t>(rows) * kCoarseBins * 4 + 16);
  hist.fill(0);
  const TensorView cv{dc.data(), DType::i32, 2, {rows, num_candidates}, {cstride, 1}};
  const TensorView ov{out.data(), tensor_dtype(config.logits), 2, {rows, columns}, {ostride, 1}};
  SparsePagedMqaLogitsOptions options;
  options.q_scales = v.q_scales;
  options.variant = config.variant;
  if (config.histogram) options.histogram = TensorView::contiguous(hist.data(), DType::i32, {rows, kCoarseBins});
  sparse_paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, block, ov, session().stream(), options);
  session().synchronize();
  const std::vector<std::uint8_t> got = out.to_host<std::uint8_t>(out.bytes());

  // The full-context op's logits by the kernel of the same variant: the same arithmetic in the same order.
  PagedMqaLogitsOptions full_options;
  full_options.q_scales = v.q_scales;
  full_options.variant = config.variant;
  d.logits.fill(ck::kPoison);
  paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, session().stream(), full_options);
  session().synchronize();
  const std::vector<std::uint8_t> full = d.logits.to_host<std::uint8_t>(d.logits.bytes());

  std::vector<std::int32_t> counts(static_cast<std::size_t>(rows) * kCoarseBins, 0);
  std::int64_t live = 0, masked = 0, nan = 0;
  for (int r = 0; r < rows; ++r) {
    for (std::int64_t col = 0; col < ostride; ++col) {
      if (col >= columns) {  // row padding
        for (std::size_t b = 0; b < elem; ++b) REQUIRE(got[(r * ostride + col) * elem + b] == ck::kPoison);
        continue;
      }
      const float g = stored_value(got, config.logits, r * ostride + col);
      const double e = expected[static_cast<std::size_t>(r * columns + col)];
      INFO("row " << r << " column " << col << " candidate " << candidates[r * num_candidates + col / block]);
      if (e == -INFINITY) {
        REQUIRE(g == -INFINITY);
        ++masked;
        continue;
      }
      const std::int64_t pos = static_cast<std::int64_t>(candidates[r * num_candidates + col / block]) * block + col % block;
      const float f = stored_value(full, config.logits, r * host.logits_stride + pos);
      REQUIRE(same_bits(g, f));  // bitwise the full-context value
      if (exact) REQUIRE(same_bits(g, ref::round_to(config.logits, static_cast<float>(e))));
      if (std::isnan(g)) {
        ++nan;
      } else {
        ++live;
        ++counts[static_cast<std::size_t>(r) * kCoarseBins + coarse_bin(g)];
      }
    }
  }
  CHECK(live > 0);
  CHECK(masked > 0);
  if (config.histogram) CHECK(hist.to_host<std::int32_t>(counts.size()) == counts);
  (void)nan;

  // The second level's top-k in one call: masked columns NaN (never selected), then topk() with the
  // candidates as its table, so the indices are context positions; equal to the reference top-k of
  // those logits mapped through the candidates.
  SparsePagedMqaLogitsOptions nan_options;
  nan_options.q_scales = v.q_scales;
  nan_options.variant = config.variant;
  nan_options.masked_nan = true;
  out.fill(ck::kPoison);
  sparse_paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, block, ov, session().stream(),
                          nan_options);
  session().synchronize();
  const std::vector<std::uint8_t> got_nan = out.to_host<std::uint8_t>(out.bytes());
  std::vector<float> stored(static_cast<std::size_t>(rows) * ostride, NAN);
  for (int r = 0; r < rows; ++r)
    for (std::int64_t col = 0; col < columns; ++col) {
      const float g = stored_value(got_nan, config.logits, r * ostride + col);
      const bool is_masked = expected[static_cast<std::size_t>(r * columns + col)] == -INFINITY;
      INFO("masked_nan row " << r << " column " << col);
      REQUIRE(same_bits(g, is_masked ? NAN : stored_value(got, config.logits, r * ostride + col)));
      stored[static_cast<std::size_t>(r * ostride + col)] = g;
    }
  const int k = static_cast<int>(std::min<std::int64_t>(columns, 3 * block + 5));  // rows with fewer live columns pad
  ck::DeviceBuffer lengths_d = ck::DeviceBuffer::from(std::vector<std::int32_t>(rows, static_cast<std::int32_t>(columns)));
  ck::DeviceBuffer indices(static_cast<std::size_t>(rows) * k * 4);
  indices.fill(ck::kPoison);
  ck::DeviceBuffer workspace(topk_workspace_bytes(rows));
  TopkOptions topk_options;
  topk_options.block_table = cv;
  topk_options.block_size = block;
  topk_options.sorted = true;
  topk(ov, TensorView::contiguous(lengths_d.data(), DType::i32, {rows}),
       TensorView::contiguous(indices.data(), DType::i32, {rows, k}),
       TensorView::contiguous(workspace.data(), DType::u8, {static_cast<std::int64_t>(workspace.bytes())}), session().stream(),
       topk_options);
  session().synchronize();
  const ref::TopkResult want_columns =
      ref::topk(stored, ostride, columns, std::vector<std::int64_t>(rows, columns), k, /*sorted=*/true);
  const std::vector<std::int32_t> want = ref::sparse_positions(want_columns.indices, k, candidates.data(), num_candidates, block);
  REQUIRE(indices.to_host<std::int32_t>(want.size()) == want);
  CHECK(std::count(want.begin(), want.end(), -1) > 0);  // the all-invalid row pads
}

void run_configuration(const SparsePagedMqaLogitsConfig& config) {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  // 2-D lengths, ragged with 0 and one-block rows, exact values (equal to the reference bit for bit).
  run_sparse_case(config, 2, true, {0, 1, 63, 64, 65, 300, 129, 700}, 37, true, rng());
  // 1-D lengths (the MTP rule), random values, more candidates than one tile, a partial last tile.
  run_sparse_case(config, 1, false, {900, 0, 2000, 64, 513}, 133, false, rng());
  run_sparse_case(config, 3, false, {1500, 70}, 96, false, rng());
}

// Enough tiles per row that the sm90 kernel's CTAs take ranges of several tiles and wrap their ring of
// stages (the host's split: runtime/sparse_paged_mqa_logits.cpp), both caches and candidate blocks.
TEST_CASE("gpu: sparse logits over 2048 candidates per row (ranges of tiles per CTA) equal the full-context values",
          "[gpu][logits][sparse]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  for (const SparsePagedMqaLogitsConfig config :
       {SparsePagedMqaLogitsConfig{64, 128, 8, true, LogitsDType::f32, KvFormat::fp8, Arch{9, 0, true},
                                   PagedMqaLogitsVariant::automatic},
        SparsePagedMqaLogitsConfig{32, 128, 16, false, LogitsDType::bf16, KvFormat::mxfp4, Arch{9, 0, true},
                                   PagedMqaLogitsVariant::automatic}}) {
    std::vector<int> lengths(8);
    for (int& len : lengths) len = 12000 + static_cast<int>(rng() % 8000);
    run_sparse_case(config, 2, false, lengths, 2048 * 8 / config.candidate_block, false, rng());
  }
}

const bool registered = [] {
  for (const SparsePagedMqaLogitsConfig& config : supported_sparse_paged_mqa_logits_configs(Arch{9, 0, true})) {
    std::string name = config.key();
    name = name.substr(0, name.rfind('.'));
    test::register_test("gpu " + name, "[gpu][logits][sparse]", [config] { run_configuration(config); });
  }
  return true;
}();

}  // namespace

TEST_CASE("gpu: sparse logits of an empty call write nothing, and a CUDA graph replays them with new candidates",
          "[gpu][logits][sparse]") {
  test::require_gpu();
  const SparsePagedMqaLogitsConfig config{64, 128, 8, false, LogitsDType::f16, KvFormat::fp8, {}};
  std::mt19937_64 rng(test::fresh_seed());
  ck::LogitsCase c;
  c.config = {1, 64, 128, 64, false, LogitsDType::f16, {}, PagedMqaLogitsVariant::portable};
  c.lens_2d = false;
  c.lengths = {3000, 1000};
  c.seed = rng();
  const ck::HostInputs host = ck::make_inputs(c);
  ck::DeviceInputs d = ck::upload(host, c);
  const ck::LogitsViews v = ck::views(d, host, c);
  const int C = 64;
  std::vector<std::int32_t> cand(2 * C);
  for (auto& x : cand) x = static_cast<std::int32_t>(rng() % 120);
  ck::DeviceBuffer dc = ck::DeviceBuffer::from(cand);
  ck::DeviceBuffer out(2 * C * 8 * 2);
  out.fill(ck::kPoison);
  const TensorView cv = TensorView::contiguous(dc.data(), DType::i32, {2, C});
  const TensorView ov = TensorView::contiguous(out.data(), DType::f16, {2, C * 8});
  // Zero candidates: nothing written.
  sparse_paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table,
                          TensorView::contiguous(dc.data(), DType::i32, {2, 0}), 8,
                          TensorView::contiguous(out.data(), DType::f16, {2, 0}), session().stream());
  session().synchronize();
  for (std::uint8_t b : out.to_host<std::uint8_t>(out.bytes())) REQUIRE(b == ck::kPoison);
  // Captured once, replayed after the candidates changed: the replay reads the new ones.
  warm_sparse_paged_mqa_logits(config);
  const std::vector<std::uint8_t> before = [&] {
    sparse_paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, 8, ov, session().stream());
    session().synchronize();
    return out.to_host<std::uint8_t>(out.bytes());
  }();
  const auto& cu = driver::api();
  CUstream stream = session().stream();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  FI_CU(cuStreamBeginCapture, "test", stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  sparse_paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, 8, ov, stream);
  FI_CU(cuStreamEndCapture, "test", stream, &graph);
  FI_CU(cuGraphInstantiate, "test", &exec, graph, 0);
  std::reverse(cand.begin(), cand.end());
  dc.upload(cand.data(), cand.size() * 4);
  out.fill(ck::kPoison);
  FI_CU(cuGraphLaunch, "test", exec, stream);
  session().synchronize();
  const std::vector<std::uint8_t> replayed = out.to_host<std::uint8_t>(out.bytes());
  sparse_paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, 8, ov, session().stream());
  session().synchronize();
  CHECK(out.to_host<std::uint8_t>(out.bytes()) == replayed);
  CHECK(replayed != before);
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(graph);
}

namespace {

// DecodePlan::run_second_level for one batch: its logits are bitwise the sparse op's with masked columns
// NaN, its indices the reference top-k of those logits mapped through the candidates to positions.
void check_second_level(const DecodePlan& plan, const ck::LogitsCase& c, const ck::HostInputs& host, const ck::LogitsViews& v,
                        ck::DeviceBuffer& dc, const std::vector<std::int32_t>& candidates, ck::DeviceBuffer& indices,
                        bool run_eagerly) {
  const DecodePlanConfig& pc = plan.config();
  const int rows = host.batch * pc.next_n, C = pc.candidates, block = pc.candidate_block;
  const std::int64_t columns = static_cast<std::int64_t>(C) * block;
  const TensorView cv = TensorView::contiguous(dc.data(), DType::i32, {rows, C});
  const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {rows, pc.k});
  if (run_eagerly) {
    indices.fill(ck::kPoison);
    const TensorView pl = plan.logits(host.batch);
    FI_CU(cuMemsetD8Async, "test", reinterpret_cast<CUdeviceptr>(pl.data), ck::kPoison,
          static_cast<std::size_t>(pl.numel()) * dtype_size(pl.dtype), session().stream());
    if (pc.kv == KvFormat::mxfp4)
      plan.run_second_level(v.q, v.q_scales, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, iv, session().stream());
    else plan.run_second_level(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, iv, session().stream());
  }
  session().synchronize();
  const std::size_t elem = pc.logits == LogitsDType::f32 ? 4 : 2;
  const std::vector<std::uint8_t> got = [&] {
    std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * columns) * elem);
    driver::check(driver::api().cuMemcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(plan.logits(host.batch).data), out.size()),
                  "cuMemcpyDtoH");
    return out;
  }();
  ck::DeviceBuffer direct(static_cast<std::size_t>(rows * columns) * elem + 16);
  direct.fill(ck::kPoison);
  SparsePagedMqaLogitsOptions so;
  so.q_scales = v.q_scales;
  so.masked_nan = true;
  sparse_paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, block,
                          TensorView::contiguous(direct.data(), tensor_dtype(pc.logits), {rows, columns}), session().stream(),
                          so);
  session().synchronize();
  const std::vector<std::uint8_t> want_logits = direct.to_host<std::uint8_t>(got.size());
  REQUIRE(got == want_logits);
  std::vector<float> stored(static_cast<std::size_t>(rows * columns));
  for (std::size_t i = 0; i < stored.size(); ++i) stored[i] = stored_value(got, pc.logits, static_cast<std::int64_t>(i));
  const ref::TopkResult cols = ref::topk(stored, columns, columns, std::vector<std::int64_t>(rows, columns), pc.k, true);
  std::vector<std::int32_t> want = ref::sparse_positions(cols.indices, pc.k, candidates.data(), C, block);
  std::vector<std::int32_t> have = indices.to_host<std::int32_t>(want.size());
  if (!pc.sorted)  // the order of an unsorted plan is the selector's, compared as sets
    for (int r = 0; r < rows; ++r) {
      std::sort(want.begin() + static_cast<std::ptrdiff_t>(r) * pc.k, want.begin() + static_cast<std::ptrdiff_t>(r + 1) * pc.k);
      std::sort(have.begin() + static_cast<std::ptrdiff_t>(r) * pc.k, have.begin() + static_cast<std::ptrdiff_t>(r + 1) * pc.k);
    }
  INFO(ck::describe(c) << " C " << C << " block " << block << " k " << pc.k);
  REQUIRE(have == want);
}

}  // namespace

TEST_CASE("gpu: DecodePlan's second level (config.candidates) equals the reference top-k over the candidates",
          "[gpu][plan][sparse]") {
  test::require_gpu();
  std::mt19937_64 rng(test::fresh_seed());
  struct Case {
    DecodePlanConfig pc;
    std::vector<int> lengths;
  };
  auto config = [](int max_batch, int next_n, int heads, int k, LogitsDType logits, KvFormat kv, int C, int block, bool sorted) {
    DecodePlanConfig pc{max_batch, next_n, heads, 128, k, logits, 4096, true, false, sorted, kv};
    pc.candidates = C;
    pc.candidate_block = block;
    return pc;
  };
  const Case cases[] = {
      {config(4, 2, 64, 50, LogitsDType::f32, KvFormat::fp8, 37, 8, false), {700, 0, 2000, 65}},
      {config(3, 1, 32, 64, LogitsDType::f16, KvFormat::mxfp4, 20, 16, true), {300, 5000, 17}},
      {config(2, 3, 64, 300, LogitsDType::bf16, KvFormat::fp8, 133, 8, true), {1500, 70}},
  };
  for (const Case& k : cases) {
    const DecodePlanConfig& pc = k.pc;
    DecodePlan plan(pc);
    CHECK(plan.width() == static_cast<std::int64_t>(pc.candidates) * pc.candidate_block);
    CHECK(plan.workspace_bytes() == DecodePlan::required_bytes(pc));
    ck::LogitsCase c;
    c.config = {pc.next_n, pc.heads, pc.head_dim, 64, false, pc.logits, {}, PagedMqaLogitsVariant::automatic, pc.kv};
    c.lens_2d = false;
    c.lengths = k.lengths;
    c.seed = rng();
    ck::HostInputs host = ck::make_inputs(c);
    ck::DeviceInputs d = ck::upload(host, c);
    const ck::LogitsViews v = ck::views(d, host, c);
    const ref::PagedMqaLogitsInputs in = host.reference_view(c);
    const int rows = host.batch * pc.next_n;
    std::vector<std::int64_t> lens(rows);
    for (int r = 0; r < rows; ++r) lens[r] = ref::row_length(in, r / pc.next_n, r % pc.next_n);
    std::vector<std::int32_t> candidates = make_candidates(lens, pc.candidates, pc.candidate_block, rng);
    ck::DeviceBuffer dc = ck::DeviceBuffer::from(candidates);
    ck::DeviceBuffer indices(static_cast<std::size_t>(pc.max_batch) * pc.next_n * pc.k * 4);
    check_second_level(plan, c, host, v, dc, candidates, indices, true);

    // A full-context call on this plan, and this plan's call with the wrong candidates, are rejected and
    // change no byte.
    indices.fill(ck::kPoison);
    const TensorView iv = TensorView::contiguous(indices.data(), DType::i32, {rows, pc.k});
    const TensorView cv = TensorView::contiguous(dc.data(), DType::i32, {rows, pc.candidates});
    if (pc.kv == KvFormat::fp8) {
      CHECK_THROWS_WITH(plan.run(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, iv, session().stream()),
                        test::Contains("its runs take the candidates (run_second_level"));
      CHECK_THROWS_WITH(
          plan.run_second_level(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table,
                                TensorView::contiguous(dc.data(), DType::i32, {rows, pc.candidates - 1}), iv, session().stream()),
          test::Contains("candidates"));
      DecodePlanConfig full = pc;
      full.candidates = 0;
      full.max_context = 8192;
      const DecodePlan full_plan(full);
      CHECK_THROWS_WITH(
          full_plan.run_second_level(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, iv, session().stream()),
          test::Contains("config.candidates = 0"));
    }
    session().synchronize();
    for (std::uint8_t b : indices.to_host<std::uint8_t>(static_cast<std::size_t>(rows) * pc.k * 4)) REQUIRE(b == ck::kPoison);

    // Captured once; replayed with new candidates and new lengths.
    CUstream stream = session().stream();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    FI_CU(cuStreamBeginCapture, "test", stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    if (pc.kv == KvFormat::mxfp4)
      plan.run_second_level(v.q, v.q_scales, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, iv, stream);
    else plan.run_second_level(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, cv, iv, stream);
    FI_CU(cuStreamEndCapture, "test", stream, &graph);
    FI_CU(cuGraphInstantiate, "test", &exec, graph, 0);
    for (int replay = 0; replay < 2; ++replay) {
      INFO("replay " << replay);
      for (auto& len : host.context_lens) len = static_cast<std::int32_t>(rng() % (len + 1));
      d.context_lens.upload(host.context_lens.data(), host.context_lens.size() * 4);
      const ref::PagedMqaLogitsInputs now = host.reference_view(c);
      for (int r = 0; r < rows; ++r) lens[r] = ref::row_length(now, r / pc.next_n, r % pc.next_n);
      candidates = make_candidates(lens, pc.candidates, pc.candidate_block, rng);
      dc.upload(candidates.data(), candidates.size() * 4);
      indices.fill(ck::kPoison);
      FI_CU(cuGraphLaunch, "test", exec, stream);
      check_second_level(plan, c, host, v, dc, candidates, indices, false);
    }
    driver::api().cuGraphExecDestroy(exec);
    driver::api().cuGraphDestroy(graph);
  }
}
