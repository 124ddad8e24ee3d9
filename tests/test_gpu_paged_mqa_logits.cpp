// GPU tests of paged_mqa_logits against the CPU reference: every configuration, fresh random inputs,
// ragged lengths (0, 1, 63, 64, 65, ...), shuffled block ids, poisoned outputs, NaN weights, the whole
// FP8 range, invalid block ids, CUDA-graph replay with new lengths and block tables.
#include "catch_compat.hpp"

#include <algorithm>
#include <random>

#include "driver.hpp"
#include "flash_indexer/error.hpp"
#include "kernel_registry.hpp"
#include "logits_check.hpp"
#include "paged_mqa_logits_call.hpp"
#include "test_support.hpp"

using namespace flash_indexer;
namespace ck = flash_indexer::check;

namespace {

using test::fresh_seed;
ck::GpuSession& session() { return test::gpu_session(); }

// `live`: the case has live logits, so a comparison that checked none means the test did nothing.
void require_pass(const ck::Comparison& r, bool live = true) {
  INFO(r.failure);
  if (live) CHECK(r.checked > 0);
  REQUIRE(r.passed);
}

// Ragged lengths with the edge values, per row (2-D) or per request (1-D).
std::vector<int> ragged_lengths(int count, std::mt19937_64& rng) {
  std::vector<int> lens = {0, 1, 63, 64, 65, 128, 129, 300};
  std::uniform_int_distribution<int> extra(0, 400);
  while (static_cast<int>(lens.size()) < count) lens.push_back(extra(rng));
  std::shuffle(lens.begin(), lens.end(), rng);
  lens.resize(count);
  return lens;
}

void run_configuration(const PagedMqaLogitsConfig& config) {
  test::require_gpu();
  std::mt19937_64 rng(fresh_seed());
  {  // 2-D lengths, ragged, every edge value somewhere
    ck::LogitsCase c;
    c.config = config;
    c.lens_2d = true;
    c.lengths = ragged_lengths(std::max(8, 3 * config.next_n), rng);
    while (c.lengths.size() % config.next_n) c.lengths.pop_back();
    c.seed = rng();
    require_pass(ck::run_logits_case(session(), c));
  }
  {  // 1-D lengths (MTP rule), fill_masked, a NaN weight in one row
    ck::LogitsCase c;
    c.config = config;
    c.lens_2d = false;
    c.lengths = ragged_lengths(5, rng);
    c.fill_masked = true;
    c.nan_weight_row = static_cast<int>(rng() % (5 * config.next_n));
    c.seed = rng();
    require_pass(ck::run_logits_case(session(), c));
  }
  {  // raw FP8 bytes over the whole range (FP16 overflow to inf), no row padding, unpadded blocks
    ck::LogitsCase c;
    c.config = config;
    c.lengths = {static_cast<int>(rng() % 200 + 64) * config.next_n, 65 * config.next_n};
    c.lens_2d = false;
    c.wide_values = true;
    c.row_padding = 0;
    c.block_stride_padding = 0;
    c.seed = rng();
    require_pass(ck::run_logits_case(session(), c));
  }
  if (config.variant == PagedMqaLogitsVariant::sm90) {
    // CTAs of 16 blocks: each consumer takes 4-8 of them. The producer starts after the CTA's barrier
    // here (the library's choice for long grids at one CTA per SM); every case above is one wave, where
    // the kernels that can fill their first stages before the barrier do.
    ck::LogitsCase c;
    c.config = config;
    c.lens_2d = false;
    c.lengths = {(2 * 16 + 5) * 64 + static_cast<int>(rng() % 64), 17 * 64 - 1};
    c.blocks_per_split = 16;
    c.fill_before_barrier = 0;
    c.seed = rng();
    require_pass(ck::run_logits_case(session(), c));
  }
  if (config.variant == PagedMqaLogitsVariant::sm90 &&
      kernels::sm90_paged_form(config.next_n, config.heads, config.kv == KvFormat::mxfp4).has_ranges) {
    // The kernels that take ranges of blocks across requests (one CTA: every request in turn, the ring,
    // the query and the weights reused many times; five: ranges that start and end inside requests),
    // ragged lengths with 0 and one-block requests, -inf past the lengths, a NaN weight.
    for (const int ctas : {1, 5}) {
      ck::LogitsCase c;
      c.config = config;
      c.lens_2d = false;
      c.lengths = {static_cast<int>(rng() % 2000) + 600, 0, 64 * 9 - 1, 64, 1, static_cast<int>(rng() % 4000) + 2000, 700};
      c.fill_masked = true;
      c.nan_weight_row = static_cast<int>(rng() % (c.lengths.size() * config.next_n));
      c.ranges_ctas = ctas;
      c.seed = rng();
      INFO(ctas << " CTAs");
      require_pass(ck::run_logits_case(session(), c));
    }
  }
}

const bool registered = [] {
  for (const PagedMqaLogitsConfig& config : supported_paged_mqa_logits_configs(Arch{9, 0, true})) {
    test::register_test("gpu " + test::config_name(config), "[gpu][logits]", [config] { run_configuration(config); });
    // next_n 5-6 at H 64 run the next_n = 1 sm90 kernel's rows (kernels::sm90_n_wide), which the catalog
    // lists only as itself: their own cases.
    if (config.variant == PagedMqaLogitsVariant::sm90 && config.next_n == 1 && !kernels::sm90_n_wide(6, config.heads))
      for (const int next_n : {5, 6}) {
        PagedMqaLogitsConfig rows = config;
        rows.next_n = next_n;
        test::register_test("gpu " + test::config_name(rows), "[gpu][logits]", [rows] { run_configuration(rows); });
      }
  }
  return true;
}();

}  // namespace

namespace {
// Whether the library runs this call over ranges of blocks across requests (one CTA per SM,
// kernels/paged_mqa_logits_sm90_ranges.cuh): the tests below ask for both grids.
bool library_takes_ranges(const ck::LogitsCase& c, const ck::LogitsViews& v) {
  PagedMqaLogitsOptions options;
  options.fill_masked = c.fill_masked;
  const PagedMqaLogitsCall call =
      check_paged_mqa_logits("test", v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, options);
  return !call.empty() && prepare_paged_mqa_logits("test", call, session().stream(), true).sm90_params.ranges != 0;
}
}  // namespace

// B 4: the split grid; B 140 x 24 blocks at n2 h64: the ranges grid on an H200 / H100 (more than one
// wave of splits, too many blocks for next_n = 1 rows), the bad ids in ranges that start inside a request.
TEST_CASE("gpu: block ids outside the cache in the live range give NaN and never a fault", "[gpu][logits]") {
  test::require_gpu();
  std::mt19937_64 rng(fresh_seed());
  for (const int batch : {4, 140}) {
    ck::LogitsCase c;
    c.config = {2, 64, 128, 64, false, LogitsDType::f32, {}};
    c.lengths = {300, 290, 200, 130};
    for (int i = 4; i < 2 * batch; ++i) c.lengths.push_back(static_cast<int>(rng() % 1400) + 130);
    if (batch == 140) c.width = 24 * 64;
    c.seed = rng();
    INFO(ck::describe(c));
    ck::HostInputs in = ck::make_inputs(c);
    in.block_table[0 * in.max_blocks + 1] = -5;
    in.block_table[1 * in.max_blocks + 0] = in.num_blocks;
    in.block_table[1 * in.max_blocks + 2] = 1 << 30;
    in.block_table[static_cast<std::size_t>(batch - 1) * in.max_blocks + 1] = -1;
    ck::DeviceInputs d = ck::upload(in, c);
    d.logits.fill(ck::kPoison);
    const ck::LogitsViews v = ck::views(d, in, c);
    if (batch == 140 && session().arch().name() == "sm_90a") REQUIRE(library_takes_ranges(c, v));
    paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, session().stream());
    session().synchronize();
    require_pass(ck::compare_logits(c, in, d.logits.to_host<std::uint8_t>(d.logits.bytes())));
  }
}

TEST_CASE("gpu: many requests (B = 1000) with short rows", "[gpu][logits]") {
  test::require_gpu();
  std::mt19937_64 rng(fresh_seed());
  ck::LogitsCase c;
  c.config = {1, 32, 128, 64, false, LogitsDType::f16, {}};
  c.lengths.resize(1000);
  for (auto& l : c.lengths) l = static_cast<int>(rng() % 100);
  c.lens_2d = false;
  c.seed = rng();
  require_pass(ck::run_logits_case(session(), c));
}

TEST_CASE("gpu: a CUDA graph captured once replays correctly with new lengths and block tables", "[gpu][logits]") {
  test::require_gpu();
  const auto& cu = driver::api();
  std::mt19937_64 rng(fresh_seed());
  // B 4: the split grid; B 150 x 24 blocks: the ranges grid on an H200 / H100 (more than one wave of
  // splits, too many blocks for next_n = 1 rows).
  for (const int batch : {4, 150}) {
    ck::LogitsCase c;
    c.config = {2, 64, 128, 64, false, LogitsDType::f16, {}};
    c.lens_2d = true;
    c.lengths = {700, 701, 0, 1, 64, 65, 500, 3};
    c.lengths.resize(2 * batch, 200);
    c.width = batch == 150 ? 24 * 64 : 1024;
    c.spare_blocks = 12 * batch;  // the replays' tables take 12 blocks per request
    c.fill_masked = true;
    c.seed = rng();
    INFO(ck::describe(c));
    ck::HostInputs in = ck::make_inputs(c);
    ck::DeviceInputs d = ck::upload(in, c);
    const ck::LogitsViews v = ck::views(d, in, c);
    PagedMqaLogitsOptions options;
    options.fill_masked = true;
    if (batch == 150 && session().arch().name() == "sm_90a") REQUIRE(library_takes_ranges(c, v));

    // Warm (load) outside the capture, then capture one launch.
    paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, session().stream(), options);
    CUstream stream = session().stream();
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    FI_CU(cuStreamBeginCapture, "test", stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, stream, options);
    FI_CU(cuStreamEndCapture, "test", stream, &graph);
    FI_CU(cuGraphInstantiate, "test", &exec, graph, 0);

    for (int replay = 0; replay < 4; ++replay) {
      INFO("replay " << replay);
      // New lengths (up to the captured width) and a reshuffled block table, uploaded into the same buffers.
      for (auto& len : c.lengths) len = static_cast<int>(rng() % 760);
      if (replay == 0) std::fill(c.lengths.begin(), c.lengths.end(), 0);
      in.context_lens.assign(c.lengths.begin(), c.lengths.end());
      ck::reshuffle_block_table(in, rng(), 12, std::numeric_limits<std::int32_t>::max());
      d.context_lens.upload(in.context_lens.data(), in.context_lens.size() * 4);
      d.block_table.upload(in.block_table.data(), in.block_table.size() * 4);
      d.logits.fill(ck::kPoison);
      FI_CU(cuGraphLaunch, "test", exec, stream);
      session().synchronize();
      // Replay 0 has only zero lengths: every column must then be -inf (fill_masked), which compare checks.
      require_pass(ck::compare_logits(c, in, d.logits.to_host<std::uint8_t>(d.logits.bytes())), replay != 0);
    }
    cu.cuGraphExecDestroy(exec);
    cu.cuGraphDestroy(graph);
  }
}

TEST_CASE("gpu: loading a kernel while the stream is capturing is refused with a clear error", "[gpu][logits]") {
  test::require_gpu();
  CUstream stream = session().stream();
  FI_CU(cuStreamBeginCapture, "test", stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  std::string message;
  try {
    require_not_capturing(stream, "some.kernel.key");
  } catch (const Error& e) {
    message = e.what();
  }
  CUgraph graph = nullptr;
  FI_CU(cuStreamEndCapture, "test", stream, &graph);
  if (graph != nullptr) driver::api().cuGraphDestroy(graph);
  CHECK_THAT(message, flash_indexer::test::Contains("some.kernel.key") && flash_indexer::test::Contains("warm"));
}

// Which CTA (and which of its consumer warpgroups) takes a block must not change a logit's bytes: the
// same inputs under CTAs of 1 to 256 blocks (each consumer then takes up to 128 blocks, the ring wraps),
// with the first stages filled after or before the CTA's barrier, and over ranges of 1 to 132 CTAs.
// The MXFP4 form too, with per-group exponents (its consumers take several blocks each and convert each
// into the same fragment registers).
TEST_CASE("gpu: sm90 logits bytes do not depend on the split", "[gpu][logits]") {
  test::require_gpu();
  if (session().arch().name() != "sm_90a") test::skip("the sm90 kernel needs sm_90a");
  std::mt19937_64 rng(fresh_seed());
  for (const KvFormat kv : {KvFormat::fp8, KvFormat::mxfp4})
    for (const auto& [next_n, heads] :
         {std::pair{1, 64}, std::pair{2, 64}, std::pair{3, 32}, std::pair{4, 64}, std::pair{5, 32}, std::pair{6, 64}}) {
      ck::LogitsCase c;
      c.config = {next_n, heads, 128, 64, false, LogitsDType::f16, {}};
      c.config.variant = PagedMqaLogitsVariant::sm90;
      c.config.kv = kv;
      c.lens_2d = false;
      c.lengths = {17930, 0, 4604 + static_cast<int>(rng() % 64)};
      c.seed = rng();
      INFO(ck::describe(c));
      const ck::HostInputs in = ck::make_inputs(c);
      ck::DeviceInputs d = ck::upload(in, c);
      const ck::LogitsViews v = ck::views(d, in, c);
      const std::vector<std::uint8_t> automatic = ck::logits_bytes(session(), c, d, v);
      for (const int blocks : {1, 6, 11, 16, 64, 100, 256})
        for (const int early : {0, 1}) {  // the producer's first stages after / before the CTA's barrier
          INFO(blocks << " blocks per CTA, fill_before_barrier " << early);
          c.blocks_per_split = blocks;
          c.fill_before_barrier = early;
          CHECK(ck::logits_bytes(session(), c, d, v) == automatic);
        }
      c.blocks_per_split = 0;
      c.fill_before_barrier = -1;
      if (kernels::sm90_paged_form(next_n, heads, kv == KvFormat::mxfp4).has_ranges)
        for (const int ctas : {1, 2, 7, 40, 132}) {  // ranges across requests, which split requests anywhere
          INFO("ranges over " << ctas << " CTAs");
          c.ranges_ctas = ctas;
          CHECK(ck::logits_bytes(session(), c, d, v) == automatic);
        }
    }
}

// The kernel the library picks on the device (sm90 on H100/H200 for next_n <= 6) on every run of the
// same inputs: the same logits bytes and the same histogram, 20 times.
TEST_CASE("gpu: logits and histogram are bitwise identical over 20 runs", "[gpu][logits]") {
  test::require_gpu();
  std::mt19937_64 rng(fresh_seed());
  for (int next_n : {1, 2, 3, 4}) {
    for (LogitsDType out : {LogitsDType::f32, LogitsDType::bf16}) {
      ck::LogitsCase c;
      c.config = {next_n, next_n == 3 ? 32 : 64, 128, 64, true, out, {}};
      c.config.variant = PagedMqaLogitsVariant::automatic;
      c.lens_2d = false;
      c.lengths = {static_cast<int>(rng() % 5000) + 3000, 0, 700, static_cast<int>(rng() % 9000)};
      c.fill_masked = true;
      c.seed = rng();
      INFO(ck::describe(c));
      const ck::HostInputs in = ck::make_inputs(c);
      ck::DeviceInputs d = ck::upload(in, c);
      const ck::LogitsViews v = ck::views(d, in, c);
      const std::int64_t rows = static_cast<std::int64_t>(in.batch) * next_n;
      ck::DeviceBuffer hist(static_cast<std::size_t>(rows) * kCoarseBins * 4);
      PagedMqaLogitsOptions options;
      options.fill_masked = true;
      options.histogram = TensorView::contiguous(hist.data(), DType::i32, {rows, kCoarseBins});
      std::vector<std::uint8_t> first_logits;
      std::vector<std::int32_t> first_hist;
      for (int run = 0; run < 20; ++run) {
        d.logits.fill(ck::kPoison);
        hist.fill(0);
        paged_mqa_logits(v.q, v.kv_cache, v.weights, v.context_lens, v.block_table, v.logits, session().stream(), options);
        session().synchronize();
        auto logits = d.logits.to_host<std::uint8_t>(d.logits.bytes());
        auto counts = hist.to_host<std::int32_t>(static_cast<std::size_t>(rows) * kCoarseBins);
        if (run == 0) {
          require_pass(ck::compare_logits(c, in, logits));
          CHECK(counts == ck::histogram_of(c, in, logits));
          first_logits = std::move(logits);
          first_hist = std::move(counts);
        } else {
          REQUIRE(logits == first_logits);
          REQUIRE(counts == first_hist);
        }
      }
    }
  }
}

TEST_CASE("gpu: B = 4096 short ragged requests (zeros included) and B = 1 with a long context", "[gpu][logits]") {
  test::require_gpu();
  std::mt19937_64 rng(fresh_seed());
  ck::LogitsCase many;
  many.config = {2, 64, 128, 64, true, LogitsDType::f16, {}};
  many.config.variant = PagedMqaLogitsVariant::automatic;
  many.lengths.resize(4096);
  for (auto& l : many.lengths) l = rng() % 4 == 0 ? 0 : static_cast<int>(rng() % 300);
  many.lens_2d = false;
  many.seed = rng();
  require_pass(ck::run_logits_case(session(), many));
  ck::LogitsCase one;
  one.config = {4, 32, 128, 64, true, LogitsDType::f32, {}};
  one.config.variant = PagedMqaLogitsVariant::automatic;
  one.lengths = {static_cast<int>(rng() % 20000) + 40000};
  one.lens_2d = false;
  one.fill_masked = true;
  one.width = 65536;
  one.seed = rng();
  require_pass(ck::run_logits_case(session(), one));
}
